"""Cross-checks of the mixture-of-experts architectures (tiny random configs, fp32, 1e-4):

* LLaDA-MoE (modeling_lladamoe.py: OLMoE layout, per-head q/k norm, softmax router, top-k weights
  not renormalised) against transformers' Qwen3Moe (the same math when there is no shared expert
  and no routing bias), and — with a shared expert, a routing bias and a dense layer — against the
  published block's math re-derived here in plain torch;
* LLaDA2.0 (modeling_llada2_moe.py, BailingMoeV2: fused query_key_value, partial RoPE, sigmoid
  router with expert bias and group-limited top-k, routed scaling, shared expert, first layer dense)
  against transformers' Glm4Moe, which implements the same routing and attention, under the
  block-causal inference mask.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.crosscheck_util import IDS, TOL, absolute_blocks, compare, ours, save_checkpoint, seeded
from tests.test_loading_hf import N_BASE

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

V = N_BASE + 1


def _unfuse_experts(sd: dict[str, torch.Tensor], prefix: str = "mlp.experts") -> dict[str, torch.Tensor]:
    """transformers v5 keeps experts fused (E, 2I, D) / (E, D, I); checkpoints list them one by one."""
    out: dict[str, torch.Tensor] = {}
    for k, v in sd.items():
        if k.endswith(f"{prefix}.gate_up_proj"):
            base = k[: -len("gate_up_proj")]
            i = v.shape[1] // 2
            for e in range(v.shape[0]):
                out[f"{base}{e}.gate_proj.weight"] = v[e, :i]
                out[f"{base}{e}.up_proj.weight"] = v[e, i:]
        elif k.endswith(f"{prefix}.down_proj"):
            base = k[: -len("down_proj")]
            for e in range(v.shape[0]):
                out[f"{base}{e}.down_proj.weight"] = v[e]
        else:
            out[k] = v
    return out


def _llada_moe_config(**over: object) -> dict[str, object]:
    cfg: dict[str, object] = dict(
        architectures=["LLaDAMoEModelLM"], model_type="lladamoe", vocab_size=V, hidden_size=32,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, expert_intermediate_size=16,
        dense_intermediate_size=48, shared_expert_intermediate_size=None, num_experts=6,
        num_experts_per_tok=2, qk_layernorm=True, moe_layer_freq=[1, 1], rope_theta=50000.0,
        partial_rotary_factor=1.0, rms_norm_eps=1e-5, max_position_embeddings=256,
        tie_word_embeddings=False, attention_bias=False, mask_token_id=N_BASE,
        moe_router_enable_expert_bias=False, eos_token_id=256)
    cfg.update(over)
    return cfg


def test_llada_moe_matches_qwen3_moe(tmp_path: Path) -> None:
    hf = seeded(transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(
        vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, moe_intermediate_size=16, intermediate_size=48, num_experts=6, num_experts_per_tok=2,
        norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[], rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 50000.0}, max_position_embeddings=256)))
    root = save_checkpoint(tmp_path, _unfuse_experts(hf.state_dict()), _llada_moe_config())
    m, ck = ours(root)
    a = ck.args
    assert (a.attention, a.shifted_logits, a.n_experts, a.moe_router, a.moe_norm_topk) == (
        "bidirectional", False, 6, "softmax", False)
    assert compare(m, hf, None) < TOL


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _llada_moe_reference(sd: dict[str, torch.Tensor], cfg: dict, ids: list[int]) -> torch.Tensor:
    """modeling_lladamoe.py's forward re-derived: full attention, q/k RMSNorm per head before RoPE,
    MoE block = softmax(router) + expert_bias → top-k (weights not renormalised) + shared expert on
    the same normed input; dense MLP where moe_layer_freq is 0."""
    d, nh, nkv, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["rms_norm_eps"]
    hd = d // nh
    x = sd["model.embed_tokens.weight"][torch.tensor(ids)]
    t = len(ids)
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2).float() / hd))
    ang = torch.arange(t)[:, None].float() * inv
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)

    def rope(z: torch.Tensor) -> torch.Tensor:  # (h, t, hd)
        z1, z2 = z[..., : hd // 2], z[..., hd // 2:]
        return z * cos + torch.cat([-z2, z1], -1) * sin

    def mlp(p: str, h: torch.Tensor) -> torch.Tensor:
        return F.linear(F.silu(F.linear(h, sd[p + "gate_proj.weight"])) * F.linear(h, sd[p + "up_proj.weight"]),
                        sd[p + "down_proj.weight"])

    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = _rms(x, sd[p + "input_layernorm.weight"], eps)
        q = F.linear(h, sd[p + "self_attn.q_proj.weight"]).view(t, nh, hd)
        k = F.linear(h, sd[p + "self_attn.k_proj.weight"]).view(t, nkv, hd)
        v = F.linear(h, sd[p + "self_attn.v_proj.weight"]).view(t, nkv, hd).transpose(0, 1)
        q = rope(_rms(q, sd[p + "self_attn.q_norm.weight"], eps).transpose(0, 1))
        k = rope(_rms(k, sd[p + "self_attn.k_norm.weight"], eps).transpose(0, 1))
        k, v = k.repeat_interleave(nh // nkv, 0), v.repeat_interleave(nh // nkv, 0)
        att = ((q @ k.transpose(-1, -2)) / hd ** 0.5).softmax(-1) @ v  # no mask: bidirectional
        x = x + F.linear(att.transpose(0, 1).reshape(t, d), sd[p + "self_attn.o_proj.weight"])
        h = _rms(x, sd[p + "post_attention_layernorm.weight"], eps)
        if cfg["moe_layer_freq"][i] == 0:
            x = x + mlp(p + "mlp.", h)
            continue
        probs = F.linear(h, sd[p + "mlp.gate.weight"]).softmax(-1)
        if cfg["moe_router_enable_expert_bias"]:
            probs = probs + sd[p + "mlp.expert_bias"]
        w, e = probs.topk(cfg["num_experts_per_tok"], -1)
        out = torch.zeros_like(h)
        for r in range(t):
            for j in range(e.shape[1]):
                out[r] += w[r, j] * mlp(f"{p}mlp.experts.{int(e[r, j])}.", h[r])
        x = x + out + mlp(p + "shared_expert.", h)
    x = _rms(x, sd["model.norm.weight"], eps)
    return F.linear(x, sd["lm_head.weight"])


def test_llada_moe_shared_expert_bias_dense_layer(tmp_path: Path) -> None:
    cfg = _llada_moe_config(num_hidden_layers=3, moe_layer_freq=[0, 1, 1], shared_expert_intermediate_size=24,
                            moe_router_enable_expert_bias=True)
    g = torch.Generator().manual_seed(1)
    shapes = {"model.embed_tokens.weight": (V, 32), "model.norm.weight": (32,), "lm_head.weight": (V, 32)}
    for i in range(3):
        p = f"model.layers.{i}."
        shapes |= {p + "input_layernorm.weight": (32,), p + "post_attention_layernorm.weight": (32,),
                   p + "self_attn.q_proj.weight": (32, 32), p + "self_attn.k_proj.weight": (16, 32),
                   p + "self_attn.v_proj.weight": (16, 32), p + "self_attn.o_proj.weight": (32, 32),
                   p + "self_attn.q_norm.weight": (8,), p + "self_attn.k_norm.weight": (8,)}
        mlps = [(p + "mlp.", 48)] if i == 0 else [(f"{p}mlp.experts.{e}.", 16) for e in range(6)] + [
            (p + "shared_expert.", 24)]
        for q, f in mlps:
            shapes |= {q + "gate_proj.weight": (f, 32), q + "up_proj.weight": (f, 32), q + "down_proj.weight": (32, f)}
        if i:
            shapes |= {p + "mlp.gate.weight": (6, 32), p + "mlp.expert_bias": (6,)}
    sd = {k: (torch.rand(s, generator=g) + 0.5 if "norm" in k else torch.randn(s, generator=g) * 0.1)
          for k, s in shapes.items()}
    m, ck = ours(save_checkpoint(tmp_path, sd, cfg))
    assert ck.args.dense_layers == (0,) and ck.args.shared_expert_size == 24 and ck.args.moe_expert_bias
    with torch.no_grad():
        got = m(torch.tensor([IDS]))[0, :, :V]
    assert float((got - _llada_moe_reference(sd, cfg, IDS)).abs().max()) < TOL


def _llada2_from_glm(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Glm4Moe weights in LLaDA2's on-disk names: fused query_key_value, attention.dense,
    query/key_layernorm, word_embeddings, mlp.gate.expert_bias, mlp.shared_experts."""
    sd = _unfuse_experts(sd)
    out: dict[str, torch.Tensor] = {}
    for k, v in sd.items():
        if ".self_attn.k_proj." in k or ".self_attn.v_proj." in k:
            continue
        if ".self_attn.q_proj." in k:
            base, kind = k.split(".self_attn.q_proj.")
            out[f"{base}.attention.query_key_value.{kind}"] = torch.cat(
                [v, sd[f"{base}.self_attn.k_proj.{kind}"], sd[f"{base}.self_attn.v_proj.{kind}"]])
            continue
        k = (k.replace("model.embed_tokens.", "model.word_embeddings.").replace(".self_attn.o_proj.", ".attention.dense.")
             .replace(".self_attn.q_norm.", ".attention.query_layernorm.")
             .replace(".self_attn.k_norm.", ".attention.key_layernorm.")
             .replace(".mlp.gate.e_score_correction_bias", ".mlp.gate.expert_bias"))
        out[k] = v
    return out


