"""`edit-server bench engine --batch 1,4,8`: batched vs one-by-one decoding of in-place canvases.

For each batch size k it builds k infilling requests (different prompts of ``--prompt`` tokens, a
masked span of ``--tokens`` positions, a suffix of a quarter of the prompt after it: the layout of
`engine.formats.infill`) and times them as one `Engine.generate_batch` call vs k calls in a row, with
the Fast-dLLM dual cache on and off. Greedy, so both give the same tokens (checked). Bidirectional
models batch every step into one forward (`engine.decoding.bidir`); block-causal ones get no suffix.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from edit_server.cli.bench_common import progress
from engine.bench import prompt_ids, sync

if TYPE_CHECKING:
    from engine.engine import Engine


def _requests(eng: Engine, k: int, n_prompt: int, n_tokens: int) -> list[Any]:
    from engine.calls import FormatRequest
    from engine.types import CanvasSpec, SamplerConfig

    bidir = eng.args.attention == "bidirectional"
    cfg = SamplerConfig()
    out = []
    for i in range(k):
        ids = prompt_ids(eng, n_prompt + n_prompt // 4, salt=i)
        after = ids[n_prompt:] if bidir else []
        out.append(FormatRequest(ids[:n_prompt], CanvasSpec(n_tokens, stop_at_end=False), cfg, after=after))
    return out


def bench_batch(eng: Engine, sizes: list[int], n_prompt: int, n_tokens: int) -> list[dict[str, Any]]:
    rows = []
    approx0 = eng.approx_cache
    for approx in ((True, False) if eng.args.attention == "bidirectional" else (approx0,)):
        eng.approx_cache = approx
        eng.generate_batch(_requests(eng, 1, n_prompt, 4))  # warm-up
        for k in sizes:
            progress(f"batch {k}, dual cache {'on' if approx else 'off'}")
            reqs = _requests(eng, k, n_prompt, n_tokens)
            sync(eng.device)
            t0 = time.perf_counter()
            seq = [eng.generate_batch([r])[0] for r in reqs]
            sync(eng.device)
            t1 = time.perf_counter()
            bat = eng.generate_batch(reqs)
            sync(eng.device)
            t2 = time.perf_counter()
            toks = sum(len(r.tokens) for r in bat)
            rows.append({"batch": k, "approx_cache": approx, "tokens": toks,
                         "same_tokens": [r.tokens for r in seq] == [r.tokens for r in bat],
                         "sequential_ms": round((t1 - t0) * 1e3, 1), "batched_ms": round((t2 - t1) * 1e3, 1),
                         "sequential_tok_s": round(toks / (t1 - t0), 1), "batched_tok_s": round(toks / (t2 - t1), 1),
                         "speedup": round((t1 - t0) / (t2 - t1), 2),
                         "steps": max(r.steps for r in bat)})
    eng.approx_cache = approx0
    return rows


def format_batch(rows: list[dict[str, Any]], n_prompt: int) -> list[str]:
    lines = ["", f"batched vs one-by-one: in-place canvases after a {n_prompt}-token prompt (+ suffix)",
             f"{'batch':>6}{'dual cache':>11}{'tokens':>8}{'steps':>7}{'seq ms':>10}{'batch ms':>10}"
             f"{'seq tok/s':>11}{'batch tok/s':>12}{'speedup':>9}{'same':>6}"]
    for r in rows:
        lines.append(f"{r['batch']:>6}{'on' if r['approx_cache'] else 'off':>11}{r['tokens']:>8}{r['steps']:>7}"
                     f"{r['sequential_ms']:>10.1f}{r['batched_ms']:>10.1f}{r['sequential_tok_s']:>11.1f}"
                     f"{r['batched_tok_s']:>12.1f}{r['speedup']:>8.2f}x{'yes' if r['same_tokens'] else 'NO':>6}")
    return lines
