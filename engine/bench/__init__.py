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


def prefill_cold_warm(eng: Engine, contexts: list[int], repeats: int = 1,
                      progress: Any = None) -> list[dict[str, Any]]:
    """Per context length: the prefill cold (empty cache) and warm (the same prompt after a 1-token edit at its
    end), median of ``repeats``. The warm edit is made twice and the second timed (``warm_first_ms``: the first,
    which on a GPU pays one-off costs of a new shape — hundreds of ms on an H200)."""
    from statistics import median

    from engine.types import CanvasSpec

    spec = CanvasSpec(eng.block_size)  # one block: the prefill is what is timed
    rows = []
    eng.generate(prompt_ids(eng, 64), spec)  # warm-up
    for n in contexts:
        colds, firsts, warms, recomputed = [], [], [], 0
        if progress is not None:
            progress(f"prefill {n} tokens: cold, then warm after a 1-token edit")
        for rep in range(repeats):
            key = f"bench:{n}:{rep}"
            eng.cache.clear()
            prompt = prompt_ids(eng, n, salt=rep)
            cold = eng.generate(prompt, spec, cache_key=key)
            # two different last tokens (a BPE vocabulary may hold "xyz" as one token: encode letter by letter)
            alts = list(dict.fromkeys(t for c in "xyz" for t in eng.tokenizer.encode(c) if t != prompt[-1]))[:2]
            first = eng.generate(prompt[:-1] + [alts[0]], spec, cache_key=key)
            warm = eng.generate(prompt[:-1] + [alts[-1]], spec, cache_key=key)
            colds.append(cold.timings["prefill_ms"])
            firsts.append(first.timings["prefill_ms"])
            warms.append(warm.timings["prefill_ms"])
            recomputed = warm.prompt_tokens - warm.cached_tokens
        c, w = median(colds), median(warms)
        rows.append({"context": n, "cold_ms": round(c, 2), "warm_ms": round(w, 2),
                     "warm_first_ms": round(median(firsts), 2), "recomputed": recomputed,
                     "recomputed_frac": round(recomputed / n, 5), "speedup": round(c / max(w, 1e-6), 1)})
        eng.cache.clear()
    return rows
