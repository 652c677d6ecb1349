"""Shared helpers of the cross-check tests: tiny checkpoints in a real model's on-disk layout, our
logits through the real loader, and the attention masks of each regime."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from tests.test_loading_hf import N_BASE, write_tokenizer

IDS = [5, 17, 200, 3, 99, 256, 42, 7, 128, 64, 1, 250]
TOL = 1e-4


def save_checkpoint(root: Path, state: dict[str, torch.Tensor], config: dict[str, Any],
                    extra_tokens: tuple[str, ...] = ("<|mask|>",), tokenizer_config: dict[str, Any] | None = None
                    ) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    if config.get("tie_word_embeddings"):
        state = {k: v for k, v in state.items() if k != "lm_head.weight"}
    save_file({k: v.contiguous().clone() for k, v in state.items()}, str(root / "model.safetensors"),
              metadata={"format": "pt"})
    (root / "config.json").write_text(json.dumps(config))
    write_tokenizer(root, extra=extra_tokens)
    if tokenizer_config:
        tc = json.loads((root / "tokenizer_config.json").read_text())
        (root / "tokenizer_config.json").write_text(json.dumps(dict(tc, **tokenizer_config)))
    return root


def hf_config_dict(model: torch.nn.Module) -> dict[str, Any]:
    d = model.config.to_dict()
    rp = d.get("rope_parameters") or {}
    d.setdefault("rope_theta", rp.get("rope_theta", 10000.0))
    if "partial_rotary_factor" in rp:
        d.setdefault("partial_rotary_factor", rp["partial_rotary_factor"])
    return d


def seeded(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Random weights everywhere, norms around 1, biases non-zero: mix-ups cannot cancel out."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
        for name, b in model.named_buffers():
            if "bias" in name:  # routing bias buffers
                b.copy_(torch.randn(b.shape, generator=g) * 0.05)
    return model.eval()


def ours(root: Path, hub_id: str | None = None) -> tuple[torch.nn.Module, Any]:
    from engine.loading.hf import load_hf
    from engine.model import Transformer

    ck = load_hf(root, hub_id=hub_id)
    m = Transformer(ck.args, init=False)
    m.load_state_dict(ck.state_dict, strict=True, assign=True)
    return m.float().eval(), ck


def full_mask(t: int) -> torch.Tensor:
    return torch.ones(t, t, dtype=torch.bool)


def causal(t: int) -> torch.Tensor:
    return torch.tril(full_mask(t))


def absolute_blocks(t: int, block: int) -> torch.Tensor:
    """SDAR / Fast-dLLM v2 / LLaDA2 inference mask (``block_q >= block_kv``), rebuilt here from the
    published code and checked against engine.attention.absolute_block_mask."""
    i = torch.arange(t)
    want = (i[:, None] // block) >= (i[None, :] // block)
    from engine.attention import absolute_block_mask

    assert torch.equal(absolute_block_mask(t, block), want)
    assert torch.equal(absolute_block_mask(t - 3, block, offset=3), want[3:])
    return want


def compare(ours_model: torch.nn.Module, hf_model: torch.nn.Module, mask: torch.Tensor | None,
            ids: list[int] = IDS, vocab: int = N_BASE) -> float:
    """Max |logit difference| over the checkpoint's own vocabulary; ``mask`` (T, T) True = attend,
    None = our model without a mask (full attention) vs the reference with a full mask."""
    x = torch.tensor([ids])
    t = len(ids)
    with torch.no_grad():
        a = ours_model(x, mask=mask)[0, :, :vocab]
        ref_mask = (full_mask(t) if mask is None else mask)[None, None]
        b = hf_model(x, attention_mask=ref_mask).logits[0, :, :vocab]
    return float((a - b).abs().max())
