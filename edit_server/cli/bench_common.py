"""What the benchmarks share beside the engine's measurement kit (`engine.bench`: the code they prompt with,
device sync, peak memory): the machine line, progress on stderr and the JSON-or-table report (`edit-server bench engine`, `bench_batch.py`, `edit_server/cli/bench_lsp.py`)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass


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
    from engine import options

    info["overrides"] = options.levers()  # $EDIT_SERVER_DECODE / _INT4 / … as set for this run
    return info


def overrides_text(mach: dict[str, Any]) -> str:
    """``; EDIT_SERVER_INT4=line …`` for a report's header line ("" when none was set)."""
    o = mach.get("overrides") or {}
    return "; " + " ".join(f"{k}={v}" for k, v in sorted(o.items())) if o else ""


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
