"""Load a GGUF file (llama / qwen2 architectures) into the internal HF-Llama layout.

Tensors are dequantized with ``gguf.quants.dequantize`` (F32, F16, BF16, Q4_0/1, Q5_0/1, Q8_0, K-quants,
...). GGUF stores shapes innermost-first (``ne0`` = row length), so the numpy shape is the reverse of
``ReaderTensor.shape``. llama.cpp's converter permutes the rows of Q and K for its RoPE layout on the
``llama`` architecture; `unpermute_qk` undoes that so the weights match Hugging Face's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine.checkpoint import LoadedCheckpoint
from engine.config import ModelArgs
from engine.loading import base
from engine.loading.common import CheckpointError, finish, make_tokenizer, tensor_renamer
from engine.loading.gguf_tokenizer import CONTROL, UNUSED, build_bpe
from engine.tokens import SPECIAL_TOKENS

ARCHITECTURES = ("llama", "qwen2")  # qwen2: no Q/K permutation, QKV biases
_LAYER = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)$")
_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
}
_GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                 "output.weight": "lm_head.weight"}


def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp ``convert_hf_to_gguf`` permutation (HF -> GGUF) of Q/K rows (weights or biases)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of `permute_qk` (GGUF -> HF)."""
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


internal_name = tensor_renamer(_GLOBAL_NAMES, _LAYER, _LAYER_NAMES)  # GGUF tensor name -> ours (None: unknown)


def dequantize(tensor: Any) -> np.ndarray:
    """A `gguf.ReaderTensor` -> float32 array in numpy (row-major, HF) shape."""
    from gguf import quants

    shape = tuple(int(d) for d in reversed(tensor.shape.tolist()))
    try:
        arr = quants.dequantize(tensor.data, tensor.tensor_type)
    except NotImplementedError as e:
        raise CheckpointError(f"tensor {tensor.name!r}: {e}") from None
    arr = np.asarray(arr, dtype=np.float32).reshape(shape)
    return arr if arr.flags.writeable else arr.copy()  # F32 tensors are read-only views of the mmap


def _field(reader: Any, key: str, path: Path, default: Any = ...) -> Any:
    f = reader.fields.get(key)
    if f is None:
        if default is ...:
            raise CheckpointError(f"{path.name}: missing metadata field {key!r}")
        return default
    return f.contents()


def gguf_args(reader: Any, path: Path) -> ModelArgs:
    arch = _field(reader, "general.architecture", path)
    if arch not in ARCHITECTURES:
        raise CheckpointError(f"{path.name}: unsupported GGUF architecture {arch!r}; "
                              f"supported: {', '.join(ARCHITECTURES)}")
    names = {t.name for t in reader.tensors}
    if "token_embd.weight" not in names:
        raise CheckpointError(f"{path.name}: missing tensor 'token_embd.weight'")
    if "rope_freqs.weight" in names:
        raise CheckpointError(f"{path.name}: 'rope_freqs.weight' (llama3 RoPE factors) is not supported")
    emb = next(t for t in reader.tensors if t.name == "token_embd.weight")
    heads = int(_field(reader, f"{arch}.attention.head_count", path))
    args = ModelArgs(
        vocab_size=int(emb.shape[1]),
        dim=int(_field(reader, f"{arch}.embedding_length", path)),
        n_layers=int(_field(reader, f"{arch}.block_count", path)),
        n_heads=heads,
        n_kv_heads=int(_field(reader, f"{arch}.attention.head_count_kv", path, heads)),
        intermediate_size=int(_field(reader, f"{arch}.feed_forward_length", path)),
        norm_eps=float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon", path, 1e-5)),
        rope_theta=float(_field(reader, f"{arch}.rope.freq_base", path, 10000.0)),
        max_seq_len=int(_field(reader, f"{arch}.context_length", path, 8192)),
        qkv_bias="blk.0.attn_q.bias" in names,
        tie_embeddings="output.weight" not in names,
    )
    rot = _field(reader, f"{arch}.rope.dimension_count", path, args.head_dim)
    if int(rot) != args.head_dim:
        raise CheckpointError(f"{path.name}: partial RoPE ({arch}.rope.dimension_count={rot}, "
                              f"head_dim={args.head_dim}) is not supported")
    scaling = _field(reader, f"{arch}.rope.scaling.type", path, None)
    if scaling not in (None, "none"):
        if scaling != "linear":
            raise CheckpointError(f"{path.name}: rope scaling {scaling!r} is not supported (linear only)")
        args.rope_scaling = {"rope_type": "linear",
                             "factor": float(_field(reader, f"{arch}.rope.scaling.factor", path))}
    return args


