"""Run a per-model `Layout` on an `Engine` through its public ``generate`` (until `Engine.infill` /
`rewrite` call the formats themselves).

Canvas-last layouts (``native``, ``chat``) run today: the canvas is rounded up to whole blocks and
the output is cut at the layout's stop tokens (``<|im_end|>`` …). In-place layouts (``infill``,
``dreamon``: the suffix after the canvas) need the engine to decode a canvas between prompt tokens;
until it can, they raise `FormatNotSupported` naming that hook.
"""

from __future__ import annotations

from typing import Any

from engine.formats import FormatNotSupported, Layout
from engine.types import CanvasSpec, GenerateResult


def cut_at_stops(engine: Any, res: GenerateResult, stops: frozenset[int], single_line: bool) -> GenerateResult:
    """Truncate ``res`` before the first stop token (finish reason "end")."""
    for i, t in enumerate(res.tokens):
        if t in stops:
            res.tokens, res.confidences = res.tokens[:i], res.confidences[:i]
            text = engine.tokenizer.decode_content(res.tokens)
            res.text = text.split("\n", 1)[0] if single_line else text
            res.finish_reason = "end"
            break
    return res


def run_layout(engine: Any, lay: Layout, *, max_tokens: int | None = None, single_line: bool = False,
               sampler: Any = None, cache_key: str | None = None, abort: Any = None,
               on_step: Any = None) -> GenerateResult:
    if lay.in_place:
        raise FormatNotSupported("in-place infilling needs the engine to decode a canvas between the prompt "
                                 "and Layout.after (bidirectional models); Engine.generate cannot yet")
    b = engine.block_size if engine.args.attention == "block_causal" else (
        sampler.block_size if sampler is not None else 32)
    spec = CanvasSpec(-(-lay.canvas // b) * b, single_line=single_line)
    res = engine.generate(lay.before, spec, sampler, cache_key, abort, on_step)
    res = cut_at_stops(engine, res, lay.stop_ids, single_line)
    if max_tokens is not None and len(res.tokens) > max_tokens:
        res.tokens, res.confidences = res.tokens[:max_tokens], res.confidences[:max_tokens]
        text = engine.tokenizer.decode_content(res.tokens)
        res.text = text.split("\n", 1)[0] if single_line else text
        res.finish_reason = "length"
    return res
