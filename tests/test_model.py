"""Model: logits cross-checked against transformers' Llama / Qwen2 (tiny random configs, fp32)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.attention import attend, bd3lm_layout, bd3lm_logit_index, block_causal_mask, causal_mask
from engine.caches.prefix import KVCache
from engine.config import ModelArgs, preset
from engine.model import Transformer

transformers = pytest.importorskip("transformers")

TOL = 1e-4
V, T = 97, 23


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _pair(kind: str = "llama", rope_scaling: dict | None = None, tie: bool = False,
          bias: bool = False) -> tuple[torch.nn.Module, Transformer]:
    torch.manual_seed(0)
    common = dict(vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=96, rms_norm_eps=1e-6,
                  max_position_embeddings=16, tie_word_embeddings=tie, attn_implementation="sdpa")
    if kind == "qwen2":
        cfg = transformers.Qwen2Config(**common, rope_theta=1e6)
        hf = transformers.Qwen2ForCausalLM(cfg)
    else:
        extra = {"rope_scaling": {**rope_scaling, "rope_theta": 500.0}} if rope_scaling else {}
        cfg = transformers.LlamaConfig(**common, rope_theta=500.0, attention_bias=bias, **extra)
        hf = transformers.LlamaForCausalLM(cfg)
    hf.eval()
    with torch.no_grad():  # non-trivial norms and biases
        for n, p in hf.named_parameters():
            if "norm" in n or n.endswith(".bias"):
                p.add_(torch.randn_like(p) * 0.1)
    args = ModelArgs(vocab_size=V, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, intermediate_size=96,
                     norm_eps=1e-6, rope_theta=1e6 if kind == "qwen2" else 500.0,
                     rope_scaling=rope_scaling, max_seq_len=16, qkv_bias=kind == "qwen2" or bias,
                     o_bias=bias and kind == "llama", tie_embeddings=tie)
    ours = Transformer(args).eval()
    sd = {k: v for k, v in hf.state_dict().items() if not (tie and k == "lm_head.weight")}
    ours.load_state_dict(sd, strict=True)  # HF names as they are
    return hf, ours


def _ids(n: int = T, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, V, (2, n), generator=torch.Generator().manual_seed(seed))


CASES = [
    ("llama", None, False, False),
    ("llama", None, True, True),
    ("llama", {"rope_type": "linear", "factor": 2.0}, False, False),
    ("llama", {"rope_type": "dynamic", "factor": 2.0}, False, False),  # T > max positions: rescaled
    ("llama", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8}, False, False),
    ("qwen2", None, False, True),
]


@pytest.mark.parametrize("kind,scaling,tie,bias", CASES)
@torch.no_grad()
def test_causal_logits_match_transformers(kind: str, scaling: dict | None, tie: bool, bias: bool) -> None:
    hf, ours = _pair(kind, scaling, tie, bias)
    ids = _ids()
    ref = hf(ids).logits
    got = ours(ids, is_causal=True)
    assert got.shape == ref.shape
    assert (got - ref).abs().max().item() <= TOL
    # same thing with an explicit boolean mask and explicit positions
    got2 = ours(ids, torch.arange(T), causal_mask(T))
    assert (got2 - ref).abs().max().item() <= TOL


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@torch.no_grad()
def test_bidirectional_and_block_causal_match_transformers_with_4d_mask(kind: str) -> None:
    hf, ours = _pair(kind)
    ids = _ids()
    full = torch.ones(1, 1, T, T, dtype=torch.bool)
    ref = hf(ids, attention_mask=full, position_ids=torch.arange(T)[None]).logits
    assert (ours(ids) - ref).abs().max().item() <= TOL
    bc = block_causal_mask(7, T - 7, 4)
    ref_bc = hf(ids, attention_mask=bc[None, None], position_ids=torch.arange(T)[None]).logits
    assert (ours(ids, mask=bc) - ref_bc).abs().max().item() <= TOL
    # a full-attention model really looks ahead; causal does not
    ids2 = ids.clone()
    ids2[:, -1] = (ids2[:, -1] + 1) % V
    assert (ours(ids2)[:, 0] - ours(ids)[:, 0]).abs().max() > 1e-4
    assert (ours(ids2, is_causal=True)[:, 0] - ours(ids, is_causal=True)[:, 0]).abs().max() == 0


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@torch.no_grad()
def test_kv_cache_incremental_matches_transformers(kind: str) -> None:
    hf, ours = _pair(kind, tie=kind == "llama")
    ids = _ids()
    ref = hf(ids).logits
    kv = KVCache.for_model(ours.args, 2, T, torch.float32, "cpu")
    parts = [ours(ids[:, :9], cache=kv, offset=0, is_causal=True)]
    kv.length = 9
    parts.append(ours(ids[:, 9:16], cache=kv, offset=9, mask=causal_mask(7, 9)))
    kv.length = 16
    # is_causal over a cached prefix = causal aligned at the bottom right (the CPU's two-call path)
    again = ours(ids[:, 9:16], cache=kv, offset=9, is_causal=True)
    assert (again - parts[-1]).abs().max().item() <= 1e-5
    for t in range(16, T):  # one token at a time (AR decoding)
        parts.append(ours(ids[:, t: t + 1], cache=kv, offset=t))
        kv.length = t + 1
    got = torch.cat(parts, dim=1)
    assert (got - ref).abs().max().item() <= TOL


@pytest.mark.parametrize("t,s,dtype,tol", [(1, 9, torch.float32, 1e-5), (7, 16, torch.float32, 1e-5),
                                           (300, 700, torch.float32, 1e-5), (40, 100, torch.bfloat16, 2e-2)])
def test_causal_over_a_cached_prefix_equals_the_explicit_mask(t: int, s: int, dtype: torch.dtype,
                                                              tol: float) -> None:
    gen = torch.Generator().manual_seed(t)
    q = torch.randn(2, 6, t, 16, generator=gen).to(dtype)
    k, v = (torch.randn(2, 2, s, 16, generator=gen).to(dtype) for _ in range(2))
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=causal_mask(t, s - t)[None, None],
                                         enable_gqa=True)
    got = attend(q, k, v, is_causal=True)
    assert got.shape == ref.shape and got.dtype == dtype
    assert (got.float() - ref).abs().max().item() <= tol


@pytest.mark.parametrize("b,nh,nkv,t,s,masked", [(1, 9, 3, 1, 2048, False), (2, 9, 3, 5, 300, True),
                                                (1, 4, 4, 8, 256, True), (3, 8, 2, 32, 400, True)])
def test_few_queries_over_a_long_half_cache_equal_sdpa(b: int, nh: int, nkv: int, t: int, s: int,
                                                       masked: bool) -> None:
    """A CPU decode step over a bf16 KV cache (engine.attention._small_queries: grouped matmuls in fp32)
    gives fp32 SDPA's output, as closely as SDPA's own bf16 path does."""
    gen = torch.Generator().manual_seed(s)
    q = torch.randn(b, nh, t, 64, generator=gen).bfloat16()
    k, v = (torch.randn(b, nkv, s, 64, generator=gen).bfloat16() for _ in range(2))
    mask = torch.rand(b, 1, t, s, generator=gen) > 0.3 if masked else None
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, enable_gqa=nkv != nh)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=nkv != nh)
    got = attend(q, k, v, mask=mask)
    assert got.dtype == torch.bfloat16 and got.shape == ref.shape
    assert (got.float() - ref).abs().max().item() <= max(2e-3, 1.5 * (theirs.float() - ref).abs().max().item())


@torch.no_grad()
def test_bidirectional_cache_matches_full_forward() -> None:
    _, ours = _pair("qwen2")
    ids = _ids()
    kv = KVCache.for_model(ours.args, 2, T, torch.float32, "cpu")
    ref = ours(ids, cache=kv)  # writes all keys/values
    kv.length = T
    # recomputing a middle block over the cache (dual cache) reproduces the full forward exactly
    got = ours(ids[:, 8:12], cache=kv, offset=8)
    assert (got - ref[:, 8:12]).abs().max().item() <= TOL


@torch.no_grad()
def test_bd3lm_training_layout_equals_cached_block_decoding() -> None:
    """Logits the trainer sees for the noisy blocks == what the engine computes while decoding."""
    args = preset("tiny", vocab_size=V)
    m = Transformer(args).init_random(3).eval()
    n, c, b = 6, 16, args.block_size
    g = torch.Generator().manual_seed(5)
    prompt = torch.randint(0, V, (1, n), generator=g)
    x0 = torch.randint(0, V, (1, c), generator=g)
    xt = torch.where(torch.rand(1, c, generator=g) < 0.5, torch.full_like(x0, V - 1), x0)
    mask, pos = bd3lm_layout(n, c, b)
    seq = torch.cat([prompt, x0, xt], dim=1)
    train = m(seq, pos, mask)[0, bd3lm_logit_index(n, c, b)]  # (c, V)
    # inference: prefill, then per block: noisy block over the cache, commit the clean block
    kv = KVCache.for_model(args, 1, n + c + b, torch.float32, "cpu")
    h = m(prompt, cache=kv, is_causal=True, logits_slice=slice(0, 0))
    kv.length = n
    last = h[0, -1]
    rows = []
    for s in range(0, c, b):
        hb = m(xt[:, s: s + b], cache=kv, offset=n + s, logits_slice=slice(0, 0))[0]
        rows.append(m.logits(torch.cat([last[None], hb[:-1]])[None])[0])
        hc = m(x0[:, s: s + b], cache=kv, offset=n + s, logits_slice=slice(0, 0))
        kv.length = n + s + b
        last = hc[0, -1]
    assert (torch.cat(rows) - train).abs().max().item() <= TOL


def test_presets_and_param_names() -> None:
    m = Transformer(preset("tiny"))
    names = set(m.state_dict())
    assert "model.layers.1.self_attn.q_proj.weight" in names and "lm_head.weight" not in names
    assert "model.layers.0.mlp.gate_proj.weight" in names and "model.norm.weight" in names
    untied = Transformer(preset("tiny", tie_embeddings=False))
    assert "lm_head.weight" in untied.state_dict()
    with pytest.raises(ValueError, match="rope_scaling"):
        Transformer(preset("tiny", rope_scaling={"rope_type": "weird"}))(torch.zeros(1, 2, dtype=torch.long))
