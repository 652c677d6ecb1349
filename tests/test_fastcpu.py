"""engine.cpu.fastcpu: the int8 / fused-layer CPU path computes what the float model computes."""

from __future__ import annotations

import copy

import pytest
import torch

from engine import CanvasSpec, EditPrompt, Engine, FimPrompt, GenerateRequest, SamplerConfig
from engine.attention import causal_mask
from engine.caches.prefix import KVCache
from engine.config import preset
from engine.cpu import fastcpu
from engine.model import Transformer
from engine.tokenizer import Tokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny(**kw: object) -> Transformer:
    tok = Tokenizer.byte_level()
    return Transformer(preset("tiny", special_tokens=tok.special.as_dict(), **kw), init=False).init_random(3)  # type: ignore[arg-type]


@torch.no_grad()
def test_fast_layers_match_the_float_model() -> None:
    ref = tiny()
    fast = fastcpu.convert(copy.deepcopy(ref))
    assert getattr(fast, "fast_cpu", None) == fastcpu.FORMAT
    ids = torch.randint(0, 256, (1, 40), generator=torch.Generator().manual_seed(0))
    a, b = ref(ids, is_causal=True), fast(ids, is_causal=True)  # T > SMALL: dequantized fp32 GEMMs
    assert torch.allclose(a, b, atol=0.05 * a.abs().max().item())
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() > 0.9
    # over a (bf16) KV cache, a few positions at a time (the int8 kernel): the same numbers
    kv = KVCache.for_model(fast.args, 1, 64, fastcpu.KV_DTYPE, "cpu")
    fast(ids[:, :36], cache=kv, is_causal=True, logits_slice=slice(0, 0))
    kv.length = 36
    step = fast(ids[:, 36:], offset=36, cache=kv, mask=causal_mask(4, 36))
    assert torch.allclose(step[0], b[0, 36:], atol=0.05 * b.abs().max().item())


def test_unsupported_models_are_left_alone() -> None:
    m = tiny(qk_norm=True)
    assert not fastcpu.supported(m) and fastcpu.convert(m) is m and not hasattr(m, "fast_cpu")


def test_engine_with_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    tok = Tokenizer.byte_level()
    eng = Engine(tiny(), tok, fast_cpu=True, sampler=SamplerConfig(window="adaptive", speculate=4))
    assert eng.info["fast_cpu"] == fastcpu.FORMAT and eng.kv_dtype == fastcpu.KV_DTYPE
    assert eng.info["params"] > 0 and eng.info["dtype"] == "float32"
    fim = FimPrompt("def add(a, b):\n    return a + b\n", "\n", path="m.py")  # a line start: nothing healed
    r = eng.infill(fim, max_tokens=12, cache_key="d")
    again = eng.infill(fim, max_tokens=12, cache_key="d")
    assert again.cached_tokens == again.prompt_tokens and again.tokens == r.tokens
    e = eng.rewrite(EditPrompt("import os\n", "x = 1\n", "\n", cursor=2, path="m.py"), cache_key="d")
    assert e.finish_reason in ("end", "length")
    blocks = eng.generate(tok.encode("x = 1\n"), CanvasSpec(8), SamplerConfig(window="block"))
    assert len(blocks.tokens) <= 8
    # the switch: off by default for models whose loader does not ask for it, env override
    assert Engine(tiny(), tok).info["fast_cpu"] is None
    monkeypatch.setenv("EDIT_SERVER_FASTCPU", "1")
    assert Engine(tiny(), tok).info["fast_cpu"] == fastcpu.FORMAT
    monkeypatch.setenv("EDIT_SERVER_FASTCPU", "0")
    assert Engine(tiny(), tok, meta={"fast_cpu": True}).info["fast_cpu"] is None


@torch.no_grad()
@pytest.mark.parametrize("bias", [False, True])
def test_int8_gemm_is_per_token(monkeypatch: pytest.MonkeyPatch, bias: bool) -> None:
    """Prefill-sized batches (> SMALL rows) through the quantised engine's int8 GEMM: each row scaled to max 1 first, so a row of small values next to a row 1000× larger
    keeps its precision (a per-tensor activation scale would round it to zero); the bias is added
    once, after the row scale."""
    if not fastcpu._int8_gemm():
        pytest.skip("this PyTorch build has no x86 / fbgemm quantised engine")
    g = torch.Generator().manual_seed(0)
    w = torch.randn(64, 48, generator=g)
    lin = fastcpu.Int8Linear.from_weight(w, torch.randn(64, generator=g) if bias else None)
    x = torch.randn(40, 48, generator=g)
    x[0] *= 1000.0  # an outlier token
    x[1] *= 1e-3  # a quiet one
    want = torch.nn.functional.linear(x, lin.dequantized(), lin.bias)
    monkeypatch.setattr(fastcpu, "INT8_GEMM", False)
    assert (lin(x) - want).norm() / want.norm() < 0.01  # the weight-only kernels
    monkeypatch.setattr(fastcpu, "INT8_GEMM", True)
    got = lin(x)
    rel = (got - want).norm(dim=1) / want.norm(dim=1)
    # 7-bit activations (CPUs without VNNI, where 8 bits would saturate) round twice as coarsely
    assert rel.max() < (0.03 if fastcpu.REDUCE_RANGE else 0.02), rel
    assert lin._packed is not None
    lin._packed = None  # decode-sized batches keep the weight-only kernel: nothing is packed
    lin(x[:fastcpu.SMALL])
    assert lin._packed is None


