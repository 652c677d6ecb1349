"""Prefix KV cache: exact reuse across requests, equivalence with full recomputation, LRU budget."""

from __future__ import annotations

import pytest
import torch

import engine.engine as engine_mod
from engine import CanvasSpec, Engine, SamplerConfig
from engine.attention import block_causal_mask
from engine.caches.prefix import KVCache, PrefixCache, Slot
from engine.config import preset
from engine.decoding.sampler import Denoiser
from engine.model import Transformer
from engine.textdiff import common_prefix
from engine.tokenizer import Tokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def eng() -> Engine:
    return Engine.load("tiny-random", device="cpu")


def text_ids(eng: Engine, n: int, seed: int = 0) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(32, 127, (n,), generator=g).tolist()


@torch.no_grad()
def reference_decode(eng: Engine, prompt: list[int], spec: CanvasSpec, cfg: SamplerConfig) -> list[int]:
    """No KV cache at all: every step recomputes prompt + decided blocks + current block with the
    block-causal mask."""
    sp = eng.tokenizer.special
    d = Denoiser(spec, cfg, mask_id=sp.mask, end_ids=sp.end_ids, block_size=eng.block_size,
                 suppress_ids=(sp.fim_prefix, sp.fim_suffix, sp.fim_middle, sp.edit_history,
                               sp.region_start, sp.region_end, sp.file_sep))
    n = len(prompt)
    while not d.finished:
        s, e = d.block_range()
        seq = torch.tensor([prompt + d.canvas[:e]])
        h = eng.model(seq, mask=block_causal_mask(n, e, eng.block_size), logits_slice=slice(0, 0))[0]
        cand = d.candidates()
        rows = h[[n + s + c - 1 for c in cand]]  # shifted: position p-1 predicts p
        d.step(eng.model.logits(rows[None])[0], cand)
        if not d.finished and d.block_done():
            d.next_block()
    return d.output()[0]


@pytest.mark.parametrize("cfg", [SamplerConfig(window="block"),
                                 SamplerConfig(strategy="topk", tokens_per_step=3, window="block")])
def test_cached_decoding_equals_full_recompute(eng: Engine, cfg: SamplerConfig) -> None:
    prompt = text_ids(eng, 40)
    spec = CanvasSpec(20, stop_at_end=False)
    ref = reference_decode(eng, prompt, spec, cfg)
    got = eng.generate(prompt, spec, cfg)
    assert got.tokens == ref and len(ref) == 20


def test_prefix_reuse_is_exact_after_edits(eng: Engine) -> None:
    eng.cache.clear()
    spec = CanvasSpec(16, stop_at_end=False)
    p1 = text_ids(eng, 60, seed=1)
    a = eng.generate(p1, spec, cache_key="doc")
    assert a.cached_tokens == 0 and a.prompt_tokens == 60
    # identical request: everything reused, no prefill forward
    b = eng.generate(p1, spec, cache_key="doc")
    assert b.cached_tokens == 60 and b.tokens == a.tokens and b.forwards == a.forwards - 1
    # edit in the middle: reuse up to the edit, tokens equal a cold run
    p2 = list(p1)
    p2[25] = (p2[25] + 1) % 200 + 32
    c = eng.generate(p2, spec, cache_key="doc")
    assert c.cached_tokens == 25
    cold = eng.generate(p2, spec)
    assert cold.cached_tokens == 0 and c.tokens == cold.tokens
    assert c.confidences == pytest.approx(cold.confidences, abs=1e-5)
    # typing one more token at the end recomputes only that token
    p3 = p2 + [65]
    d = eng.generate(p3, spec, cache_key="doc")
    assert d.cached_tokens == len(p2) and d.tokens == eng.generate(p3, spec).tokens
    # deleting tokens (shorter prompt) still reuses the common prefix
    e = eng.generate(p3[:50], spec, cache_key="doc")
    assert e.cached_tokens == 49 and e.tokens == eng.generate(p3[:50], spec).tokens


def test_one_token_edit_at_end_of_2k_context_recomputes_under_5_percent(eng: Engine) -> None:
    eng.cache.clear()
    prompt = text_ids(eng, 2048, seed=3)
    spec = CanvasSpec(8)
    eng.generate(prompt, spec, cache_key="big")
    edited = prompt[:-1] + [(prompt[-1] + 1) % 90 + 32]
    r = eng.generate(edited, spec, cache_key="big")
    recomputed = r.prompt_tokens - r.cached_tokens
    assert recomputed <= 0.05 * r.prompt_tokens and recomputed == 1


