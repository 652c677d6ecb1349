"""What the `edit-server eval` commands share: the server's initializationOptions, the progress bar, the
summary printed at the end."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def init_options(args: argparse.Namespace) -> dict[str, Any]:
    """initializationOptions beyond model/device/gate: eval runs never write the user's feedback DB."""
    opts: dict[str, Any] = {"feedbackDb": ":memory:"}
    if getattr(args, "max_tokens", None):
        opts["maxTokens"] = args.max_tokens
    if getattr(args, "context_budget", None):
        opts["contextBudget"] = args.context_budget
    for item in getattr(args, "init_option", []):
        key, sep, val = item.partition("=")
        if not sep:
            raise SystemExit(f"--init-option expects KEY=JSON, got {item!r}")
        try:
            value = json.loads(val)
        except json.JSONDecodeError:
            value = val
        *parents, leaf = key.split(".")  # gate.calibration=... -> {"gate": {"calibration": ...}}
        node = opts
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise SystemExit(f"--init-option {key}: {part} is not an object")
        node[leaf] = value
    return opts


def progress_bar(args: argparse.Namespace, desc: str):
    if args.no_progress:
        return lambda it: it

    def wrap(it: Iterable) -> Iterable:
        from tqdm import tqdm

        return tqdm(it, desc=desc, file=sys.stderr, dynamic_ncols=True)
    return wrap


def print_summary(title: str, summary: dict[str, Any], out: Path) -> None:
    print(title)
    for k, v in summary.items():
        print(f"  {k:22s} {v:.4f}" if isinstance(v, float) else f"  {k:22s} {v}")
    print(f"report: {out / 'summary.md'} ({out / 'report.json'})")
