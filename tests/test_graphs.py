"""The captured decode step (engine.decoding.graphs): over a pooled KV arena, with per-row positions as tensors
and an in-graph key mask, it gives token for token what the eager step gives — block-causal (canvas
and absolute blocks, alone and batched, rows dropping out) and bidirectional (dual cache). On the CPU
the static step runs without capture (`capture=False`); with CUDA the same checks run captured."""

from __future__ import annotations

import pytest
import torch

from engine import FimPrompt
from engine.api import InfillCall
from engine.decoding.graphs import CAP_MIN, StepGraphs, want_graphs
from engine.engine import Engine
from engine.types import CanvasSpec, GenerateRequest, SamplerConfig
from tests.dllm_util import DREAM, tiny_engine

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BLOCK = SamplerConfig(window="block")  # the trained block layout (CPUs default to window mode)
PROMPTS = [list(range(40, 40 + n)) for n in (23, 5, 61)]
SPECS = [CanvasSpec(20, stop_at_end=False), CanvasSpec(6, stop_at_end=False), CanvasSpec(13, stop_at_end=False)]


def graphed(eng: Engine, capture: bool = False) -> StepGraphs:
    eng.graphs = StepGraphs(eng.model, eng.kv_dtype, eng.device, capture=capture)
    return eng.graphs


def run_all(eng: Engine, cfg: SamplerConfig) -> tuple[list[list[int]], list[list[int]]]:
    alone = [eng.generate(p, s, cfg).tokens for p, s in zip(PROMPTS, SPECS, strict=True)]
    batch = eng.generate_batch([GenerateRequest(p, s, cfg) for p, s in zip(PROMPTS, SPECS, strict=True)])
    return alone, [r.tokens for r in batch]


@pytest.mark.parametrize("align", ["canvas", "absolute"])
def test_block_causal_static_step_equals_eager(align: str) -> None:
    eng = tiny_engine({}, attention="block_causal", shifted=True, block_size=8, block_align=align, seed=11)
    cfg = BLOCK if align == "canvas" else SamplerConfig()
    want = run_all(eng, cfg)
    assert len({len(t) for t in want[1]}) == 3  # three canvas lengths: rows finish apart
    g = graphed(eng)
    assert run_all(eng, cfg) == want
    assert g.stats["replayed"] > 10  # the static step ran (steps inside blocks)
    assert g.stats["captured"] == 0  # CPU: never captured
    arenas = dict(g.arenas)
    assert run_all(eng, cfg) == want  # a second round reuses the pooled arenas
    assert all(g.arenas[k] is arenas[k] for k in arenas)


def test_bidirectional_dual_cache_static_step_equals_eager() -> None:
    eng = tiny_engine(DREAM, approx_cache=True, seed=5)
    cfg = SamplerConfig(block_size=8)
    calls = [InfillCall(FimPrompt("def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"), 24, sampler=cfg),
             InfillCall(FimPrompt("x", ""), 8, sampler=cfg),
             InfillCall(FimPrompt("import os\n\n\ndef main():\n    ", "\n    return 0\n"), 16, sampler=cfg)]
    want = [r.tokens for r in eng.complete(calls)]
    g = graphed(eng)
    assert [r.tokens for r in eng.complete(calls)] == want
    assert [eng.complete([c])[0].tokens for c in calls] == want
    assert g.stats["replayed"] > 5


def test_arena_rows_capacity_and_compaction() -> None:
    eng = tiny_engine({}, attention="block_causal", shifted=True, block_size=8, seed=2)
    g = graphed(eng)
    a = eng.args
    src = [torch.randn(1, a.n_kv_heads, 40, a.head_dim) for _ in range(3)]
    from engine.caches.prefix import KVCache

    caches = [KVCache._from([s.clone() for _ in range(a.n_layers)], [s.clone() for _ in range(a.n_layers)], 40)
              for s in src]
    view = g.arena([(c, 40) for c in caches], 50)
    assert view.batch == 3 and view.capacity == CAP_MIN  # rows: 3 of a 4-row arena
    assert list(g.arenas) == [(4, CAP_MIN)]
    assert torch.equal(view.k[0][2, :, :40], src[2][0])
    # drop row 0: rows 1, 2 move up in the same arena (ascending copies never clobber a source)
    view2 = g.arena([(view.row(1), 40), (view.row(2), 40)], 50)
    assert list(g.arenas) == [(4, CAP_MIN), (2, CAP_MIN)]
    assert torch.equal(view2.k[0][0, :, :40], src[1][0]) and torch.equal(view2.k[0][1, :, :40], src[2][0])
    big = g.arena([(caches[0], 40)], CAP_MIN + 1)
    assert big.capacity == 2 * CAP_MIN
    ids = torch.zeros(2, 8, dtype=torch.long)
    assert g.step(KVCache._from(caches[0].k, caches[0].v, 0), ids[:1], [40], [48]) is None  # not an arena