def test_chunked_prefill_is_exact(eng: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    prompt = text_ids(eng, 70, seed=4)
    spec = CanvasSpec(16, stop_at_end=False)
    whole = eng.generate(prompt, spec)
    monkeypatch.setattr(engine_mod, "PREFILL_CHUNK", 16)
    chunked = eng.generate(prompt, spec)
    assert chunked.tokens == whole.tokens and chunked.forwards == whole.forwards + 4
    monkeypatch.setattr(engine_mod, "PREFILL_CHUNK", 2048)
    monkeypatch.setattr(engine_mod, "CPU_PREFILL_CHUNK", 32)  # a CPU prefills in smaller chunks
    cpu = eng.generate(prompt, spec)
    assert cpu.tokens == whole.tokens and cpu.forwards == whole.forwards + 2


def test_documents_keep_their_own_slots_lru(eng: Engine) -> None:
    eng.cache.clear()
    spec = CanvasSpec(8)
    pa, pb = text_ids(eng, 30, seed=5), text_ids(eng, 30, seed=6)
    eng.generate(pa, spec, cache_key="a")
    eng.generate(pb, spec, cache_key="b")
    assert eng.generate(pa + [66], spec, cache_key="a").cached_tokens == 30
    assert eng.generate(pb + [66], spec, cache_key="b").cached_tokens == 30
    assert len(eng.cache) == 2 and eng.cache.nbytes > 0


def test_a_document_keeps_a_slot_per_prompt_kind(eng: Engine) -> None:
    """FIM and next-edit prompts of one document share only the context: each kind keeps its own
    slot, and a new kind's slot starts from the other's shared prefix."""
    eng.cache.clear()
    spec = CanvasSpec(8)
    region = eng.tokenizer.special.region_start
    shared = text_ids(eng, 20, seed=11)
    fim, edit = shared + text_ids(eng, 30, seed=12), shared + [region] + text_ids(eng, 30, seed=13)
    eng.generate(fim, spec, cache_key="doc")
    seeded = eng.generate(edit, spec, cache_key="doc")
    assert seeded.cached_tokens == 20  # the shared context, copied from the FIM slot
    assert seeded.tokens == eng.generate(edit, spec).tokens  # decodes as if computed
    assert len(eng.cache) == 2
    assert eng.generate(fim + [66], spec, cache_key="doc").cached_tokens == 50
    assert eng.generate(edit + [66], spec, cache_key="doc").cached_tokens == 51
    eng.cache.clear("doc")
    assert len(eng.cache) == 0


def test_an_existing_slot_is_reseeded_from_a_longer_shared_prefix(eng: Engine) -> None:
    """A next edit after typing: the document's edit slot holds an older edit prompt, the FIM slot
    holds the current context; the new edit prompt shares the FIM prompt's context, so its slot is
    reseeded from the FIM slot (not recomputed from its own short common prefix), and decodes the same."""
    eng.cache.clear()
    spec = CanvasSpec(8)
    region = eng.tokenizer.special.region_start
    old_ctx, ctx = text_ids(eng, 20, seed=21), text_ids(eng, 40, seed=22)
    eng.generate(old_ctx + [region] + text_ids(eng, 20, seed=23), spec, cache_key="doc")  # an old edit
    eng.generate(ctx + text_ids(eng, 20, seed=24), spec, cache_key="doc")  # typing since: FIM prompts
    edit = ctx + [region] + text_ids(eng, 20, seed=25)
    got = eng.generate(edit, spec, cache_key="doc")
    assert got.cached_tokens == 40  # the FIM slot's context, not the old edit slot's 0
    assert got.tokens == eng.generate(edit, spec).tokens
    assert eng.generate(edit + [66], spec, cache_key="doc").cached_tokens == len(edit)  # its own slot now
    eng.cache.clear("doc")


def test_prefix_cache_byte_budget_evicts_least_recent() -> None:
    def slot() -> Slot:
        return Slot([1, 2, 3], KVCache(2, 1, 2, 8, 256, torch.float32, "cpu"))

    one = slot().kv.nbytes
    pc = PrefixCache(budget_bytes=2 * one)
    pc.put("a", slot())
    pc.put("b", slot())
    assert pc.take("a") is not None  # a is now in use (not in the LRU) ...
    pc.put("a", slot())  # ... and most recent once given back
    pc.put("c", slot())
    assert "b" not in pc and "a" in pc and "c" in pc and pc.nbytes <= 2 * one
    tiny = PrefixCache(budget_bytes=one // 2)
    tiny.put("x", slot())
    assert len(tiny) == 0  # a slot larger than the whole budget is not kept


def test_kv_cache_grows_and_checks_capacity() -> None:
    kv = KVCache(1, 1, 2, 4, 10, torch.float32, "cpu")
    assert kv.capacity == 256
    k = torch.randn(1, 2, 5, 4)
    kv.write(0, k, k, 0)
    kv.length = 5
    kv.ensure(300)
    assert kv.capacity == 512 and torch.equal(kv.k[0][:, :, :5], k)
    with pytest.raises(ValueError, match="too small"):
        kv.write(0, k, k, 510)
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2 and common_prefix([], [1]) == 0
    assert common_prefix((1, 2, 3), [1, 2, 4]) == 2 and common_prefix("abcd", "abd") == 2  # any two sequences
    long = list(range(40_000))  # past one compared block (16K): the bisection inside the differing one
    assert common_prefix(long, long[:30_001] + [-1]) == 30_001 and common_prefix(long, tuple(long)) == 40_000


def test_bidirectional_exact_mode_equals_recompute_and_dual_cache_runs() -> None:
    tok = Tokenizer.byte_level()
    args = preset("tiny", attention="bidirectional", special_tokens=tok.special.as_dict())
    model = Transformer(args, init=False).init_random(1)
    exact = Engine(model, tok, approx_cache=False)
    approx = Engine(model, tok, approx_cache=True)
    prompt = text_ids(exact, 30, seed=7)
    cfg = SamplerConfig(block_size=8)
    spec = CanvasSpec(16, stop_at_end=False)
    ev_a: list = []
    ev_b: list = []
    a = exact.generate(prompt, spec, cfg, cache_key="k", on_step=ev_a.append)
    b = approx.generate(prompt, spec, cfg, cache_key="k", on_step=ev_b.append)
    assert a.cached_tokens == 0 and b.cached_tokens == 0  # no cross-request reuse for full attention
    assert len(a.tokens) == len(b.tokens) == 16 and a.steps == a.forwards
    # the first step of a block is a full forward in both modes
    assert ev_a[0].canvas == ev_b[0].canvas
    # exact mode == full recompute with a full-attention reference
    sp = tok.special
    d = Denoiser(spec, cfg, mask_id=sp.mask, end_ids=sp.end_ids, block_size=8,
                 suppress_ids=(sp.fim_prefix, sp.fim_suffix, sp.fim_middle, sp.edit_history,
                               sp.region_start, sp.region_end, sp.file_sep))
    n = len(prompt)
    with torch.no_grad():
        while not d.finished:
            s, _ = d.block_range()
            h = model(torch.tensor([prompt + d.canvas]), logits_slice=slice(0, 0))[0]
            cand = d.candidates()
            d.step(model.logits(h[[n + s + c - 1 for c in cand]][None])[0], cand)
            if not d.finished and d.block_done():
                d.next_block()
    assert a.tokens == d.output()[0]


@pytest.mark.parametrize("window", ["block", "adaptive"])
def test_engine_failure_keeps_the_cached_prompt(eng: Engine, monkeypatch: pytest.MonkeyPatch, window: str) -> None:
    eng.cache.clear()
    prompt = text_ids(eng, 40, seed=9)
    spec = CanvasSpec(8)
    monkeypatch.setattr(eng, "sampler", SamplerConfig(window=window, speculate=0))  # type: ignore[arg-type]
    eng.generate(prompt, spec, cache_key="f")

    def boom(*_: object) -> None:
        raise RuntimeError("out of memory")

    with monkeypatch.context() as m:
        if window == "block":
            m.setattr(engine_mod, "decode_blocks", boom)
        else:
            m.setattr(engine_mod.WindowDecoder, "run", boom)
        with pytest.raises(RuntimeError, match="out of memory"):
            eng.generate(prompt + [70], spec, cache_key="f")
    r = eng.generate(prompt + [70, 71], spec, cache_key="f")
    assert r.cached_tokens == 41 and r.tokens == eng.generate(prompt + [70, 71], spec).tokens


def test_prefix_budget_holds_a_pinned_context_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """CPU: 384 MiB (the 1 GB RSS goal). CUDA: 40 % of free memory, never less than one slot of min(max_seq_len, 32K)
    tokens (Dream-Coder-7B's shape: 28 layers, 4 KV heads of 128, bf16 → 1.75 GiB)."""
    from engine.caches.prefix import prefix_budget
    from engine.config import ModelArgs

    args = ModelArgs(vocab_size=152064, dim=3584, n_layers=28, n_heads=28, n_kv_heads=4,
                     intermediate_size=18944, max_seq_len=131072)
    monkeypatch.delenv("EDIT_SERVER_PREFIX_CACHE_MB", raising=False)
    assert prefix_budget(args, torch.bfloat16, torch.device("cpu")) == 384 << 20
    one = 2 * 28 * 4 * 128 * 2 * 32768
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (2 << 30, 80 << 30))
    assert prefix_budget(args, torch.bfloat16, torch.device("cuda")) == one  # 0.8 GiB < one slot
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (40 << 30, 80 << 30))
    assert prefix_budget(args, torch.bfloat16, torch.device("cuda")) == int((40 << 30) * 0.4)


def test_prefix_budget_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.caches.prefix import prefix_budget
    from engine.config import ModelArgs

    args = ModelArgs(vocab_size=64, dim=16, n_layers=2, n_heads=2, n_kv_heads=1, intermediate_size=32)
    monkeypatch.setenv("EDIT_SERVER_PREFIX_CACHE_MB", "64")
    assert prefix_budget(args, torch.bfloat16, torch.device("cpu")) == 64 << 20
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (40 << 30, 80 << 30))
    assert prefix_budget(args, torch.bfloat16, torch.device("cuda")) == 64 << 20  # overrides on any device
    for bad in ("lots", "0", "-5"):
        monkeypatch.setenv("EDIT_SERVER_PREFIX_CACHE_MB", bad)
        with pytest.raises(ValueError, match="EDIT_SERVER_PREFIX_CACHE_MB"):
            prefix_budget(args, torch.bfloat16, torch.device("cpu"))
