"""Shared last steps of every loader: special tokens, embedding extension, shape validation."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

import torch
from tokenizers import Tokenizer as HFTokenizer

from engine.config import ModelArgs
from engine.tokenizer import Tokenizer
from engine.tokens import SpecialIds

log = logging.getLogger(__name__)

EMBED = "model.embed_tokens.weight"
LM_HEAD = "lm_head.weight"
NEW_ROW_SEED = 0
NEW_ROW_NOISE = 0.02  # x std of the existing rows


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded; the message names the file and field/tensor."""


def tensor_renamer(whole: dict[str, str], layer: re.Pattern[str], parts: dict[str, str]
                   ) -> Callable[[str], str | None]:
    """A checkpoint's tensor name -> ours, or None when unknown: ``whole`` maps entire names (embedding,
    final norm, head); ``layer`` matches (layer index, part, weight|bias) and ``parts`` maps the part, giving
    ``model.layers.N.<ours>.weight|bias``."""

    def rename(name: str) -> str | None:
        if name in whole:
            return whole[name]
        m = layer.match(name)
        if m and m.group(2) in parts:
            return f"model.layers.{m.group(1)}.{parts[m.group(2)]}.{m.group(3)}"
        return None

    return rename


def make_tokenizer(hf: HFTokenizer, *, eos_token: str, source: str, mask_id: int | None = None,
                   config_ids: dict[str, int] | None = None) -> Tokenizer:
    """Append our special tokens to ``hf`` and resolve every role.

    ``mask_id`` (Dream/LLaDA ``mask_token_id`` from the config) overrides the mask role: those models
    were trained with their own mask token. ``config_ids`` (a config's ``special_tokens``) must agree
    with the result, else the checkpoint and tokenizer disagree and we refuse.
    """
    try:
        tok = Tokenizer.with_special_tokens(hf, eos_token=eos_token)
    except ValueError as e:
        raise CheckpointError(f"{source}: {e}") from None
    ids = tok.special.as_dict()
    if mask_id is not None:
        if not 0 <= int(mask_id) < tok.vocab_size:
            raise CheckpointError(f"{source}: mask_token_id {mask_id} is outside the tokenizer's "
                                  f"vocabulary ({tok.vocab_size})")
        ids["mask"] = int(mask_id)
    if config_ids:
        bad = {k: (int(v), ids.get(k)) for k, v in config_ids.items() if ids.get(k) != int(v)}
        if bad:
            raise CheckpointError(f"{source}: special_tokens (config, tokenizer) disagree: {bad}")
    return Tokenizer(hf, SpecialIds.from_mapping(ids, source=source))


def _new_rows(weight: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    """``n`` rows = mean of the existing rows + small seeded noise (scaled by their std)."""
    w = weight.float()
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn(n, w.shape[1], generator=gen) * (w.std() * NEW_ROW_NOISE)
    return (w.mean(dim=0, keepdim=True) + noise).to(weight.dtype)


def extend_vocab(args: ModelArgs, state: dict[str, torch.Tensor], vocab: int) -> int:
    """Grow the embedding (and an untied lm_head) to ``vocab`` rows; returns rows added."""
    rows = state[EMBED].shape[0]
    n = vocab - rows
    if n <= 0:
        return 0
    state[EMBED] = torch.cat([state[EMBED], _new_rows(state[EMBED], n, NEW_ROW_SEED)])
    if not args.tie_embeddings:
        state[LM_HEAD] = torch.cat([state[LM_HEAD], _new_rows(state[LM_HEAD], n, NEW_ROW_SEED + 1)])
    args.vocab_size = vocab
    log.info("extended the vocabulary from %d to %d rows for the special tokens", rows, vocab)
    return n


def _mlp(p: str, d: int, f: int) -> dict[str, tuple[int, ...]]:
    return {p + "gate_proj.weight": (f, d), p + "up_proj.weight": (f, d), p + "down_proj.weight": (d, f)}


def expected_shapes(args: ModelArgs) -> dict[str, tuple[int, ...]]:
    """Every parameter (and persistent buffer) of the internal (HF Llama) layout with its shape."""
    hd = args.head_dim
    q, kv, d, f = args.n_heads * hd, args.n_kv_heads * hd, args.dim, args.intermediate_size
    out: dict[str, tuple[int, ...]] = {EMBED: (args.vocab_size, d), "model.norm.weight": (d,)}
    if not args.tie_embeddings:
        out[LM_HEAD] = (args.vocab_size, d)
    for i in range(args.n_layers):
        p = f"model.layers.{i}."
        out |= {p + "self_attn.q_proj.weight": (q, d), p + "self_attn.k_proj.weight": (kv, d),
                p + "self_attn.v_proj.weight": (kv, d), p + "self_attn.o_proj.weight": (d, q),
                p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,)}
        if args.qkv_bias:
            out |= {p + "self_attn.q_proj.bias": (q,), p + "self_attn.k_proj.bias": (kv,),
                    p + "self_attn.v_proj.bias": (kv,)}
        if args.o_bias:
            out[p + "self_attn.o_proj.bias"] = (d,)
        if args.qk_norm:
            out |= {p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,)}
        if not args.is_moe_layer(i):
            out |= _mlp(p + "mlp.", d, f)
            continue
        out[p + "mlp.gate.weight"] = (args.n_experts, d)
        for e in range(args.n_experts):
            out |= _mlp(f"{p}mlp.experts.{e}.", d, args.moe_intermediate_size)
        if args.shared_expert_size:
            out |= _mlp(p + "mlp.shared_expert.", d, args.shared_expert_size)
        if args.moe_expert_bias:
            out[p + "mlp.expert_bias"] = (args.n_experts,)
    return out


def validate(args: ModelArgs, state: dict[str, torch.Tensor], source: str,
             names: dict[str, str] | None = None) -> None:
    """Missing, unexpected or wrongly shaped tensors -> `CheckpointError` naming them.

    ``names`` maps internal names back to the checkpoint's own (GGUF, LLaDA) for messages.
    """
    names = names or {}
    want = expected_shapes(args)
    missing = [k for k in want if k not in state]
    if missing:
        shown = ", ".join(repr(names.get(k, k)) for k in missing[:5])
        raise CheckpointError(f"{source}: missing tensor(s) {shown}"
                              + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""))
    extra = [k for k in state if k not in want]
    if extra:
        shown = ", ".join(repr(names.get(k, k)) for k in extra[:5])
        raise CheckpointError(f"{source}: unexpected tensor(s) {shown} (unsupported layout)")
    for k, shape in want.items():
        got = tuple(state[k].shape)
        if got != shape:
            raise CheckpointError(f"{source}: tensor {names.get(k, k)!r} has shape {list(got)}, "
                                  f"expected {list(shape)} from the config")


def finish(args: ModelArgs, state: dict[str, torch.Tensor], tokenizer: Tokenizer, source: str,
           names: dict[str, str] | None = None) -> None:
    """Validate against the checkpoint's own vocab, extend it for our tokens, fill special_tokens."""
    if args.tie_embeddings:
        state.pop(LM_HEAD, None)
    validate(args, state, source, names)
    extend_vocab(args, state, tokenizer.vocab_size)
    args.special_tokens = tokenizer.special.as_dict()
