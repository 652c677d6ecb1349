"""Run a per-model `Layout` on an `Engine` through its public ``generate`` / ``generate_batch``
(`Engine.infill` / `rewrite` / `complete` do the same from a call, `engine.calls`).

Canvas-last layouts (``native``, ``chat``, ``qwen-fim``): the canvas is rounded up to whole blocks and the
output is cut at the layout's stop tokens (``<|im_end|>`` …); one that leaves its last piece to token healing
runs as a `engine.calls.FormatRequest`. In-place layouts (``infill``, ``dreamon``: the suffix after the canvas)
run as one on bidirectional models; the engine raises `FormatNotSupported` for them on block-causal ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.formats import Layout
from engine.types import CanvasSpec, GenerateResult, SamplerConfig

if TYPE_CHECKING:
    from engine.engine import Engine


def _cut(engine: Engine, res: GenerateResult, n: int, single_line: bool, reason: str) -> None:
    """Keep ``res``'s first ``n`` tokens and make its text theirs again (after the healed ``lead``)."""
    res.tokens, res.confidences = res.tokens[:n], res.confidences[:n]
    text = res.lead + engine.tokenizer.decode_content(res.tokens)
    res.text = text.split("\n", 1)[0] if single_line else text
    res.finish_reason = reason


def cut_at_stops(engine: Engine, res: GenerateResult, stops: frozenset[int], single_line: bool) -> GenerateResult:
    """Truncate ``res`` before the first stop token (finish reason "end")."""
    for i, t in enumerate(res.tokens):
        if t in stops:
            _cut(engine, res, i, single_line, "end")
            break
    return res


def run_layout(engine: Engine, lay: Layout, *, max_tokens: int | None = None, single_line: bool = False,
               sampler: Any = None, cache_key: str | None = None, abort: Any = None,
               on_step: Any = None) -> GenerateResult:
    b = engine.block_size if engine.args.attention == "block_causal" else (sampler or SamplerConfig()).block_size
    n = lay.canvas if lay.in_place else -(-lay.canvas // b) * b
    if lay.in_place or lay.heal:  # the suffix after the canvas, or the prompt's last piece to heal: the request
        from engine.calls import FormatRequest

        req = FormatRequest(lay.before, CanvasSpec(n, single_line=single_line), sampler, cache_key, abort,
                            after=list(lay.after), stop_ids=lay.stop_ids, expand_id=lay.expand_id, heal=lay.heal)
        res = engine.generate_batch([req], [on_step])[0]
        if lay.in_place:
            return res
    else:
        spec = CanvasSpec(n, single_line=single_line)
        res = engine.generate(lay.before, spec, sampler, cache_key, abort, on_step)
    res = cut_at_stops(engine, res, lay.stop_ids, single_line)
    if max_tokens is not None and len(res.tokens) > max_tokens:
        _cut(engine, res, max_tokens, single_line, "length")
    return res
