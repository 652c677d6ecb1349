"""Write a `LoadedCheckpoint` as an HF-style directory of small safetensors shards.

Lets a machine without the ``gguf`` package (the GPU box) load the base: convert once here
(``python -m engine.loading.export base OUT --max-shard-mb 60``), ship the ≤ 60 MB shards, and
`engine.loading.load_checkpoint(OUT)` there. ``config.json`` records the architecture, our dLLM
regime (``attention``, ``shifted_logits``, ``block_size``) and ``special_tokens``; tokenizer.json
already contains the special tokens, so loading the export back changes nothing.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from engine.checkpoint import LoadedCheckpoint
from engine.loading.hf import INDEX


def hf_config(ck: LoadedCheckpoint) -> dict[str, object]:
    a = ck.args
    if (a.qk_norm or a.n_experts or a.head_size or a.rotary_dim or a.o_bias or a.clip_qkv is not None
            or a.block_align != "canvas"):
        raise ValueError("export writes Llama / Qwen2 layouts only; this model has q/k norm, experts, a "
                         "decoupled head size, partial RoPE, an o_proj bias, q/k/v clipping or absolute "
                         "block alignment")
    arch = "Qwen2ForCausalLM" if a.qkv_bias else "LlamaForCausalLM"
    eos = a.special_tokens.get("eos") if a.special_tokens else None
    cfg: dict[str, object] = {
        "architectures": [arch], "model_type": "qwen2" if a.qkv_bias else "llama",
        "vocab_size": a.vocab_size, "hidden_size": a.dim, "num_hidden_layers": a.n_layers,
        "num_attention_heads": a.n_heads, "num_key_value_heads": a.n_kv_heads,
        "intermediate_size": a.intermediate_size, "rms_norm_eps": a.norm_eps, "rope_theta": a.rope_theta,
        "rope_scaling": a.rope_scaling, "max_position_embeddings": a.max_seq_len,
        "tie_word_embeddings": a.tie_embeddings, "hidden_act": "silu", "eos_token_id": eos,
        "attention": a.attention, "shifted_logits": a.shifted_logits, "block_size": a.block_size,
        "special_tokens": dict(a.special_tokens), "_name_or_path": ck.name,
    }
    if a.attention == "bidirectional" and "mask" in a.special_tokens:
        cfg["mask_token_id"] = a.special_tokens["mask"]
    return cfg


def save_hf(ck: LoadedCheckpoint, out: str | Path, max_shard_bytes: int = 60 << 20,
            dtype: torch.dtype | None = None) -> list[Path]:
    """Write config.json, tokenizer files and ``model-XXXXX-of-YYYYY.safetensors`` shards (+ index).

    Returns the shard paths. A single tensor larger than ``max_shard_bytes`` gets a shard of its own.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    groups: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in ck.state_dict.items():
        t = (t.to(dtype) if dtype is not None else t).contiguous()
        n = t.numel() * t.element_size()
        if groups[-1] and size + n > max_shard_bytes:
            groups.append({})
            size = 0
        groups[-1][name] = t
        size += n
    paths: list[Path] = []
    weight_map: dict[str, str] = {}
    total = 0
    for i, group in enumerate(groups):
        path = out / f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        save_file(group, str(path), metadata={"format": "pt"})
        paths.append(path)
        for name, t in group.items():
            weight_map[name] = path.name
            total += t.numel() * t.element_size()
    (out / INDEX).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map},
                                        indent=1))
    (out / "config.json").write_text(json.dumps(hf_config(ck), indent=1))
    ck.tokenizer.hf.save(str(out / "tokenizer.json"))
    eos_text = ck.tokenizer.token_text(ck.tokenizer.special.eos)
    (out / "tokenizer_config.json").write_text(json.dumps({"eos_token": eos_text}))
    return paths


def main(argv: list[str] | None = None) -> int:
    from engine.loading import load_checkpoint

    p = argparse.ArgumentParser(description="convert a checkpoint (GGUF/HF/'base') to safetensors shards")
    p.add_argument("src")
    p.add_argument("out")
    p.add_argument("--max-shard-mb", type=float, default=60.0)
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default=None)
    a = p.parse_args(argv)
    ck = load_checkpoint(a.src)
    dtype = getattr(torch, a.dtype) if a.dtype else None
    limit = int(a.max_shard_mb * (1 << 20))
    for path in save_hf(ck, a.out, limit, dtype):
        size = path.stat().st_size
        note = "  (one tensor over the limit: use --dtype bfloat16 or split_file)" if size > limit else ""
        print(f"{path}  {size / 1e6:.1f} MB{note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