@torch.no_grad()
def test_int4_mlp_and_head_for_narrow_steps() -> None:
    """`attach_int4`: inside `int4_steps` the MLP's and the LM head's narrow steps read group-32 int4 weights
    (close to int8); outside it, wider steps and the state dict are untouched; a saved copy attaches without
    packing."""
    assert fastcpu.int4_available()
    w = torch.randn(64, 96, generator=torch.Generator().manual_seed(1))
    packed, sz = fastcpu.pack_int4(w)
    assert sz.shape == (3, 64, 2) and sz.dtype == torch.bfloat16
    x = torch.randn(2, 96, dtype=torch.bfloat16)
    got = torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, 32, sz).float()
    want = x.float() @ w.t()
    assert (got - want).abs().max() < 0.15 * want.abs().max()  # 16 levels per group of 32
    fast = fastcpu.convert(tiny(vocab_size=288))  # the int4 kernel's layout wants rows in multiples of 16
    keys = set(fast.state_dict())
    ids = torch.randint(0, 256, (1, 40), generator=torch.Generator().manual_seed(0))
    kv = KVCache.for_model(fast.args, 1, 64, fastcpu.KV_DTYPE, "cpu")
    fast(ids[:, :38], cache=kv, is_causal=True, logits_slice=slice(0, 0))
    kv.length = 38

    def step() -> torch.Tensor:
        return fast(ids[:, 38:], offset=38, cache=kv, mask=causal_mask(2, 38))

    int8, wide8 = step(), fast(ids, is_causal=True)
    head = fast.model.embed_tokens.lin  # tied: the embedding's int8 rows are the head
    h = torch.randn(2, fast.args.dim, generator=torch.Generator().manual_seed(2))
    logits8 = fast.logits(h)
    n = fastcpu.attach_int4(fast)
    assert n == 2 * len(fast.model.layers) + 1 and set(fast.state_dict()) == keys  # a copy beside, not a format
    assert head.int4 is not None
    with fastcpu.int4_steps():
        logits4 = fast.logits(h)
    assert not torch.equal(logits4, logits8)
    assert torch.allclose(logits4, logits8, atol=0.1 * logits8.abs().max().item())
    assert torch.equal(step(), int8)  # attached, but not asked for
    with fastcpu.int4_steps():
        int4, wide4 = step(), fast(ids, is_causal=True)
        with fastcpu.int4_steps(False):
            assert torch.equal(step(), int8)
        assert torch.equal(step(), int4)
    assert not torch.equal(int4, int8) and torch.allclose(int4, int8, atol=0.1 * int8.abs().max().item())
    assert torch.equal(wide4, wide8)  # prefill (> SMALL positions) keeps the int8 kernels
    # the saved copy: the same matrices without packing; a wrong-shaped one is packed again
    state = fastcpu.int4_state(fast)
    assert len(state) == 2 * n
    again = fastcpu.convert(tiny(vocab_size=288))
    bad = {**state, "layers.0.down.int4_sz": state["layers.0.down.int4_sz"][:1]}
    assert fastcpu.attach_int4(again, packed=bad) == n
    assert again.model.layers[1].gate_up.int4[0] is state["layers.1.gate_up.int4"]  # type: ignore[index]
    assert again.model.layers[0].down.int4[1].shape == state["layers.0.down.int4_sz"].shape  # type: ignore[index]
    assert again.model.embed_tokens.lin.int4[0] is state["head.int4"]  # type: ignore[index]
    with fastcpu.int4_steps():
        assert torch.equal(again(ids[:, :38], is_causal=True), fast(ids[:, :38], is_causal=True))


def test_int4_steps_follow_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """$EDIT_SERVER_INT4: single-line requests read the int4 copy by default (or ``line``), none with ``0``,
    every request with ``1``; a block in the same batch as a single line keeps the int8 weights for both."""
    tok = Tokenizer.byte_level()
    seen: list[bool] = []
    real = fastcpu.int4_steps

    def spy(on: bool = True):  # type: ignore[no-untyped-def]
        seen.append(on)
        return real(on)

    monkeypatch.setattr(fastcpu, "int4_steps", spy)
    line = CanvasSpec(6, single_line=True)
    block = CanvasSpec(6)
    ids = [10, 11, 12, 13]
    for mode, want in (("", [True, False, False]), ("line", [True, False, False]), ("1", [True, True, True]),
                       ("0", [False, False, False])):
        monkeypatch.setenv("EDIT_SERVER_INT4", mode)
        eng = Engine(tiny(), tok, fast_cpu=True)
        # the MLPs; not the head: 268 rows, not a multiple of the int4 layout's 16 (the test above has one)
        assert eng.info["int4_matrices"] == (0 if mode == "0" else 2 * len(eng.model.model.layers))
        assert eng.info["int4_steps"] == {"": "line", "1": "all", "0": "off"}.get(mode, mode)
        seen.clear()
        eng.generate(ids, line)
        eng.generate(ids, block)
        eng.generate_batch([GenerateRequest(ids, line), GenerateRequest(ids, block)])
        assert seen == want, mode
    monkeypatch.delenv("EDIT_SERVER_INT4")
    assert Engine(tiny(), tok, fast_cpu=False).info["int4_matrices"] == 0  # the int8 path only
    monkeypatch.setenv("EDIT_SERVER_INT4", "yes")
    with pytest.raises(ValueError, match="EDIT_SERVER_INT4"):
        Engine(tiny(), tok, fast_cpu=True)
