"""The shipped default model: SmolLM2-135M base + our block-diffusion LoRA adapter (`engine/weights/`).

`load_default()` fetches the base GGUF if it is not cached (`engine.loading.base.fetch_base`), loads it,
checks the adapter's special-token ids against the tokenizer, merges the adapter (LoRA, norms, new token
rows) and sets the block-diffusion args (attention, shifted logits, block size) from the adapter JSON.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from engine.checkpoint import LoadedCheckpoint

log = logging.getLogger(__name__)

WEIGHTS = Path(__file__).resolve().parent / "weights"
ADAPTER = WEIGHTS / "default"


def load_default(adapter: Path | None = None, base: Path | None = None) -> LoadedCheckpoint:
    """Base + adapter, merged. ``adapter``: path without suffix (default ``$EDIT_SERVER_ADAPTER`` or
    ``engine/weights/default``)."""
    from engine.loading import load_checkpoint
    from engine.loading.adapter import AdapterError, load_adapter, merge_adapter
    from engine.loading.base import fetch_base

    if adapter is None:
        adapter = Path(os.environ.get("EDIT_SERVER_ADAPTER") or ADAPTER)  # env: evaluate a run's adapter
    adapter = Path(adapter)
    tensors, meta = load_adapter(adapter)  # clear errors naming the file/field come from here
    ck = load_checkpoint(base if base is not None else fetch_base())
    js = adapter.with_suffix(".json")
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
            "validation": meta.get("validation", {}).get("last")}
    log.info("default model: %s + %s", ck.name, label)
    return LoadedCheckpoint(args, ck.state_dict, ck.tokenizer, "SmolLM2-135M block-diffusion", info)
