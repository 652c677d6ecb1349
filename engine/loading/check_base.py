"""Real check of the GGUF path: ``python -m engine.loading.check_base [GGUF] [--tokens N]``.

Loads the SmolLM2-135M base (fetched into the cache if needed) through `load_checkpoint`, builds a
transformers ``LlamaForCausalLM`` from our state dict, greedily continues ``def fibonacci(n):`` and
prints it; then runs `engine.model.Transformer` (causal) on the same ids and reports the logit
difference and whether both pick the same greedy tokens. Optionally (``--transformers-gguf``)
compares every tensor with transformers' own GGUF loader. Needs transformers (a test dependency).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch

from engine.config import ModelArgs

PROMPT = "def fibonacci(n):"


def llama_config(args: ModelArgs) -> Any:
    """A transformers ``LlamaConfig`` (or ``Qwen2Config`` with QKV bias) equivalent to ``args``."""
    from transformers import LlamaConfig, Qwen2Config

    common = dict(vocab_size=args.vocab_size, hidden_size=args.dim, num_hidden_layers=args.n_layers,
                  num_attention_heads=args.n_heads, num_key_value_heads=args.n_kv_heads,
                  intermediate_size=args.intermediate_size, rms_norm_eps=args.norm_eps,
                  max_position_embeddings=args.max_seq_len, tie_word_embeddings=args.tie_embeddings,
                  rope_parameters={"rope_type": "default", "rope_theta": args.rope_theta,
                                   **(args.rope_scaling or {})})
    if args.qkv_bias:
        return Qwen2Config(**common)
    return LlamaConfig(**common, attention_bias=False)


def hf_model(args: ModelArgs, state: dict[str, torch.Tensor]) -> Any:
    """A transformers causal LM holding exactly ``state`` (strict load)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(llama_config(args), dtype=torch.float32)
    sd = dict(state)
    if args.tie_embeddings:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    model.load_state_dict(sd, strict=True)
    return model.eval()


def _greedy(model: Any, ids: list[int], n: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False,
                             attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    return out[0, len(ids):].tolist()


def _engine_logits(args: ModelArgs, state: dict[str, torch.Tensor], ids: list[int]) -> torch.Tensor | None:
    try:
        from engine.model import Transformer
    except ImportError:
        return None
    model = Transformer(args)
    model.load_state_dict(state, strict=True)
    with torch.no_grad():
        return model.eval()(torch.tensor([ids]), is_causal=True)[0].float()


def _vs_transformers_gguf(path: str, model: Any, state: dict[str, torch.Tensor]) -> float:
    """Max |ours - transformers' GGUF reader| over all tensors (base vocab rows only)."""
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    ref = load_gguf_checkpoint(path, return_tensors=True, model_to_load=model)["tensors"]
    worst = 0.0
    for k, v in ref.items():
        ours = state[k][: v.shape[0]]
        worst = max(worst, (ours - v.float()).abs().max().item())
    return worst


def main(argv: list[str] | None = None) -> int:
    from engine.loading import load_checkpoint
    from engine.loading.base import fetch_base

    p = argparse.ArgumentParser(description="load the base GGUF and generate from it")
    p.add_argument("gguf", nargs="?", default=None, help="GGUF path (default: the cached base)")
    p.add_argument("--tokens", type=int, default=40)
    p.add_argument("--transformers-gguf", action="store_true",
                   help="also compare tensors with transformers' own GGUF loader")
    a = p.parse_args(argv)
    torch.manual_seed(0)
    path = a.gguf or str(fetch_base())
    t0 = time.perf_counter()
    ck = load_checkpoint(path)
    print(f"loaded {ck.name} in {time.perf_counter() - t0:.1f} s: vocab {ck.args.vocab_size}, "
          f"{sum(v.numel() for v in ck.state_dict.values()) / 1e6:.1f} M params")
    ids = ck.tokenizer.encode(PROMPT)
    model = hf_model(ck.args, ck.state_dict)
    t0 = time.perf_counter()
    new = _greedy(model, ids, a.tokens)
    print(f"transformers greedy ({time.perf_counter() - t0:.1f} s):\n{PROMPT}{ck.tokenizer.decode(new)}\n")
    with torch.no_grad():
        ref = model(torch.tensor([ids + new])).logits[0].float()
    ours = _engine_logits(ck.args, ck.state_dict, ids + new)
    if ours is not None:
        diff = (ours - ref).abs().max().item()
        agree = (ours.argmax(-1) == ref.argmax(-1)).float().mean().item()
        print(f"engine.model vs transformers: max |logit diff| {diff:.2e}, argmax agreement {agree:.3f}")
    if a.transformers_gguf:
        print(f"state dict vs transformers' GGUF loader: max |diff| {_vs_transformers_gguf(path, model, ck.state_dict):.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
