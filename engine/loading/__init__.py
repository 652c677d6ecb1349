"""Checkpoint loading: local HF-style directories (safetensors), GGUF files and hub models
(``ORG/NAME[@REVISION]``, fetched into the HF cache by `engine.loading.hub`) -> `LoadedCheckpoint`.

Never unpickles: ``.bin``/``.pt`` checkpoints are refused with a message. Everything ends in the
internal HF-Llama parameter layout (see `engine.config`) with our special tokens appended.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from engine.loading.common import CheckpointError

if TYPE_CHECKING:
    import torch

    from engine.checkpoint import LoadedCheckpoint

__all__ = ["CheckpointError", "load_checkpoint"]


def load_checkpoint(spec: str | Path, dtype: torch.dtype | None = None, *,
                    convert_cache: bool | None = None) -> LoadedCheckpoint:
    """Load ``spec``: an HF checkpoint directory, a ``.gguf`` file, or ``"base"`` (the cached
    SmolLM2-135M GGUF, fetched first if needed). ``dtype`` casts the weights (default: as stored;
    GGUF dequantizes to float32). ``convert_cache``: keep a safetensors copy of a converted GGUF next
    to it for fast later loads (default: only for GGUF files in the base cache directory)."""
    if str(spec) == "base":
        from engine.loading.base import fetch_base

        spec = fetch_base()
    path = Path(spec).expanduser()
    if path.is_dir():
        from engine.loading.hf import load_hf

        return load_hf(path, dtype=dtype)
    if path.is_file() and path.suffix.lower() == ".gguf":
        from engine.loading.base import default_cache_dir

        if convert_cache is None:
            convert_cache = path.resolve().parent == default_cache_dir().resolve()
        if convert_cache:
            from engine.loading.convert_cache import load_gguf_cached

            return load_gguf_cached(path, dtype=dtype)
        from engine.loading.gguf_file import load_gguf

        return load_gguf(path, dtype=dtype)
    if path.is_file():
        raise CheckpointError(f"{path}: not a loadable checkpoint (expected an HF checkpoint directory "
                              "with config.json + *.safetensors, or a .gguf file)")
    from engine.loading.hub import load_hub, parse_hub_spec

    hub = parse_hub_spec(str(spec))
    if hub is not None:
        return load_hub(hub, dtype=dtype)
    raise CheckpointError(f"{spec}: no such file or directory (expected an HF checkpoint directory, "
                          "a .gguf file, a hub id ORG/NAME[@REVISION] or 'base')")
