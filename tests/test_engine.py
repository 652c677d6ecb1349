"""Engine API: load, infill / rewrite / generate structure, batching, errors, devices."""

from __future__ import annotations

import sys
import threading

import pytest
import torch

from engine import AbortSignal, CanvasSpec, EditPrompt, Engine, FimPrompt, GenerateRequest, SamplerConfig
from engine.templates import edit_canvas_length, render_edit, render_fim

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def eng() -> Engine:
    return Engine.load("tiny-random", device="cpu")


FIM = FimPrompt("def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n", path="m.py",
                history=("--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-x\n+y\n",))
EDIT = EditPrompt("import os\n", "def f(x):\n    return x\n", "\nf(1)\n", cursor=9, path="m.py")


def test_load_tiny_random(eng: Engine) -> None:
    sp = eng.tokenizer.special
    assert eng.args.special_tokens == sp.as_dict() and eng.args.vocab_size >= eng.tokenizer.vocab_size
    info = eng.info
    assert info["model"] == "tiny-random" and info["device"] == "cpu" and info["dtype"] == "float32"
    assert "sdpa" in info["attention"] or info["attention"] == "flash-attn"
    assert info["regime"] == "block_causal" and info["label"]
    logits = eng.forward_logits([1, 2, 3])
    assert logits.shape == (1, 3, eng.args.vocab_size)
    # seeded: a second load gives the same weights
    again = Engine.load("tiny-random", device="cpu")
    assert torch.equal(again.forward_logits([1, 2, 3]), logits)


def test_infill_result_structure(eng: Engine) -> None:
    r = eng.infill(FIM, max_tokens=20)
    assert r.prompt_tokens == len(render_fim(eng.tokenizer, FIM).ids)
    assert len(r.tokens) == len(r.confidences) <= 20
    assert all(0.0 < c <= 1.0 for c in r.confidences)
    assert r.finish_reason in ("end", "length") and 1 <= r.steps <= 24
    # the prefill, then one forward a step; a forward that verifies drafts decides several steps' tokens
    assert 2 <= r.forwards <= r.steps + 1
    assert r.text == eng.tokenizer.decode_content(r.tokens)
    assert set(r.timings) >= {"prefill_ms", "decode_ms", "total_ms"}
    assert r.tokens_per_forward == pytest.approx(len(r.tokens) / r.steps)
    assert eng.tokenizer.special.mask not in r.tokens
    assert not set(r.tokens) & eng.tokenizer.special.end_ids


def test_infill_single_line_and_max_tokens(eng: Engine) -> None:
    r = eng.infill(FIM, max_tokens=5, single_line=True)
    assert "\n" not in r.text and len(r.tokens) <= 5


def test_rewrite_drops_cursor_and_sizes_canvas(eng: Engine) -> None:
    events: list = []
    r = eng.rewrite(EDIT, on_step=events.append)
    n_region = len(eng.tokenizer.encode(EDIT.region))
    canvas = edit_canvas_length(n_region, block_size=eng.block_size)
    assert len(events[0].canvas) == canvas
    assert eng.tokenizer.special.cursor not in r.tokens
    assert r.prompt_tokens == len(render_edit(eng.tokenizer, EDIT).ids)
    assert r.steps == len(events) and sum(e.unmasked for e in events) >= len(r.tokens)


def test_batch_equals_single(eng: Engine) -> None:
    tok = eng.tokenizer
    reqs = [
        GenerateRequest(tok.encode("def f(x):\n    return x +"), CanvasSpec(16)),
        GenerateRequest(tok.encode("a = [1, 2, 3]\nfor i in a:\n    print(i)\n# sum\n"), CanvasSpec(24, stop_at_end=False),
                        SamplerConfig(strategy="topk", tokens_per_step=2)),
        GenerateRequest(tok.encode("x"), CanvasSpec(8), SamplerConfig(temperature=0.8, seed=3), cache_key="z"),
    ]
    singles = [eng.generate(r.prompt_tokens, r.canvas, r.sampler) for r in reqs]
    batch = eng.generate_batch(reqs)
    for s, b in zip(singles, batch, strict=True):
        assert b.tokens == s.tokens and b.steps == s.steps and b.finish_reason == s.finish_reason
        assert b.confidences == pytest.approx(s.confidences, abs=1e-5)
    assert eng.generate_batch([]) == []
    # the cache slot written inside a batch is reused by a later single request
    assert eng.generate(reqs[2].prompt_tokens + [70], CanvasSpec(8), cache_key="z").cached_tokens == 1


