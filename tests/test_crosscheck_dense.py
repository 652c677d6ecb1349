"""Cross-checks of the dense architectures: a tiny random checkpoint in each model's real on-disk
layout (config.json fields, tensor names) is loaded by our loader, and its logits must equal
transformers' own class (Qwen2 / Qwen3 / Llama) run with the attention mask of that model's regime,
to 1e-4. The regime (mask, logit shift, block size) the loader picks is checked against the
published generation code's (docs/MODELS.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.attention import block_causal_mask
from tests.crosscheck_util import (
    IDS,
    TOL,
    absolute_blocks,
    causal,
    compare,
    hf_config_dict,
    ours,
    save_checkpoint,
    seeded,
)
from tests.test_loading_hf import N_BASE

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

DIMS = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=48, max_position_embeddings=256, vocab_size=N_BASE + 1)


def _qwen2(**over: object) -> torch.nn.Module:
    cfg = transformers.Qwen2Config(**{**DIMS, "rope_theta": 1e6, **over})
    return seeded(transformers.Qwen2ForCausalLM(cfg))


def _qwen3(**over: object) -> torch.nn.Module:
    cfg = transformers.Qwen3Config(**{**DIMS, "rope_theta": 1e6, "head_dim": 16, **over})
    return seeded(transformers.Qwen3ForCausalLM(cfg))


def _write(root: Path, hf: torch.nn.Module, arch: str, model_type: str, **fields: object) -> Path:
    cfg = dict(hf_config_dict(hf), architectures=[arch], model_type=model_type, **fields)
    return save_checkpoint(root, hf.state_dict(), cfg)


def test_dream_family_is_bidirectional_shifted(tmp_path: Path) -> None:
    """Dream / Dream-Coder / DreamOn / DiffuCoder: DreamModel = Qwen2 weights, full attention."""
    hf = _qwen2()
    m, ck = ours(_write(tmp_path, hf, "DreamModel", "Dream", mask_token_id=N_BASE))
    a = ck.args
    assert (a.attention, a.shifted_logits, a.qkv_bias) == ("bidirectional", True, True)
    assert ck.tokenizer.special.mask == N_BASE
    assert compare(m, hf, None) < TOL  # the engine runs bidirectional models without a mask
    assert compare(m, hf, causal(len(IDS))) < TOL


def test_open_dcoder_regime_comes_from_the_registry(tmp_path: Path) -> None:
    """Open-dCoder ships a plain Qwen2ForCausalLM config; it is a bidirectional, shifted dLLM."""
    hf = _qwen2(tie_word_embeddings=True)
    root = _write(tmp_path, hf, "Qwen2ForCausalLM", "qwen2")
    save_checkpoint(root, hf.state_dict(), dict(hf_config_dict(hf), architectures=["Qwen2ForCausalLM"]),
                    extra_tokens=("<M>",), tokenizer_config={"mask_token": "<M>"})
    m, ck = ours(root, hub_id="fredzzp/open-dcoder-0.5B")
    assert (ck.args.attention, ck.args.shifted_logits) == ("bidirectional", True)
    assert ck.tokenizer.token_text(ck.tokenizer.special.mask) == "<M>"
    assert ck.meta["registry"] == "fredzzp/open-dcoder-0.5B"
    assert compare(m, hf, None) < TOL
    _, plain = ours(root)  # without the name: an AR Qwen2 (our block-causal adapters)
    assert plain.args.attention == "block_causal"


def test_fast_dllm_v2_block_causal_shifted(tmp_path: Path) -> None:
    """Fast-dLLM v2 (modeling.py): Qwen2 weights, eval mask block_q >= block_kv over absolute
    positions (bd_size 32), token shift (the next block's first token from the last logits)."""
    hf = _qwen2()
    m, ck = ours(_write(tmp_path, hf, "Fast_dLLM_QwenForCausalLM", "Fast_dLLM_Qwen", bd_size=4,
                        mask_token_id=N_BASE))
    a = ck.args
    assert (a.attention, a.shifted_logits, a.block_size, a.block_align) == ("block_causal", True, 4, "absolute")
    assert compare(m, hf, absolute_blocks(len(IDS), 4)) < TOL
    # our canvas layout (prompt causal, canvas blocks bidirectional) on the same weights
    assert compare(m, hf, block_causal_mask(4, len(IDS) - 4, 4)) < TOL


def test_qwen3_sdar_coda(tmp_path: Path) -> None:
    """Qwen3 layout (per-head q/k RMSNorm before RoPE, head_dim 16 != hidden/heads 8): plain Qwen3
    (causal), SDAR (block 4, unshifted), CoDA (bidirectional, shifted)."""
    hf = _qwen3()
    m, ck = ours(_write(tmp_path / "qwen3", hf, "Qwen3ForCausalLM", "qwen3"))
    assert ck.args.qk_norm and ck.args.head_dim == 16 and ck.args.attention == "block_causal"
    assert compare(m, hf, causal(len(IDS))) < TOL
    m, ck = ours(_write(tmp_path / "sdar", hf, "SDARForCausalLM", "sdar", mask_token_id=N_BASE))
    assert (ck.args.attention, ck.args.shifted_logits, ck.args.block_size) == ("block_causal", False, 4)
    assert ck.args.block_align == "absolute"
    assert compare(m, hf, absolute_blocks(len(IDS), 4)) < TOL
    m, ck = ours(_write(tmp_path / "coda", hf, "CoDALanguageModel", "coda", mask_token_id=N_BASE))
    assert (ck.args.attention, ck.args.shifted_logits) == ("bidirectional", True)
    assert compare(m, hf, None) < TOL


def test_qwen3_tied_with_attention_bias(tmp_path: Path) -> None:
    hf = _qwen3(tie_word_embeddings=True, attention_bias=True, head_dim=8)
    m, ck = ours(_write(tmp_path, hf, "Qwen3ForCausalLM", "qwen3"))
    assert ck.args.qkv_bias and ck.args.o_bias and ck.args.head_size is None
    assert compare(m, hf, causal(len(IDS))) < TOL


def test_llada_bidirectional_vs_llama(tmp_path: Path) -> None:
    """LLaDA-8B (modeling_llada.py): Llama math under its own tensor names, full attention,
    unshifted logits. The renaming is checked in test_loading_hf; here the bidirectional logits."""
    from tests.test_loading_hf import _to_llada, make_hf

    llama = make_hf(tmp_path / "llama", "llama", vocab=N_BASE + 1)
    _to_llada(tmp_path / "llama", tmp_path / "llada", mask_id=N_BASE)
    m, ck = ours(tmp_path / "llada")
    assert (ck.args.attention, ck.args.shifted_logits) == ("bidirectional", False)
    # _to_llada writes LLaDA's own theta and eps: the reference gets the same
    d = {k: v for k, v in llama.config.to_dict().items() if k not in ("rope_parameters", "rope_theta", "rms_norm_eps")}
    ref = transformers.LlamaForCausalLM(transformers.LlamaConfig(**d, rms_norm_eps=1e-5, rope_parameters={
        "rope_type": "default", "rope_theta": 500000.0}))
    ref.load_state_dict(llama.state_dict())
    assert compare(m, ref.eval(), None) < TOL


def test_partial_rope_matches_transformers() -> None:
    """Partial RoPE (LLaDA2: half of each head rotated) against transformers' rope init + apply."""
    from transformers.models.glm4_moe.modeling_glm4_moe import apply_rotary_pos_emb

    from engine.config import ModelArgs
    from engine.model import Transformer, apply_rope

    args = ModelArgs(vocab_size=10, dim=32, n_layers=1, n_heads=2, n_kv_heads=2, intermediate_size=8,
                     head_size=16, rotary_dim=8, rope_theta=1000.0)
    m = Transformer(args)
    pos = torch.arange(6)[None]
    cos, sin = m._rope(pos)
    q = torch.randn(1, 2, 6, 16)
    got = apply_rope(q, cos[:, None], sin[:, None])
    inv = 1.0 / (1000.0 ** (torch.arange(0, 8, 2).float() / 8))
    emb = torch.cat([pos[0, :, None] * inv] * 2, dim=-1)[None]
    want, _ = apply_rotary_pos_emb(q, q, emb.cos(), emb.sin())
    assert torch.allclose(got, want, atol=1e-6)
    assert torch.equal(got[..., 8:], q[..., 8:])
