"""DreamOn's variable-length canvas (engine.decoding.expand) through the engine, on a scripted model whose
logits the test chooses: ``<|expand|>`` turns a mask into two, the end token deletes itself and every
mask after it, and the output is the span the sequence ends up holding."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from engine import FimPrompt
from engine.api import InfillCall
from engine.decoding.expand import INITIAL_MASKS, ExpandCanvas
from engine.types import CanvasSpec, SamplerConfig
from tests.dllm_util import DREAMON, scripted_engine, tid

pytestmark = pytest.mark.usefixtures("one_torch_thread")

DREAMON_CFG = SamplerConfig(strategy="topk", tokens_per_step=1, order="entropy")  # one position per step
PREFIX, SUFFIX = "x = ", "\nprint(x)\n"


class Script:
    """Predicts, for the span of ``before + span + after``: ``<|expand|>`` at the first mask while the
    span is shorter than ``target``, else target token i at span position i (the leftmost mask most
    confident); span positions at or past ``len(target)`` predict the end token."""

    def __init__(self, target_text: str, grow: bool) -> None:
        self.text, self.grow = target_text, grow
        self.lengths: list[int] = []

    def bind(self, tok: Any) -> None:
        self.target = tok.encode(self.text)
        self.n = 1 + len(tok.encode(PREFIX))  # bos + prefix
        self.after = len(tok.encode(SUFFIX)) + 1  # suffix + eos
        self.mask, self.expand, self.eos = tok.special.mask, tid(tok, "<|expand|>"), tok.special.eos

    def __call__(self, seq: list[int], p: int) -> tuple[int, float]:
        span = seq[self.n:len(seq) - self.after]
        i = p - self.n
        first = span.index(self.mask)
        if self.grow and len(span) < len(self.target):
            return (self.expand, 30.0) if i == first else (self.target[0], 1.0)
        if i >= len(self.target):
            return self.eos, 5.0
        return self.target[i], 30.0 - (i - first)


@pytest.mark.parametrize(("text", "grow"), [("abcdefg", True), ("ab", False), ("abcd", False)])
def test_expand_and_delete_through_the_engine(text: str, grow: bool) -> None:
    script = Script(text, grow)
    eng, model = scripted_engine(DREAMON, script)
    script.bind(eng.tokenizer)
    assert eng.info["format"] == "dreamon"
    events: list[Any] = []
    res = eng.complete([InfillCall(FimPrompt(PREFIX, SUFFIX), 16, sampler=DREAMON_CFG, on_step=events.append)])[0]
    assert res.text == text and res.tokens == script.target
    lengths = [len(s) - script.n - script.after for s in model.history]  # the span each step saw
    assert lengths[0] == INITIAL_MASKS
    n = len(text)
    if grow:  # one expand per step until the span fits, then one token per step
        assert lengths == [4, 5, 6] + [7] * 7 and res.steps == 3 + 7 and res.finish_reason == "length"
    elif n < INITIAL_MASKS:  # n tokens, then the end token deletes itself and the masks after it
        assert lengths == [4] * (n + 1) and res.steps == n + 1 and res.finish_reason == "end"
    else:
        assert lengths == [4] * 4 and res.finish_reason == "length"
    # the sequence around the span never changed, and every step event shows the span at that step
    bos = tid(eng.tokenizer, "<|beginoftext|>")
    assert all(s[:script.n] == [bos, *eng.tokenizer.encode(PREFIX)] for s in model.history)
    assert [len(e.canvas) for e in events] == lengths[1:] + [n]


def test_expand_canvas_rules() -> None:
    """Unit: the cap on the span length blocks expansion; an end token drops the masks after it but
    keeps tokens already decided there."""
    V, mask, expand, eos = 16, 15, 14, 13
    cfg = SamplerConfig(strategy="topk", tokens_per_step=1)

    def logits(rows: int, pick: int, token: int) -> torch.Tensor:
        out = torch.zeros(rows, V)
        out[:, 1] = 2.0
        out[pick, token] = 30.0
        return out

    c = ExpandCanvas(CanvasSpec(5), cfg, mask_id=mask, expand_id=expand, end_ids={eos})
    assert c.canvas == [mask] * 4
    c.step(logits(4, 0, expand))  # 4 -> 5 positions (the cap)
    assert c.canvas == [mask] * 5 and c.expands == 1
    at_cap = logits(5, 2, expand)
    at_cap[2, 1] = 6.0
    c.step(at_cap)  # at the cap: expand is blocked, the row's next best token is taken
    assert len(c.canvas) == 5 and c.expands == 1 and c.canvas[2] == 1
    c.step(logits(4, 3, 7))  # masked rows 0, 1, 3, 4 -> position 4 := 7
    assert c.canvas == [mask, mask, 1, mask, 7]
    c.step(logits(3, 1, eos))  # masked rows 0, 1, 3 -> position 1 ends the span: 1 and 3 deleted, 7 kept
    assert c.canvas == [mask, 1, 7] and c.deletes == 2 and not c.finished
    c.step(logits(1, 0, 9))
    assert c.canvas == [9, 1, 7] and c.finish == "end" and c.output() == ([9, 1, 7], c.conf)
