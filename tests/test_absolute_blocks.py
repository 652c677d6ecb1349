"""Block-causal models whose blocks tile the whole sequence from position 0 (SDAR, Fast-dLLM v2,
LLaDA2.0: ``block_align = "absolute"``): the engine's cached, batched decoding equals a slow reference
that recomputes the whole sequence under `absolute_block_mask` at every step."""

from __future__ import annotations

import random

import pytest
import torch

from engine.attention import absolute_block_mask
from engine.engine import Engine
from engine.types import CanvasSpec, GenerateRequest, SamplerConfig
from tests.dllm_util import tiny_engine

pytestmark = pytest.mark.usefixtures("one_torch_thread")

B = 4


def prompt(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(32, 127) for _ in range(n)]


@torch.no_grad()
def reference(eng: Engine, ids: list[int], spec: CanvasSpec, cfg: SamplerConfig) -> list[int]:
    den = eng._job(GenerateRequest(ids, spec, cfg), None).den
    n = len(ids)
    shift = 1 if eng.args.shifted_logits else 0
    while not den.finished:
        seq = ids + den.canvas
        h = eng.model(torch.tensor([seq]), mask=absolute_block_mask(len(seq), B), logits_slice=slice(0, 0))[0]
        s, _ = den.block_range()
        rows = den.logit_rows()
        den.step(eng.model.logits(h[[n + s + c - shift for c in rows]][None])[0], rows)
        if not den.finished and den.block_done():
            den.next_block()
    return den.output()[0]


@pytest.mark.parametrize("shifted", [True, False])
def test_absolute_blocks_equal_the_full_recompute(shifted: bool) -> None:
    eng = tiny_engine({}, attention="block_causal", shifted=shifted, block_size=B, block_align="absolute", seed=7)
    assert eng.info["block_align"] == "absolute"
    cfg = SamplerConfig(strategy="topk", tokens_per_step=2)  # several tokens per step
    spec = CanvasSpec(14, stop_at_end=False)
    prompts = [prompt(n, n) for n in (13, 16, 7, 1)]  # last partial block of 1, 0, 3 and 1 tokens
    refs = [reference(eng, p, spec, cfg) for p in prompts]
    assert all(len(r) == 14 for r in refs)
    den = eng._job(GenerateRequest(prompts[0], spec, cfg), None).den
    assert [den.block_range(b) for b in range(den.n_blocks)] == [(0, 3), (3, 7), (7, 11), (11, 14)]
    for p, want in zip(prompts, refs, strict=True):  # alone
        assert eng.generate(p, spec, cfg).tokens == want
    batch = eng.generate_batch([GenerateRequest(p, spec, cfg) for p in prompts])  # batched
    assert [r.tokens for r in batch] == refs
    assert max(r.steps for r in batch) < 14


def test_absolute_blocks_reuse_the_cache_in_whole_blocks() -> None:
    eng = tiny_engine({}, attention="block_causal", shifted=True, block_size=B, block_align="absolute", seed=8)
    cfg = SamplerConfig()
    spec = CanvasSpec(9, stop_at_end=False)
    first = prompt(22, 1)
    eng.generate(first, spec, cfg, cache_key="doc")
    for grown in (first + [65, 66, 67], first[:18], first):  # typed on, deleted back, the same again
        r = eng.generate(grown, spec, cfg, cache_key="doc")
        assert r.tokens == reference(eng, grown, spec, cfg)
        assert r.cached_tokens % B == 0 and 0 < r.cached_tokens <= len(grown) - len(grown) % B
    # a full hit recomputes nothing of the prompt: only the partial block is run with the canvas
    again = eng.generate(first, spec, cfg, cache_key="doc")
    assert again.cached_tokens == 20 and again.forwards == again.steps


def test_absolute_models_decode_whole_blocks_on_a_cpu() -> None:
    """Window modes (causal commits of single tokens) do not fit absolute blocks: the engine decodes
    in blocks even where its CPU default for our adapters is the adaptive window."""
    eng = tiny_engine({}, attention="block_causal", block_size=B, block_align="absolute")
    assert eng.sampler.window == "block"
    r = eng.generate(prompt(10, 2), CanvasSpec(8, stop_at_end=False), SamplerConfig(window=1, speculate=4))
    assert r.steps >= 1 and "decode_positions" in r.timings
