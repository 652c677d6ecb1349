"""Remasking (SamplerConfig.remask): which decided positions go back to mask, the stop / prefix
bookkeeping, the termination bound under adversarial logits, window mode ignoring it, and the
StepEvent sequence through the real engine (decode, remask, redecode)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from engine import CanvasSpec, Engine, SamplerConfig
from engine.decoding.remask import pick_remask, token_confidence
from engine.decoding.sampler import Denoiser
from engine.types import StepEvent
from tests.test_sampler import END, MASK, V, rows

A, B, C = 1, 2, 3

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def den(length: int = 8, block: int = 8, keep: int | None = None, **cfg: Any) -> Denoiser:
    cfg.setdefault("remask", "confidence")
    return Denoiser(CanvasSpec(length, keep=keep), SamplerConfig(**cfg), mask_id=MASK, end_ids={END},
                    block_size=block)


def decided(d: Denoiser) -> list[int]:
    return [i for i, x in enumerate(d.decided) if x]


def test_helpers() -> None:
    conf = token_confidence(rows([(A, 0.9), (B, 0.3)]), [A, A])
    assert conf[0].item() == pytest.approx(0.9, rel=1e-5)
    assert conf[1].item() == pytest.approx(0.7 / 14, rel=1e-5)
    assert token_confidence(torch.zeros(0, V), []).shape == (0,)
    # lowest first, ties leftmost, returned in position order, capped
    assert pick_remask([0.4, 0.1, 0.9, 0.1, 0.3], 0.5, 2) == [1, 3]
    assert pick_remask([0.4, 0.1, 0.9, 0.1, 0.3], 0.5, 3) == [1, 3, 4]
    assert pick_remask([0.4, 0.1], 0.5, 0) == []
    assert pick_remask([0.6, 0.7], 0.5, 4) == []


def test_off_never_asks_for_decided_rows() -> None:
    d = den(remask="off")
    d.step(rows([(A, 0.95), (A, 0.2), (A, 0.95)] + [(A, 0.1)] * 5))
    assert decided(d) == [0, 2]
    assert d.remask_room() == 0
    assert d.logit_rows() == d.candidates() == [1, 3, 4, 5, 6, 7]


def test_low_confidence_decided_tokens_go_back_to_mask() -> None:
    d = den(remask_threshold=0.5, remask_per_step=2)
    assert d.logit_rows() == list(range(8))  # nothing decided yet
    d.step(rows([(A, 0.95), (A, 0.95), (A, 0.95)] + [(B, 0.2)] * 5))
    assert decided(d) == [0, 1, 2] and d.prefix == 3
    # the engine now computes every position of the block: decided ones are re-checked
    assert d.logit_rows() == list(range(8))
    # position 1's token A now has probability 0.7/14 (< 0.5), position 0's 0.6, position 2's 0.3
    logits = rows([(A, 0.6), (C, 0.3), (A, 0.3), (B, 0.95), (B, 0.2), (B, 0.2), (B, 0.2), (B, 0.2)])
    n = d.step(logits)
    assert n == 1  # position 3 (the only masked row >= tau); remasked rows are not re-decided now
    assert d.last_remasked == [1, 2] and d.remasks == 2
    assert d.canvas == [A, MASK, MASK, B, MASK, MASK, MASK, MASK]
    assert decided(d) == [0, 3] and d.prefix == 1
    assert d.conf[1] == 0.0
    assert d.candidates() == [1, 2, 4, 5, 6, 7]
    # the remasked positions are re-decided from the next step's logits
    d.step(rows([(A, 0.99), (C, 0.99), (C, 0.99), (B, 0.99)] + [(C, 0.99)] * 4))
    assert d.canvas == [A, C, C, B, C, C, C, C] and d.finished and d.finish == "length"
    assert d.last_remasked == []


def test_per_step_limit_takes_the_lowest() -> None:
    d = den(remask_threshold=0.5, remask_per_step=1)
    d.step(rows([(A, 0.95)] * 4 + [(B, 0.1)] * 4))
    d.step(rows([(A, 0.4), (A, 0.2), (A, 0.3), (A, 0.45)] + [(B, 0.1)] * 4))
    assert d.last_remasked == [1]
    assert decided(d) == [0, 2, 3, 4]  # 4: the best masked row (argmax)


def test_budget_bounds_the_remasks() -> None:
    d = den(remask_threshold=0.5, remask_per_step=4, remask_budget=3)
    d.step(rows([(A, 0.95)] * 5 + [(B, 0.1)] * 3))
    d.step(rows([(B, 0.9)] * 5 + [(B, 0.1)] * 3))  # all five decided rows are low: only 3 go
    assert d.last_remasked == [0, 1, 2] and d.remasks == 3
    assert d.remask_room() == 0
    assert d.logit_rows() == d.candidates()  # budget spent: the engine computes masked rows only


def test_remasked_end_token_reopens_the_canvas() -> None:
    d = den(length=16, block=8, remask_threshold=0.5)
    d.step(rows([(A, 0.95), (A, 0.2), (END, 0.95)] + [(A, 0.1)] * 5))
    assert d.needed == 2 and d.candidates() == [1]
    assert d.revisable() == [0, 2]  # the end token that ends the canvas is revisable
    assert d.logit_rows() == [0, 1, 2]
    d.step(rows([(A, 0.9), (B, 0.3), (A, 0.95)]))  # END at 2 now has prob 0.05/14
    assert d.last_remasked == [2]
    assert d.needed == 16 and not d.finished
    assert d.canvas[:3] == [A, B, MASK] and d.prefix == 2


def test_committed_blocks_are_never_revisited() -> None:
    d = den(length=16, block=8, remask_threshold=0.5)
    d.step(rows([(A, 0.99)] * 8))
    assert d.block_done() and d.next_block()
    first = list(d.canvas[:8])
    assert d.logit_rows() == list(range(8))  # block-relative rows of block 1 only
    d.step(rows([(B, 0.99)] + [(B, 0.1)] * 7))
    d.step(rows([(C, 0.99)] * 8))  # block 1's position 8 (token B) is remasked, block 0 untouched
    assert d.last_remasked == [8]
    assert d.canvas[:8] == first and all(d.decided[:8])


def test_window_mode_ignores_remasking() -> None:
    d = den(remask_threshold=0.99, remask_per_step=8)
    d.set_window(0, 4)
    d.step(rows([(A, 0.3), (A, 0.95), (A, 0.2), (A, 0.1)]), [0, 1, 2, 3], force_first=True)
    assert decided(d) == [0, 1] and d.prefix == 2
    d.set_window(2, 6)
    assert d.remask_room() == 0 and d.logit_rows() == d.candidates() == [0, 1, 2, 3]
    d.step(rows([(B, 0.2)] * 4), force_first=True)
    assert d.remasks == 0 and d.last_remasked == [] and decided(d) == [0, 1, 2]


def flipping(d: Denoiser, calls: list[int]) -> torch.Tensor:
    """Adversary: every row's argmax alternates A / B each call with confidence 0.3 — below τ (one
    decision per step) and leaving every token decided in the previous call at (0.7 / 14)."""
    calls.append(len(calls))
    tok = A if len(calls) % 2 else B
    return rows([(tok, 0.3)] * len(d.logit_rows()))


@pytest.mark.parametrize("budget,per_step", [(0, 2), (5, 2), (8, 3), (40, 1)])
def test_adversarial_logits_end_within_the_step_cap(budget: int, per_step: int) -> None:
    length = 20
    d = den(length=length, block=8, remask_threshold=0.5, remask_per_step=per_step, remask_budget=budget,
            end_run_threshold=None)
    calls: list[int] = []
    while not d.finished:
        assert d.steps <= length + budget, "past the step cap"
        d.step(flipping(d, calls))
        if not d.finished and d.block_done():
            d.next_block()
    # the adversary spends the whole budget and the bound L + budget is reached exactly
    assert d.remasks == budget
    assert d.steps == length + budget
    assert all(d.decided) and d.finish == "length"


def test_max_steps_is_kept_under_adversarial_logits() -> None:
    d = den(length=8, block=8, max_steps=3, remask_threshold=0.5, remask_per_step=2, remask_budget=100)
    calls: list[int] = []
    while not d.block_done():
        d.step(flipping(d, calls))
    assert d.block_steps == 3 and all(d.decided)
    assert d.remasks > 0


# ---- through the engine ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def eng() -> Engine:
    return Engine.load("tiny-random", device="cpu")


def test_step_events_show_decode_remask_redecode(eng: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Block mode on the real engine with a stub LM head: step 1 decides position 0 (token a), step 2
    finds a at position 0 improbable and remasks it while deciding position 1 (b), step 3 (budget
    spent) re-decides everything that is masked — position 0 becomes c."""
    vocab = eng.args.vocab_size
    a, b, c = 40, 41, 42
    width: list[int] = []

    def one(tok: int, p: float) -> torch.Tensor:
        row = torch.full((vocab,), (1 - p) / (vocab - 1)).log()
        row[tok] = torch.tensor(p).log()
        return row

    def stub(h: torch.Tensor) -> torch.Tensor:
        m = h.shape[1]
        width.append(m)
        n = len(width)
        if n == 1:
            out = [one(a, 0.99)] + [one(b, 0.2)] * (m - 1)
        elif n == 2:
            out = [one(b, 0.9), one(b, 0.99)] + [one(b, 0.2)] * (m - 2)
        else:
            out = [one(c, 0.99)] * m
        return torch.stack(out)[None]

    monkeypatch.setattr(eng.model, "logits", stub)
    bs = eng.block_size
    cfg = SamplerConfig(window="block", remask="confidence", remask_threshold=0.5, remask_per_step=1,
                        remask_budget=1, end_run_threshold=None)
    events: list[StepEvent] = []
    res = eng.generate(eng.tokenizer.encode("x = "), CanvasSpec(bs, stop_at_end=False), cfg, on_step=events.append)
    mask = eng.tokenizer.special.mask
    assert width == [bs, bs, bs - 1]  # step 2 also computed the decided position; step 3 did not
    assert [(e.step, e.unmasked, e.remasked) for e in events] == [(1, 1, 0), (2, 1, 1), (3, bs - 1, 0)]
    assert events[0].canvas == [a] + [mask] * (bs - 1)
    assert events[1].canvas == [mask, b] + [mask] * (bs - 2)
    assert events[2].canvas == [c, b] + [c] * (bs - 2)
    assert res.tokens == events[2].canvas and res.steps == 3 and res.finish_reason == "length"