def unused_slots(tokens: list[str], types: list[int] | None) -> tuple[list[str], list[int] | None, dict[str, int]]:
    """Our special tokens the vocabulary lacks, placed in its *unused* slots (llama.cpp token type 5:
    Qwen2's ``[PAD151665]`` … rows after its own specials) instead of appended rows: the embedding and
    the untied output keep their shape, so the base's logits over its real tokens stay exactly the file's.
    Returns the new token texts / types and {text: id} of what was placed (nothing if slots are too few)."""
    if types is None:
        return tokens, types, {}
    have = set(tokens)
    missing = [t for t in SPECIAL_TOKENS.values() if t not in have]
    free = [i for i, t in enumerate(types) if t == UNUSED]
    if not missing or len(free) < len(missing):
        return tokens, types, {}
    tokens, types = list(tokens), list(types)
    placed = {}
    for text, i in zip(missing, free, strict=False):
        tokens[i], types[i], placed[text] = text, CONTROL, i
    return tokens, types, placed


def gguf_tokenizer(reader: Any, path: Path, mask_id: int | None = None, *, reuse_unused: bool = False,
                   placed: dict[str, int] | None = None) -> Any:
    """``reuse_unused``: our special tokens go into unused vocabulary slots (`unused_slots`), not new rows;
    ``placed`` (filled): which token went where."""
    model = _field(reader, "tokenizer.ggml.model", path)
    if model != "gpt2":
        raise CheckpointError(f"{path.name}: tokenizer.ggml.model {model!r} is not supported (gpt2 BPE only)")
    tokens = _field(reader, "tokenizer.ggml.tokens", path)
    types = _field(reader, "tokenizer.ggml.token_type", path, None)
    if reuse_unused:
        tokens, types, where = unused_slots(tokens, types)
        if placed is not None:
            placed.update(where)
    hf = build_bpe(tokens, _field(reader, "tokenizer.ggml.merges", path), types,
                   _field(reader, "tokenizer.ggml.pre", path, None))
    eos = int(_field(reader, "tokenizer.ggml.eos_token_id", path))
    if not 0 <= eos < len(tokens):
        raise CheckpointError(f"{path.name}: tokenizer.ggml.eos_token_id {eos} out of range")
    return make_tokenizer(hf, eos_token=tokens[eos], source=path.name, mask_id=mask_id)


def load_gguf(path: str | Path, dtype: torch.dtype | None = None) -> LoadedCheckpoint:
    from gguf import GGUFReader

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: GGUF file not found")
    try:
        reader = GGUFReader(str(path))
    except Exception as e:  # bad magic, truncated file, ...
        raise CheckpointError(f"{path.name}: not a readable GGUF file ({e})") from None
    args = gguf_args(reader, path)
    arch = _field(reader, "general.architecture", path)
    placed: dict[str, int] = {}
    tokenizer = gguf_tokenizer(reader, path, reuse_unused=arch == "qwen2", placed=placed)
    permute = arch == "llama"
    state: dict[str, torch.Tensor] = {}
    names: dict[str, str] = {}
    for t in reader.tensors:
        key = internal_name(t.name)
        if key is None:
            raise CheckpointError(f"{path.name}: unexpected tensor {t.name!r} (unsupported layout)")
        arr = dequantize(t)
        if permute and key.endswith(("q_proj.weight", "q_proj.bias")):
            arr = unpermute_qk(arr, args.n_heads)
        elif permute and key.endswith(("k_proj.weight", "k_proj.bias")):
            arr = unpermute_qk(arr, args.n_kv_heads)
        tensor = torch.from_numpy(np.ascontiguousarray(arr))
        state[key] = tensor.to(dtype) if dtype is not None else tensor
        names[key] = t.name
    finish(args, state, tokenizer, path.name, names)
    name = _field(reader, "general.name", path, path.stem)
    meta = {"source": str(path), "format": "gguf",
            "architecture": _field(reader, "general.architecture", path),
            "file_type": _field(reader, "general.file_type", path, None)}
    if placed:  # rows of the file that now hold our tokens (untrained: a trainer initialises them)
        meta["new_special_ids"] = sorted(placed.values())
    template = _field(reader, "tokenizer.chat_template", path, None)
    if template:  # instruct models: their own chat template (engine.formats.chat)
        meta["chat_template"] = str(template)
    bos = _field(reader, "tokenizer.ggml.bos_token_id", path, None)
    if bos is not None and 0 <= int(bos) < tokenizer.vocab_size:
        meta["bos_token"] = tokenizer.token_text(int(bos))
    if path.name == base.GGUF_NAME and base.sha256_file(path) == base.GGUF_SHA256:
        meta["base"] = base.base_info()  # the pinned default base (provenance for adapters)
    for b in base.PARTED.values():  # a pinned parted base (Qwen2.5-Coder): the same provenance
        if path.name == b.file and path.stat().st_size == b.size and base.sha256_file(path) == b.sha256:
            meta["base"] = {"package": f"{b.stem}1..{b.n_parts}=={b.version}", "file": b.file, "sha256": b.sha256}
    if "base" not in meta and args.tie_embeddings:  # a pinned base with its output tensor dropped
        from engine.loading.tied import DROPPED, FROM_SHA256, derived_provenance

        got = derived_provenance({k: _field(reader, k, path, None) for k in (FROM_SHA256, DROPPED)})
        if got is not None:
            meta["base"], meta["tied_output"] = got, True
    return LoadedCheckpoint(args=args, state_dict=state, tokenizer=tokenizer, name=str(name), meta=meta)
