"""Model specs and placement: ``tiny-random`` / ``random:<preset>`` / ``default`` / a checkpoint path,
and the ``auto`` device and dtype rules (CUDA + bf16 when there is a GPU, CPU + fp32 otherwise)."""

from __future__ import annotations

import torch

from engine.checkpoint import LoadedCheckpoint
from engine.config import preset
from engine.model import Transformer
from engine.tokenizer import Tokenizer

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
           "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device {device!r} requested but CUDA is not available")
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use auto, {', '.join(_DTYPES)}")
    return _DTYPES[dtype]


def random_checkpoint(shape: str = "tiny", seed: int = 0) -> LoadedCheckpoint:
    """Seeded random weights of a preset shape with the byte-level test tokenizer."""
    tok = Tokenizer.byte_level()
    args = preset(shape, special_tokens=tok.special.as_dict())
    if args.vocab_size < tok.vocab_size:
        raise ValueError(f"preset {shape!r}: vocab {args.vocab_size} < tokenizer {tok.vocab_size}")
    model = Transformer(args, init=False).init_random(seed)
    name = "tiny-random" if shape == "tiny" else f"random:{shape}"
    return LoadedCheckpoint(args, model.state_dict(), tok, name,
                            {"label": "random weights (tests / benchmarks)", "seed": seed})


def load_checkpoint_spec(spec: str) -> LoadedCheckpoint:
    if spec == "tiny-random":
        return random_checkpoint("tiny")
    if spec.startswith("random:"):
        return random_checkpoint(spec.split(":", 1)[1])
    module = "engine.default" if spec == "default" else "engine.loading"
    try:
        if spec == "default":
            from engine.default import load_default  # type: ignore[import-not-found]

            return load_default()
        from engine.loading import load_checkpoint  # type: ignore[import-not-found]
    except ImportError as e:
        raise RuntimeError(f"cannot load model {spec!r}: {module} is not available ({e})") from e
    return load_checkpoint(spec)
