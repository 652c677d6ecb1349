"""What the benchmarks share: the code they prompt with, the machine line, device sync, progress on
stderr, the JSON-or-table report (`edit-server bench engine`, `bench_batch.py`, `edit_server/bench_lsp.py`)
and random-weight engines made on the meta device (`random_engine`: `bench engine`, `bench_gpu`)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from typing import Any

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


def prompt_ids(eng: Any, n: int, salt: int = 0) -> list[int]:
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


def random_engine(shape: str, device: str = "auto", dtype: str = "auto", *, seed: int = 0,
                  cuda_graphs: bool | None = None, fast_cpu: bool | None = None, model: Any = None) -> Any:
    """An `Engine` over seeded random weights of ``shape`` (a preset or registry name), built on the meta
    device and materialised once, on ``device`` in ``dtype`` (no host copy, no fp32 detour). ``model``: reuse
    these weights (another engine over the same model, e.g. CUDA graphs off)."""
    import torch

    from engine.engine import Engine
    from engine.model import Transformer
    from engine.specs import _random_args, resolve_device, resolve_dtype
    from engine.tokenizer import Tokenizer

    tok = Tokenizer.byte_level()
    args, label = _random_args(shape, tok)
    if model is None:
        dev = resolve_device(device)
        dt = resolve_dtype(dtype, dev)
        with torch.device("meta"):
            model = Transformer(args, init=False)
        model = model.to(dtype=dt).to_empty(device=dev)
        with torch.no_grad():
            for _, buf in model.named_buffers():
                buf.zero_()
        model.init_random(seed)
    return Engine(model, tok, name="tiny-random" if shape == "tiny" else f"random:{shape}", cuda_graphs=cuda_graphs,
                  fast_cpu=fast_cpu,
                  meta={"label": f"random weights (benchmarks), {label}", "seed": seed})


def model_bytes(shape: str, dtype_bytes: int = 2) -> int:
    """Bytes of ``shape``'s weights (built on the meta device: nothing is allocated)."""
    import torch

    from engine.model import Transformer
    from engine.specs import _random_args
    from engine.tokenizer import Tokenizer

    args, _ = _random_args(shape, Tokenizer.byte_level())
    with torch.device("meta"):
        m = Transformer(args, init=False)
    return sum(p.numel() for p in m.parameters()) * dtype_bytes
