"""What the benchmarks share: the code they prompt with, the machine line, device sync, progress on
stderr and the JSON-or-table report (`edit-server bench engine`, `bench_batch.py`, `edit_server/cli/bench_lsp.py`)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.engine import Engine

CODE = '''def merge_sorted(a: list[int], b: list[int]) -> list[int]:
    """Merge two sorted lists into one sorted list."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        if a[i] <= b[j]:
            out.append(a[i])
            i += 1
        else:
            out.append(b[j])
            j += 1
    return out + a[i:] + b[j:]


'''


def machine(device: Any) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"device": str(device), "torch": torch.__version__,
                            "python": platform.python_version(), "cpu_count": os.cpu_count(),
                            "torch_threads": torch.get_num_threads()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=5).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                info["cpu"] = line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        info["cpu"] = platform.processor()
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def prompt_ids(eng: Engine, n: int, salt: int = 0) -> list[int]:
    """``n`` tokens of real-looking code (repeated), for any tokenizer."""
    ids: list[int] = []
    unit = eng.tokenizer.encode(f"# file {salt}\n" + CODE)
    while len(ids) < n:
        ids.extend(unit)
    return ids[:n]


def sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def progress(msg: str) -> None:
    sys.stderr.write(f"[bench engine] {msg}\n")
    sys.stderr.flush()


def emit(report: dict[str, Any], as_json: bool, table: Callable[[dict[str, Any]], str]) -> int:
    """Print a benchmark's report to stdout: JSON, or the human-readable ``table(report)``. Exit code 0."""
    if as_json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(table(report))
    return 0