def test_want_graphs_defaults() -> None:
    eng = tiny_engine({}, attention="block_causal", shifted=True, block_size=8, seed=2)
    assert eng.graphs is None and eng.info["cuda_graphs"] is False  # CPU
    cuda = torch.device("cuda")
    assert want_graphs(None, cuda, eng.args) is True
    assert want_graphs(False, cuda, eng.args) is False
    assert want_graphs(True, torch.device("cpu"), eng.args) is False
    moe = type("A", (), {"n_experts": 4})()
    assert want_graphs(True, cuda, moe) is False  # host sync per expert: never captured


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on the GPU machine)")
def test_captured_step_equals_eager_on_cuda() -> None:
    eng = tiny_engine({}, attention="block_causal", shifted=True, block_size=8, seed=11)
    eng.model.to("cuda")
    eng.device = torch.device("cuda")
    eng.graphs = None
    want = run_all(eng, BLOCK)
    window = SamplerConfig(window=1, speculate=4)  # the GPU's default decoding: width 1 + drafts
    spec = CanvasSpec(16, stop_at_end=False)
    want_w = [eng.generate(p, spec, window).tokens for p in PROMPTS]
    g = graphed(eng, capture=True)
    assert run_all(eng, BLOCK) == want
    assert g.stats["captured"] >= 1 and g.stats["replayed"] > g.stats["captured"]
    assert [eng.generate(p, spec, window).tokens for p in PROMPTS] == want_w
    # width 1 over a one-row arena, captured
    assert any(k[0] == 1 and k[2] == 1 and s.graph is not None for k, s in g.steps.items())


def test_steps_captured_before_the_rope_table_grows_are_dropped() -> None:
    """A graph reads the rope table at its capture-time address: a longer prompt regrows the table (a new
    tensor, the old one freed), so the steps captured over the old one are dropped and made again — on an
    H200 replaying them was an illegal memory access."""
    eng = tiny_engine({}, attention="block_causal", shifted=True, block_size=8, seed=3)
    g = graphed(eng)
    cfg = SamplerConfig(window="block")
    spec = CanvasSpec(8, stop_at_end=False)
    want_short = eng.generate(PROMPTS[0], spec, cfg).tokens
    assert len(g.steps) == 1 and g.stats["stale_dropped"] == 0
    table = eng.model.rope_current()
    assert table is g.rope
    long_prompt = [40 + i % 50 for i in range(eng.model.rope_current().shape[0] + 30)]  # past the table's end
    eng.generate(long_prompt, spec, cfg)
    assert eng.model.rope_current() is not table  # regrown by the prefill
    assert g.stats["stale_dropped"] == 1  # the short prompt's step, made over the old table
    assert g.rope is eng.model.rope_current()
    eng.cache.clear()
    assert eng.generate(PROMPTS[0], spec, cfg).tokens == want_short  # made again over the new table


def test_window_decoding_static_step_equals_eager() -> None:
    """Window decoding — width 1 with prompt-lookup drafts verified causally, the adaptive window, a fixed
    window of 4 — over a one-row arena, its steps padded to powers of two and masked per query, gives token
    for token what the eager steps give (the GPU's default decoding: graphs made it launch-bound-free)."""
    eng = tiny_engine({}, attention="block_causal", shifted=True, block_size=8, seed=11)
    rep = [40 + i % 9 for i in range(60)]  # a repetitive prompt: lookup drafts something at every step
    prompts = [rep, PROMPTS[0], PROMPTS[2]]
    cfgs = [SamplerConfig(window=1, speculate=8), SamplerConfig(window="adaptive", speculate=4),
            SamplerConfig(window=4)]
    spec = CanvasSpec(24, stop_at_end=False)

    def run() -> tuple[list[list[int]], float, int]:
        res = [eng.generate(p, spec, c) for c in cfgs for p in prompts]
        return ([r.tokens for r in res], sum(r.timings.get("decode_drafted", 0.0) for r in res),
                sum(r.forwards for r in res))

    want, drafted, forwards = run()
    decode_forwards = sum(eng.generate(p, spec, c).timings["decode_forwards"] for c in cfgs for p in prompts)
    assert drafted > 20  # drafts were verified, so causal steps of several widths ran
    g = graphed(eng)
    got, drafted_g, forwards_g = run()
    assert got == want and (drafted_g, forwards_g) == (drafted, forwards)
    widths = {k[2] for k in g.steps}
    assert 1 in widths and len(widths) >= 3 and all(w & (w - 1) == 0 for w in widths)  # powers of two
    # every decode step static (the prefills, one forward each, stay eager), one arena copy per request
    assert g.stats["replayed"] == forwards - 9 == decode_forwards and g.stats["arena_copies"] == 9
    assert run()[0] == want  # again over the pooled arenas and steps


