"""The shipped default model: SmolLM2-135M base + our block-diffusion LoRA adapter (`engine/weights/`).

`load_default()` fetches the base GGUF if it is not cached (`engine.loading.base.fetch_base`), loads it,
checks the adapter's special-token ids against the tokenizer, merges the adapter (LoRA, norms, new token
rows) and sets the block-diffusion args (attention, shifted logits, block size) from the adapter JSON.

``fast_cpu=True`` (what `Engine.load("default")` asks for on a CPU) returns the model already in the
int8 layout of `engine.cpu.fastcpu`, from the merged-model cache (`engine.caches.merged`) when it holds
this adapter + base, else built and saved there for the next start.
"""

from __future__ import annotations

import logging
from pathlib import Path

from engine import options
from engine.checkpoint import LoadedCheckpoint

log = logging.getLogger(__name__)

WEIGHTS = Path(__file__).resolve().parent / "weights"
ADAPTER = WEIGHTS / "default"


def load_default(adapter: Path | None = None, base: Path | None = None, *,
                 fast_cpu: bool = False) -> LoadedCheckpoint:
    """Base + adapter, merged. ``adapter``: path without suffix (default ``$EDIT_SERVER_ADAPTER`` or
    ``engine/weights/default``). ``fast_cpu``: in the `engine.cpu.fastcpu` int8 layout, cached."""
    if adapter is None:
        adapter = Path(options.env().adapter or ADAPTER)  # env: evaluate a run's adapter
    adapter = Path(adapter)
    if not fast_cpu:
        return _merged(adapter, base)
    from engine.caches import merged as merged_cache
    from engine.cpu import fastcpu

    def sources() -> list[Path]:
        return [adapter.with_suffix(".safetensors"), adapter.with_suffix(".json"),
                Path(base) if base is not None else base_path(adapter, fetch=False)]

    srcs = sources()  # reads the adapter JSON; the key hashes the adapter's content: once per start
    if all(p.is_file() for p in srcs):
        hit = merged_cache.load(adapter.name, merged_cache.key(srcs, fastcpu.FORMAT))
        if hit is not None:
            log.info("default model from the merged-model cache: %s", hit.meta.get("merged_cache"))
            return hit
    ck = to_fast(_merged(adapter, base))
    k = merged_cache.key(sources(), fastcpu.FORMAT)  # again: the build may have fetched the base
    if merged_cache.save(adapter.name, k, ck) is not None:
        hit = merged_cache.load(adapter.name, k)  # what every later start loads (memory-mapped)
        if hit is not None:
            del ck  # the build's tensors (the fp32 merge went before): give their pages back
            release_memory()
            return hit
    return ck


def release_memory() -> None:
    """Return freed heap pages to the OS (glibc keeps them otherwise: after building the merged-model cache
    the server's RSS stayed at 1.41 GB instead of ~0.9 GB). A no-op where there is no glibc."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect()
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def to_fast(ck: LoadedCheckpoint) -> LoadedCheckpoint:
    """``ck`` in the `engine.cpu.fastcpu` int8 layout (``meta["layout"]`` says so). Consumes ``ck``: its state
    dict is emptied, so each layer's float weights are freed as that layer is converted (the first start's
    peak: one copy of the float model, not float + int8)."""
    import torch

    from engine.cpu import fastcpu
    from engine.model import Transformer

    with torch.device("meta"):
        model = Transformer(ck.args, init=False)
    model.load_state_dict(ck.state_dict, strict=True, assign=True)
    ck.state_dict.clear()
    fastcpu.convert(model.float())
    return LoadedCheckpoint(ck.args, model.state_dict(), ck.tokenizer, ck.name,
                            {**ck.meta, "layout": fastcpu.FORMAT})


def base_path(adapter: Path, *, fetch: bool = True) -> Path:
    """The base GGUF an adapter was trained on (its JSON's ``base.file``): SmolLM2's, or a parted base's
    (Qwen2.5-Coder: the pinned file, or on a GPU machine its tied-output copy; `engine.loading.tied`).
    ``fetch=False``: where it is or would be, without fetching (a cache key)."""
    import json

    from engine.loading.base import GGUF_NAME, default_cache_dir, fetch_base
    from engine.loading.tied import base_file, spec_for, tied_name

    try:
        meta = json.loads(Path(adapter).with_suffix(".json").read_text())
    except (OSError, ValueError):
        meta = {}
    spec = spec_for(meta)
    if spec is None:
        return fetch_base() if fetch else default_cache_dir() / GGUF_NAME
    tied = bool(meta.get("tied_output"))
    if fetch:
        return base_file(spec, tied=tied)
    full = default_cache_dir() / spec.file
    return full if full.is_file() or not tied else default_cache_dir() / tied_name(spec)


def _merged(adapter: Path, base: Path | None) -> LoadedCheckpoint:
    from engine.loading import load_checkpoint
    from engine.loading.adapter import AdapterError, load_adapter, merge_adapter

    tensors, meta = load_adapter(adapter)  # clear errors naming the file/field come from here
    ck = load_checkpoint(base if base is not None else base_path(adapter))
    js = adapter.with_suffix(".json")
    tied = meta.get("tied_output")
    if tied and not ck.args.tie_embeddings:  # trained on the embedding as output: serve it so
        from engine.loading.tied import tie_output

        tie_output(ck)
    elif tied is False and ck.args.tie_embeddings and "added_tokens.lm_head" in tensors:
        raise AdapterError(f"{js}: tied_output is false (trained with a separate output), but the base "
                           f"{ck.meta.get('source', ck.name)} has none")
    ids = ck.tokenizer.special.as_dict()
    want = {k: int(v) for k, v in meta["special_tokens"].items()}
    if want != ids:
        bad = {k: (v, ids.get(k)) for k, v in want.items() if ids.get(k) != v}
        raise AdapterError(f"{js}: special_tokens disagree with the base tokenizer (adapter, base): {bad}")
    merge_adapter(ck.state_dict, tensors, meta, source=str(adapter.with_suffix(".safetensors")))
    args = ck.args
    for key, value in meta.get("model_args", {}).items():
        if not hasattr(args, key):
            raise AdapterError(f"{js}: model_args.{key} is not a model argument")
        setattr(args, key, value)
    args.special_tokens = ids
    label = meta.get("label", "adapter")
    info = {**ck.meta, "label": label, "adapter": str(adapter), "trained_on": meta.get("trained_on"),
            "validation": meta.get("validation", {}).get("last"), "fim_layout": meta.get("fim_layout"),
            "edit_layout": meta.get("edit_layout"), "edit_history": meta.get("edit_history"),
            "show_thresholds": meta.get("show_thresholds"),
            "fast_cpu": True}  # pass@1 measured with engine.cpu.fastcpu (docs/QUALITY.md): use it on a CPU
    log.info("default model: %s + %s", ck.name, label)
    from engine.loading.tied import spec_for

    spec = spec_for(meta)
    name = "SmolLM2-135M" if spec is None else spec.file.removesuffix(".gguf")
    return LoadedCheckpoint(args, ck.state_dict, ck.tokenizer, f"{name} block-diffusion", info)
