"""Sampler: threshold / top-k unmasking semantics, early stop, single line, abort, seeds."""

from __future__ import annotations

import math

import pytest
import torch

from engine import AbortSignal, CanvasSpec, Engine, FimPrompt, SamplerConfig
from engine.decoding.sampler import Denoiser, choose_tokens, select_positions

V, MASK, END, NL = 16, 15, 14, 13


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def rows(spec: list[tuple[int, float]]) -> torch.Tensor:
    """Logits whose softmax puts probability c on token t (rest uniform, none on MASK) per row."""
    out = torch.full((len(spec), V), 0.0)
    for i, (t, c) in enumerate(spec):
        p = torch.full((V,), (1 - c) / (V - 2))
        p[t], p[MASK] = c, 0.0
        out[i] = p.log()
    return out


def den(length: int = 16, block: int = 8, **cfg: object) -> Denoiser:
    single = bool(cfg.pop("single_line", False))
    return Denoiser(CanvasSpec(length, single_line=single), SamplerConfig(**cfg), mask_id=MASK,  # type: ignore[arg-type]
                    end_ids={END}, newline_ids={NL}, block_size=block)


def test_select_threshold_is_argmax_plus_all_above_tau() -> None:
    conf = torch.tensor([0.2, 0.95, 0.5, 0.91, 0.3])
    cfg = SamplerConfig(threshold=0.9)
    assert select_positions(conf, conf, cfg) == [1, 3]
    low = torch.tensor([0.2, 0.5, 0.3])
    assert select_positions(low, low, cfg) == [1]  # always at least the best one
    # ranking by another score: its argmax + every confidence >= tau
    score = torch.tensor([0.9, 0.1, 0.0, 0.2, 0.0])
    assert select_positions(conf, score, cfg) == [0, 1, 3]


def test_threshold_steps_adapt_to_confidence() -> None:
    d = den(threshold=0.9)
    confs = [0.3, 0.95, 0.4, 0.92, 0.5, 0.97, 0.35, 0.6]
    n = d.step(rows([(i, c) for i, c in enumerate(confs)]))
    assert n == 3 and [i for i in range(8) if d.decided[i]] == [1, 3, 5]
    assert d.canvas[:8] == [MASK, 1, MASK, 3, MASK, 5, MASK, MASK]
    assert d.candidates() == [0, 2, 4, 6, 7]
    assert d.step(rows([(0, 0.1), (2, 0.2), (4, 0.15), (6, 0.05), (7, 0.12)])) == 1
    assert d.decided[2] and not d.decided[0]
    assert math.isclose(d.conf[2], 0.2, rel_tol=1e-5)
    # confident model: one step per block
    d2 = den(threshold=0.9)
    assert d2.step(rows([(i, 0.99) for i in range(8)])) == 8 and d2.block_done()


def test_a_token_repeating_its_neighbour_decided_in_the_same_step_waits() -> None:
    """``idx,, elem``: two positions decided together, each seeing a mask where the other goes."""
    d = den(threshold=0.9)
    n = d.step(rows([(3, 0.99), (7, 0.98), (7, 0.97), (7, 0.96), (2, 0.95), (END, 0.99), (END, 0.99), (END, 0.99)]))
    assert d.canvas[:8] == [3, 7, MASK, MASK, 2, END, END, END] and n == 6  # end / pad runs are exempt
    # next step: position 2 sees the 7 before it; a real repeat comes back
    assert d.step(rows([(7, 0.99), (5, 0.99)])) == 2 and d.canvas[1:4] == [7, 7, 5]
    # the rule only concerns neighbours decided in one step: a decided left neighbour is context
    d = den(threshold=0.9)
    d.step(rows([(4, 0.99)] + [(1, 0.1)] * 7))
    assert d.step(rows([(4, 0.99)] + [(1, 0.1)] * 6)) == 1 and d.canvas[:2] == [4, 4]
    # verified drafts (take_all) keep their repeats: they were decided causally
    d = den(threshold=0.9)
    assert d.step(rows([(6, 0.99), (6, 0.99), (6, 0.99)]), [0, 1, 2], take_all=True) == 3


def test_topk_schedule_and_step_budget() -> None:
    d = den(strategy="topk", tokens_per_step=3)
    sizes = []
    while not d.block_done():
        sizes.append(d.step(rows([(2, 0.5 + 0.01 * i) for i in range(len(d.candidates()))])))
    assert sizes == [3, 3, 2]
    # the highest-confidence candidates go first (low-confidence remasking)
    d = den(strategy="topk", tokens_per_step=2)
    d.step(rows([(2, c) for c in [0.1, 0.8, 0.3, 0.9, 0.2, 0.1, 0.1, 0.1]]))
    assert [i for i in range(8) if d.decided[i]] == [1, 3]
    # max_steps forces the block to finish in time even with low confidence
    d = den(threshold=0.99, max_steps=2)
    d.step(rows([(2, 0.3)] * 8))
    d.step(rows([(2, 0.3)] * len(d.candidates())))
    assert d.block_done() and d.block_steps == 2