@pytest.mark.parametrize(("width", "causal"), [(1, 1), (5, 5), (5, 2), (6, 0), (3, 1)])
def test_static_step_with_causal_tokens_equals_the_eager_window_step(width: int, causal: int) -> None:
    """The static step's per-query mask: the first ``causal`` tokens see keys up to their own position, the
    rest everything up to the last token — the hidden states of `engine.decoding.window.step_mask`'s eager
    step, padded to a power of two or not."""
    from engine.caches.prefix import KVCache
    from engine.decoding.window import step_mask

    eng = tiny_engine({}, attention="block_causal", shifted=True, block_size=8, seed=4)
    a, ctx = eng.args, 37
    prompt = torch.tensor([[40 + i % 23 for i in range(ctx)]])
    kv = KVCache.for_model(a, 1, 128, eng.kv_dtype, eng.device)
    eng.model(prompt, offset=0, cache=kv, logits_slice=slice(0, 0))
    ids = torch.tensor([[50 + i for i in range(width)]])
    eager_kv = KVCache._from([t.clone() for t in kv.k], [t.clone() for t in kv.v], ctx)
    want = eng.model(ids, offset=ctx, cache=eager_kv, mask=step_mask(ctx, causal, width - causal, eng.device),
                     logits_slice=slice(0, 0))[0]
    for bucket in (False, True):
        g = graphed(eng)
        arena = g.arena([(kv, ctx)], ctx + 16)
        got = g.step(arena, ids, [ctx], [ctx + width], [causal], bucket=bucket)
        assert got is not None and got.shape == (1, width, a.dim)
        torch.testing.assert_close(got[0], want, rtol=1e-5, atol=1e-5)
        if 0 < causal < width or causal > 1:  # the mask matters here: all-see-all differs
            other = g.step(arena, ids, [ctx], [ctx + width], [0], bucket=bucket)
            assert other is not None and not torch.allclose(other[0], want, atol=1e-4)


def test_a_capture_that_fails_leaves_the_steps_uncaptured_and_right(caplog: pytest.LogCaptureFixture) -> None:
    """A step that cannot be captured (e.g. an operation that syncs with the host) must not cost the answer:
    that step and every later one run the same static forward uncaptured, with a warning."""
    eng = tiny_engine({}, attention="block_causal", shifted=True, block_size=8, seed=11)
    cfg = SamplerConfig(window=1, speculate=4)
    spec = CanvasSpec(12, stop_at_end=False)
    want = [eng.generate(p, spec, cfg).tokens for p in PROMPTS]
    g = graphed(eng)
    g.capture = True  # as on CUDA; the capture itself is what fails here

    def fail(*a: object) -> None:
        raise RuntimeError("operation not permitted when stream is capturing")

    g._capture = fail  # type: ignore[method-assign]
    with caplog.at_level("WARNING", logger="engine.decoding.graphs"):
        assert [eng.generate(p, spec, cfg).tokens for p in PROMPTS] == want
    assert g.capture is False and g.stats["captured"] == 0 and g.stats["replayed"] > 10
    assert sum("capturing the decode step failed" in r.getMessage() for r in caplog.records) == 1


def test_captures_after_every_graph_was_dropped_take_a_new_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """A private pool whose graphs were all destroyed cannot be captured into again (the allocator's
    ``use_count > 0`` assert: on an H200 every capture after the rope table regrew failed so). Once no captured step is left, the next captures take a new pool; while one lives, the pool
    stays. On the CPU the capture is faked: it records which pool it was given."""
    handles = iter(range(100, 200))
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: (0, next(handles)))
    eng = tiny_engine({}, attention="block_causal", shifted=True, block_size=8, seed=3)
    g = StepGraphs(eng.model, eng.kv_dtype, eng.device, capture=False)
    g.capture, g.pool, g.stats["pools"] = True, torch.cuda.graph_pool_handle(), 1  # as on CUDA
    eng.graphs = g
    used: list[object] = []

    class FakeGraph:
        def __init__(self, fwd: object) -> None:
            self.fwd = fwd

        def replay(self) -> None:
            self.fwd()  # type: ignore[operator]

    def capture(arena: object, st: object, cap: int) -> None:
        used.append(g.pool)
        st.out = g._forward(arena, st, cap)  # type: ignore[attr-defined, arg-type]
        st.graph = FakeGraph(lambda: setattr(st, "out", g._forward(arena, st, cap)))  # type: ignore[arg-type]

    g._capture = capture  # type: ignore[method-assign]
    cfg = SamplerConfig(window="block")
    spec = CanvasSpec(8, stop_at_end=False)
    eng.generate(PROMPTS[0], spec, cfg)
    eng.generate(PROMPTS[1], spec, cfg)
    assert used and set(used) == {(0, 100)} and g.stats["pools"] == 1  # graphs live: one pool
    long_prompt = [40 + i % 50 for i in range(eng.model.rope_current().shape[0] + 30)]
    eng.generate(long_prompt, spec, cfg)  # the rope table regrows: every captured step is dropped
    assert g.stats["stale_dropped"] >= 1 and g.stats["pools"] == 2
    assert used[-1] == (0, 101) and g.pool == (0, 101)  # captured again, into the new pool
