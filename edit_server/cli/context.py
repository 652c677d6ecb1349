"""`edit-server context FILE:LINE:COL`: show what would be sent for that cursor, and what was excluded.

The server's prompt for the same settings: the settings come through ``build_settings`` (``--config``,
``--set``, ``--model``, ``--device``, ``--budget`` = ``contextBudget``), the builder's options and budget
through ``serving/contexts.make_context``, as the server's worker makes them. Counts use the model's
tokenizer when a model is named (``--model``, or ``model`` in ``--set`` / ``--config``: only then is torch
imported and the model loaded on the settings' device); otherwise the byte-level test tokenizer, and an
auto budget as for an unknown model on a CPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edit_server.serving.contexts import BuilderContext


def register(sub: argparse._SubParsersAction) -> None:
    from edit_server.cli.flags import settings_flags

    p = sub.add_parser("context", help="show the prompt sections for a cursor (transparency)")
    p.add_argument("location", help="FILE:LINE:COL (1-based)")
    p.add_argument("--kind", choices=["fim", "edit"], default="fim")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--budget", type=int, default=None,
                   help="total prompt tokens: the contextBudget setting (default: the server's auto budget)")
    settings_flags(p, config=True)
    p.add_argument("--root", action="append", type=Path, help="workspace root (default: git top / dir)")
    p.add_argument("--exclude", action="append", default=[],
                   help="exclude glob, besides the exclude setting's")
    p.add_argument("--show-text", action="store_true", help="print each section's text too")
    p.set_defaults(func=run)


def parse_location(loc: str) -> tuple[Path, int, int]:
    parts = loc.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        raise ValueError(f"expected FILE:LINE:COL, got {loc!r}")
    return Path(parts[0]), int(parts[1]), int(parts[2])


def _default_root(path: Path) -> Path:
    from edit_server.context.safegit import SafeGit

    repo = SafeGit.discover(path.parent)
    return repo.top if repo is not None else path.parent


def server_context(args: argparse.Namespace, roots: list[Path]) -> BuilderContext:
    """The server's context builder for these flags over ``roots``: settings by ``build_settings``, options
    and budget by ``make_context`` (the worker's). Raises ValueError for bad settings."""
    import msgspec

    from edit_server.cli.flags import config_options, settings_from_args
    from edit_server.core.settings import parse_set
    from edit_server.serving.contexts import make_context

    settings = settings_from_args(args, {"contextBudget": args.budget} if args.budget is not None else None)
    if args.exclude:
        settings = msgspec.structs.replace(settings, exclude=[*settings.exclude, *args.exclude])
    named = args.model or "model" in parse_set(args.set) or "model" in (config_options(args) or {})
    if named:
        from engine import Engine

        return make_context(settings, roots, Engine.load(settings.model, device=settings.device))
    from engine.tokenizer import Tokenizer

    return make_context(settings, roots, None, Tokenizer.byte_level())


def run(args: argparse.Namespace) -> int:
    try:
        path, line, col = parse_location(args.location)
        text = path.read_text(encoding="utf-8")
    except (ValueError, OSError) as e:
        print(f"edit-server context: {e}", file=sys.stderr)
        return 2
    lines = text.splitlines(keepends=True) or [""]
    line = min(max(line, 1), len(lines) + 1)
    offset = sum(len(x) for x in lines[: line - 1]) + min(col - 1, len(lines[line - 1].rstrip("\n"))
                                                        if line - 1 < len(lines) else 0)
    try:
        ctx = server_context(args, args.root or [_default_root(path.resolve())])
    except ValueError as e:
        print(f"edit-server context: {e}", file=sys.stderr)
        return 2
    b = ctx.builder
    if b.degraded:
        print(f"edit-server context: degraded: {b.degraded}", file=sys.stderr)
    b.refresh_git(str(path.resolve()))
    b.wait_idle(60)
    fn = b.build_fim if args.kind == "fim" else b.build_edit
    build = fn(str(path.resolve()), text, offset, [], budget=ctx.budget)
    b.close()
    prompt, rep = build.prompt, build.report
    if args.json:
        print(json.dumps({"prompt": asdict(prompt), "report": asdict(rep)}, indent=1))
        return 0
    print(f"{args.kind} context for {rep.path} line {line} col {col}: {rep.total} / {rep.budget} tokens "
          f"(counting: {rep.counting}; fixed {rep.fixed}; built in {rep.ms:.1f} ms)")
    if rep.blocked:
        print(f"no context sent: {rep.blocked}")
    lo, hi = rep.window_lines
    print(f"\n{'source':<12} {'kind':<11} {'tokens':>7} {'allowed':>8}  path")
    print(f"{'window':<12} {'window':<11} {rep.window.used:>7} {rep.window.allowed:>8}  "
          f"{rep.path} lines {lo + 1}-{hi}")
    if rep.region_lines:
        print(f"{'region':<12} {'edit':<11} {'':>7} {'':>8}  {rep.path} lines "
              f"{rep.region_lines[0] + 1}-{rep.region_lines[1]}{' (redacted)' if rep.redacted_region else ''}")
    for s in rep.sources:
        if not s.items:
            print(f"{s.name:<12} {'-':<11} {0:>7} {s.allowed:>8}")
        for kind, p, n in s.items:
            print(f"{s.name:<12} {kind:<11} {n:>7} {s.allowed:>8}  {p}")
    if args.show_text:
        for s in prompt.sections:
            print(f"\n--- {s.kind}: {s.path}\n{s.text}", end="")
    if rep.excluded:
        print("\nexcluded:")
        for p, why in sorted(rep.excluded.items()):
            print(f"  {p}: {why}")
    if not rep.git_ready:
        print("\n(git history not loaded)")
    return 0