def test_batch_abort_one_request(eng: Engine) -> None:
    tok = eng.tokenizer
    sig = AbortSignal()
    sig.abort()
    out = eng.generate_batch([GenerateRequest(tok.encode("abc"), CanvasSpec(8), abort=sig),
                              GenerateRequest(tok.encode("abcd"), CanvasSpec(8, stop_at_end=False))])
    assert out[0].finish_reason == "aborted" and out[0].steps == 0
    assert out[1].finish_reason == "length" and len(out[1].tokens) == 8


def test_concurrent_callers_are_serialised(eng: Engine) -> None:
    results: list = []

    def work(i: int) -> None:
        results.append(eng.infill(FIM, max_tokens=8, cache_key=f"t{i}"))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3 and len({tuple(r.tokens) for r in results}) == 1


def test_bad_input_errors(eng: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="prompt token"):
        eng.generate([], CanvasSpec(8))
    with pytest.raises(ValueError, match="canvas length"):
        eng.generate([1], CanvasSpec(0))
    with pytest.raises(KeyError, match="nope"):
        Engine.load("random:nope")
    with pytest.raises(ValueError, match="dtype"):
        Engine.load("tiny-random", dtype="int3")
    monkeypatch.setitem(sys.modules, "engine.loading", None)  # loader package missing
    with pytest.raises(RuntimeError, match="some/dir"):
        Engine.load("some/dir")


def test_bf16_on_cpu_runs() -> None:
    e = Engine.load("tiny-random", device="cpu", dtype="bf16")
    assert e.info["dtype"] == "bfloat16"
    r = e.infill(FIM, max_tokens=8)
    assert len(r.tokens) == len(r.confidences) <= 8 and r.steps >= 1


@pytest.mark.gpu
def test_cuda_bf16_matches_cpu_structure() -> None:
    e = Engine.load("tiny-random", device="cuda")
    assert e.info["dtype"] == "bfloat16" and e.info["device"].startswith("cuda")
    r = e.infill(FIM, max_tokens=16, cache_key="g")
    r2 = e.infill(FIM, max_tokens=16, cache_key="g")
    assert r2.cached_tokens == r2.prompt_tokens and r2.tokens == r.tokens
    reqs = [GenerateRequest(e.tokenizer.encode("x = 1\n"), CanvasSpec(16)),
            GenerateRequest(e.tokenizer.encode("def g():\n"), CanvasSpec(8))]
    batch = e.generate_batch(reqs)
    alone = [e.generate(r.prompt_tokens, r.canvas) for r in reqs]
    assert [b.tokens for b in batch] == [a.tokens for a in alone]  # batching changes nothing (greedy)
    assert [b.finish_reason for b in batch] == [a.finish_reason for a in alone]


def test_canvas_steps_run_without_a_mask(eng: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.model as model_mod

    calls: list[tuple[int, int, bool]] = []
    real = model_mod.attend

    def spy(q, k, v, mask=None, is_causal=False):  # type: ignore[no-untyped-def]
        calls.append((q.shape[2], k.shape[2], mask is None))
        return real(q, k, v, mask=mask, is_causal=is_causal)

    monkeypatch.setattr(model_mod, "attend", spy)
    prompt = eng.tokenizer.encode("def f(x):\n    return x * 2\n")
    r = eng.generate(prompt, CanvasSpec(24, stop_at_end=False), SamplerConfig(window="block"))
    n_layers, b = eng.args.n_layers, eng.block_size
    per_forward = [calls[i] for i in range(0, len(calls), n_layers)]
    assert len(per_forward) == r.forwards == r.steps + 1
    steps = per_forward[1:]
    fused = [c for c in steps if c[0] == 2 * b]  # first step of blocks 2 and 3: commit + block
    assert len(fused) == 2 and not any(c[2] for c in fused)
    plain = [c for c in steps if c[0] == b]
    assert len(plain) == r.steps - 2 and all(c[2] for c in plain)  # mask-free hot path
