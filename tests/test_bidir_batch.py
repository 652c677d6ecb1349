"""Batched decoding of bidirectional models (engine.decoding.bidir): one forward per step for every live request,
and each request's result equal, token for token, to what it gives alone."""

from __future__ import annotations

import pytest

from engine import FimPrompt
from engine.api import InfillCall
from engine.types import SamplerConfig
from tests.dllm_util import DREAM, LLADA, ForwardCounter, tiny_engine

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CFG = SamplerConfig(block_size=8)  # greedy
CALLS = [
    InfillCall(FimPrompt("def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"), 24, sampler=CFG),
    InfillCall(FimPrompt("x", ""), 8, sampler=CFG),  # short prompt, no suffix: finishes first
    InfillCall(FimPrompt("import os\nimport sys\n\n\ndef main():\n    ", "\n    return 0\n"), 16, sampler=CFG),
    InfillCall(FimPrompt("for i in range(10):\n", "\n"), 20, single_line=True, sampler=CFG),
]


@pytest.mark.parametrize("approx", [False, True])
@pytest.mark.parametrize("family", ["dream", "llada"])
def test_batch_equals_alone(family: str, approx: bool) -> None:
    meta, shifted, mask = (DREAM, True, "<|mask|>") if family == "dream" else (LLADA, False, "<|mdm_mask|>")
    eng = tiny_engine(meta, shifted=shifted, approx_cache=approx, mask=mask, seed=3)
    assert eng.info["format"] == "infill" and eng.args.shifted_logits is shifted
    count = ForwardCounter(eng)
    alone = [eng.complete([c])[0] for c in CALLS]
    alone_forwards = count.calls
    count.calls, count.widths = 0, []
    batch = eng.complete(CALLS)
    for a, b in zip(alone, batch, strict=True):
        assert b.tokens == a.tokens and b.confidences == pytest.approx(a.confidences, abs=1e-5)
        assert (b.steps, b.forwards, b.finish_reason) == (a.steps, a.forwards, a.finish_reason)
    steps = [r.steps for r in alone]
    assert min(steps) < max(steps)  # one finishes early; the others go on in a smaller batch
    if approx:  # full steps (block starts) and block steps of requests in different phases: <= 2 per step
        assert max(steps) <= count.calls <= 2 * max(steps) < alone_forwards
    else:  # one forward per step, every live request in it
        assert count.calls == max(steps)
        assert [w[0] for w in count.widths] == [sum(s > i for s in steps) for i in range(max(steps))]


def test_dual_cache_batch_rows_of_different_block_widths() -> None:
    """A last, shorter block next to full ones (writes go to a copy of the rows, not over stale KV)."""
    eng = tiny_engine(DREAM, approx_cache=True, seed=5)
    cfg = SamplerConfig(block_size=8, threshold=2.0)  # one token per step: phases drift apart
    calls = [InfillCall(FimPrompt("a = 1\nb = ", "\n"), 13, sampler=cfg),
             InfillCall(FimPrompt("print(", ")\n"), 16, sampler=cfg),
             InfillCall(FimPrompt("# comment\n", ""), 6, sampler=cfg)]
    alone = [eng.complete([c])[0] for c in calls]
    batch = eng.complete(calls)
    assert [b.tokens for b in batch] == [a.tokens for a in alone]