def test_llada2_matches_glm4_moe(tmp_path: Path) -> None:
    hf = seeded(transformers.Glm4MoeForCausalLM(transformers.Glm4MoeConfig(
        vocab_size=V, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, intermediate_size=48, moe_intermediate_size=16, n_routed_experts=8, num_experts_per_tok=3,
        n_group=2, topk_group=1, n_shared_experts=1, first_k_dense_replace=1, routed_scaling_factor=2.5,
        norm_topk_prob=True, use_qk_norm=True, attention_bias=False, rms_norm_eps=1e-6,
        partial_rotary_factor=0.5, rope_parameters={"rope_type": "default", "rope_theta": 600000.0,
                                                    "partial_rotary_factor": 0.5},
        max_position_embeddings=256)))
    cfg = dict(architectures=["LLaDA2MoeModelLM"], model_type="llada2_moe", vocab_size=V, hidden_size=32,
               num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
               intermediate_size=48, moe_intermediate_size=16, num_experts=8, num_experts_per_tok=3,
               n_group=2, topk_group=1, num_shared_experts=1, first_k_dense_replace=1,
               routed_scaling_factor=2.5, use_qk_norm=True, use_qkv_bias=False, use_bias=False,
               partial_rotary_factor=0.5, rope_theta=600000.0, rms_norm_eps=1e-6,
               max_position_embeddings=256, tie_word_embeddings=False, mask_token_id=N_BASE)
    m, ck = ours(save_checkpoint(tmp_path, _llada2_from_glm(hf.state_dict()), cfg))
    a = ck.args
    assert (a.attention, a.shifted_logits, a.block_size, a.rotary_dim, a.head_dim) == (
        "block_causal", False, 32, 8, 16)
    assert a.dense_layers == (0,) and a.moe_router == "sigmoid" and a.moe_n_group == 2
    assert a.block_align == "absolute"
    assert compare(m, hf, absolute_blocks(len(IDS), 4)) < TOL
    assert compare(m, hf, None) < TOL