def test_end_token_stops_early_and_skips_later_blocks() -> None:
    d = den(length=24, threshold=0.9)
    d.step(rows([(1, 0.2), (1, 0.2), (1, 0.2), (END, 0.99), (1, 0.2), (1, 0.2), (1, 0.95), (1, 0.2)]))
    assert d.candidates() == [0, 1, 2]  # nothing after the end token is decoded
    assert not d.finished
    d.step(rows([(4, 0.95), (5, 0.95), (6, 0.95)]))
    assert d.finish == "end" and d.steps == 2
    ids, confs = d.output()
    assert ids == [4, 5, 6] and len(confs) == 3
    assert d.decided.count(True) == 5  # later blocks never touched


def test_single_line_stops_at_newline_token() -> None:
    d = den(threshold=0.9, single_line=True)
    d.step(rows([(1, 0.95), (NL, 0.99), (1, 0.3), (1, 0.3), (1, 0.3), (1, 0.3), (1, 0.3), (1, 0.3)]))
    assert d.finish == "newline"
    assert d.output()[0] == [1, NL]
    # without single-line mode a newline is ordinary text
    d = den(threshold=0.9)
    d.step(rows([(1, 0.95), (NL, 0.99)] + [(1, 0.3)] * 6))
    assert not d.finished


def test_length_finish_and_next_block() -> None:
    d = den(length=12, block=8)
    d.step(rows([(i, 0.99) for i in range(8)]))
    assert d.block_done() and d.next_block() and d.block_range() == (8, 12)
    d.step(rows([(i, 0.99) for i in (9, 10, 11, 12)]))
    assert d.finish == "length" and d.output()[0] == [*range(8), 9, 10, 11, 12]


def test_choose_tokens_orders_and_top_p() -> None:
    logits = torch.tensor([[5.0, 4.9, 0.0, 0.0], [3.0, 0.0, 0.0, 0.0]])
    cfg = SamplerConfig(order="margin")
    tok, conf, score = choose_tokens(logits, cfg)
    assert tok.tolist() == [0, 0] and score[1] > score[0] and conf[0] < conf[1]
    _, _, ent = choose_tokens(logits, SamplerConfig(order="entropy"))
    assert ent[1] > ent[0]  # peaked row = lower entropy = decoded first
    g = torch.Generator().manual_seed(0)
    samp = SamplerConfig(temperature=1.0, top_p=0.01)
    for _ in range(5):  # top-p keeps only the top token
        assert choose_tokens(logits, samp, g)[0].tolist() == [0, 0]


@pytest.fixture(scope="module")
def eng() -> Engine:
    return Engine.load("tiny-random", device="cpu")


PROMPT = FimPrompt("def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n", path="m.py")


def test_seeds_reproducible(eng: Engine) -> None:
    s1 = SamplerConfig(temperature=1.0, seed=7)
    a = eng.infill(PROMPT, max_tokens=16, sampler=s1)
    b = eng.infill(PROMPT, max_tokens=16, sampler=s1)
    c = eng.infill(PROMPT, max_tokens=16, sampler=SamplerConfig(temperature=1.0, seed=8))
    assert a.tokens == b.tokens and a.confidences == b.confidences
    assert a.tokens != c.tokens
    g1 = eng.infill(PROMPT, max_tokens=16)
    assert g1.tokens == eng.infill(PROMPT, max_tokens=16).tokens  # greedy is deterministic


def test_abort_between_steps(eng: Engine) -> None:
    sig = AbortSignal()
    events = []

    def on_step(ev: object) -> None:
        events.append(ev)
        sig.abort()

    r = eng.generate(eng.tokenizer.encode("x = "), CanvasSpec(16), abort=sig, on_step=on_step)
    assert r.finish_reason == "aborted" and r.aborted and r.steps == 1 and len(events) == 1
    assert events[0].unmasked == 1 and events[0].canvas.count(eng.tokenizer.special.mask) == 15
    assert "<|mask|>" in events[0].text
    pre = AbortSignal()
    pre.abort()
    r = eng.generate(eng.tokenizer.encode("x = "), CanvasSpec(16), abort=pre)
    assert r.finish_reason == "aborted" and r.steps == 0 and r.tokens == []


def test_trailing_end_run_is_committed_in_one_step() -> None:
    # block of 8: content is unsure (0.7, 0.3, 0.3), the last five positions predict END with 0.6 each
    logits = rows([(1, 0.7), (2, 0.3), (3, 0.3)] + [(END, 0.6)] * 5)
    d = den(length=8, block=8, threshold=0.9)
    assert d.step(logits) == 6  # the best position + the whole end run
    assert d.canvas[3:] == [END] * 5 and d.candidates() == [1, 2]
    # switched off: one threshold decision per position (nothing reaches 0.9 → only the argmax)
    off = den(length=8, block=8, threshold=0.9, end_run_threshold=None)
    assert off.step(logits) == 1
    # a run interrupted by content, or too unsure, is not committed
    mixed = rows([(1, 0.3)] * 3 + [(END, 0.6), (END, 0.6), (4, 0.3), (END, 0.6), (END, 0.6)])
    d2 = den(length=8, block=8, threshold=0.9)
    assert d2.step(mixed) == 3 and d2.canvas[6:] == [END, END] and d2.canvas[5] == MASK
    unsure = rows([(1, 0.3)] * 5 + [(END, 0.3)] * 3)
    assert den(length=8, block=8, threshold=0.9).step(unsure) == 1
