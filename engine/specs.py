"""Model specs and placement, and the ``auto`` device and dtype rules (CUDA + bf16 when there is a
GPU, CPU + fp32 otherwise).

Specs: ``tiny-random``; ``random:<preset>`` (engine.config presets); ``random:<CONFIG>`` — random
weights at a real model's shape, CONFIG being a ``config.json`` (or a directory holding one) or a
registry name (`engine.registry`), for latency at real size without the weights; ``default`` (the tier
`engine.tiers` picks for this device from the recorded measurements); ``smollm2-bd3`` (the embedded model:
SmolLM2-135M + the shipped block-diffusion adapter); ``qwen2.5-coder-0.5b-bd3`` (Qwen2.5-Coder-0.5B + our
block-diffusion adapter, `engine.tiers.SHIPPED`); ``qwen2.5-coder-0.5b`` / ``-1.5b`` (autoregressive bases from the package registry,
`engine.loading.ar_base`); ``ORG/NAME[@REVISION]`` (a Hugging Face Hub model, `engine.loading.hub`); an HF
checkpoint directory or a ``.gguf`` file.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from engine.checkpoint import LoadedCheckpoint
from engine.config import PRESETS, ModelArgs, preset
from engine.model import Transformer
from engine.tokenizer import Tokenizer

log = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
           "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
BIG_RANDOM_PARAMS = 300_000_000  # above this, random weights are made on the auto device in its dtype


class UnknownShape(KeyError, ValueError):
    """``random:<shape>`` names no preset, config.json or registry shape."""


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


def _random_args(shape: str, tok: Tokenizer) -> tuple[ModelArgs, str]:
    """ModelArgs for ``random:<shape>``: a preset, a config.json (file or directory) or a registry name."""
    special = tok.special.as_dict()
    if shape in PRESETS:
        return preset(shape, special_tokens=special), shape
    path = Path(shape).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        from engine.loading.archs import args_from_config

        args, arch = args_from_config(path)
        args.vocab_size = max(args.vocab_size, tok.vocab_size)
        args.special_tokens = special
        return args, f"{arch} shape from {path}"
    from engine.registry import lookup

    entry = lookup(shape)
    if entry is None or entry.shape is None:
        known = ", ".join(PRESETS)
        raise UnknownShape(f"random:{shape}: not a preset ({known}), a config.json or a registry model "
                         "with a recorded shape; pass random:/path/to/config.json")
    from engine.loading.archs import args_from_dict

    args, arch = args_from_dict(dict(entry.shape, architectures=[entry.architecture]))
    args.attention, args.shifted_logits = entry.attention, entry.shifted_logits  # the registry's regime
    args.block_size, args.block_align = entry.block_size, entry.block_align
    args.vocab_size = max(args.vocab_size, tok.vocab_size)
    args.special_tokens = special
    return args, f"{entry.name} shape ({arch})"


def random_checkpoint(shape: str = "tiny", seed: int = 0) -> LoadedCheckpoint:
    """Seeded random weights of a preset / real model's shape with the byte-level test tokenizer.

    Large shapes (> 300 M parameters) are initialised directly on the ``auto`` device in its dtype
    (a 7B model in fp32 on the CPU would need 28 GB and minutes); `Engine.from_checkpoint` moves
    them if another device or dtype is asked for."""
    tok = Tokenizer.byte_level()
    args, label = _random_args(shape, tok)
    if args.vocab_size < tok.vocab_size:
        raise ValueError(f"preset {shape!r}: vocab {args.vocab_size} < tokenizer {tok.vocab_size}")
    big = args.param_count() > BIG_RANDOM_PARAMS
    dev = resolve_device("auto") if big else torch.device("cpu")
    with torch.device(dev):
        model = Transformer(args, init=False)
    model = model.to(resolve_dtype("auto", dev) if big else torch.float32).init_random(seed)
    name = "tiny-random" if shape == "tiny" else f"random:{shape}"
    return LoadedCheckpoint(args, model.state_dict(), tok, name,
                            {"label": f"random weights (tests / benchmarks), {label}", "seed": seed})


def load_checkpoint_spec(spec: str, progress: object = None) -> LoadedCheckpoint:
    """``progress(done_bytes, total_bytes, message)`` is called while a hub model downloads."""
    if spec == "tiny-random":
        return random_checkpoint("tiny")
    if spec.startswith("random:"):
        return random_checkpoint(spec.split(":", 1)[1])
    from engine.tiers import resolve_spec, shipped_adapter

    spec = resolve_spec(spec, resolve_device("auto").type)
    adapter = shipped_adapter(spec)
    if adapter is not None:
        try:
            from engine.default import load_default  # type: ignore[import-not-found]
        except ImportError as e:
            raise RuntimeError(f"cannot load model {spec!r}: engine.default is not available ({e})") from e
        return load_default(adapter)
    try:
        from engine.loading import load_checkpoint  # type: ignore[import-not-found]
        from engine.loading.ar_base import is_ar_base, load_ar_base
        from engine.loading.hub import load_hub, parse_hub_spec
    except ImportError as e:
        raise RuntimeError(f"cannot load model {spec!r}: engine.loading is not available ({e})") from e
    if is_ar_base(spec):
        return load_ar_base(spec)
    hub = parse_hub_spec(spec)
    if hub is not None:
        return load_hub(hub, progress=progress)  # type: ignore[arg-type]
    return load_checkpoint(spec)
