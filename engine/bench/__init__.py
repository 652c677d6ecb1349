"""The engine's measurement kit, shared by `edit-server bench …` (edit_server/cli/bench_*.py) and the GPU
window's bench (`engine.train.recipe.bench_gpu`, which runs on a bare GPU image): the code the benchmarks
prompt with, device sync and peak memory. Needs only torch."""

from __future__ import annotations

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


def peak_memory(device: Any) -> dict[str, float]:
    import resource

    import torch

    out = {"peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if device.type == "cuda":
        out["cuda_peak_mb"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    return out