def test_engine_window_mode_never_remasks(eng: Engine) -> None:
    cfg = SamplerConfig(window=4, speculate=0, remask="confidence", remask_threshold=1.1, remask_budget=50)
    events: list[StepEvent] = []
    res = eng.generate(eng.tokenizer.encode("def f(x):"), CanvasSpec(16, stop_at_end=False), cfg,
                       on_step=events.append)
    plain = eng.generate(eng.tokenizer.encode("def f(x):"), CanvasSpec(16, stop_at_end=False),
                         SamplerConfig(window=4, speculate=0))
    assert events and all(e.remasked == 0 for e in events)
    assert res.tokens == plain.tokens and res.steps == plain.steps


def test_engine_block_mode_remasks_and_terminates(eng: Engine) -> None:
    """Random weights are unsure of everything: with τ above every confidence and a remask threshold
    of 1.1 every decided token is remasked while the budget lasts, and decoding still ends by the cap."""
    length, budget = 16, 6
    cfg = SamplerConfig(window="block", remask="confidence", remask_threshold=1.1, remask_per_step=2,
                        remask_budget=budget, threshold=1.1, end_run_threshold=None)
    events: list[StepEvent] = []
    res = eng.generate(eng.tokenizer.encode("def f(x):"), CanvasSpec(length, stop_at_end=False), cfg,
                       on_step=events.append)
    assert sum(e.remasked for e in events) == budget
    assert res.steps == length + budget and len(res.tokens) == length
