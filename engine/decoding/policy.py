"""The decoding policy an engine starts with: the default sampler per device (adaptive window + drafts on
a CPU, the trained block elsewhere), ``$EDIT_SERVER_DECODE`` over it, the int8 CPU path, and a call's
sampler filled from the engine's."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from engine import options
from engine.types import SamplerConfig

ENV = options.DECODE


def parse_decode(text: str) -> dict[str, Any]:
    """``EDIT_SERVER_DECODE`` value → SamplerConfig fields (``ar`` = window 1, no drafts)."""
    out: dict[str, Any] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part.startswith("spec="):
            out["speculate"] = int(part[5:])
        elif part == "ar":
            out.update(window=1, speculate=out.get("speculate", 0))
        elif part in ("block", "adaptive"):
            out["window"] = part
        elif part.isdigit() and int(part) > 0:
            out["window"] = int(part)
        else:
            raise ValueError(f"{ENV}={text!r}: expected block, adaptive, ar or a window size, "
                             "optionally followed by ,spec=K")
    return out


def default_sampler(device: torch.device, block_causal: bool) -> SamplerConfig:
    """The engine's default: adaptive window + drafts on a CPU, the trained block elsewhere;
    ``$EDIT_SERVER_DECODE`` overrides."""
    cpu = device.type == "cpu" and block_causal
    cfg = SamplerConfig(window="adaptive" if cpu else "block", speculate=8 if cpu else 0)
    env = options.env().decode
    return replace(cfg, **parse_decode(env)) if env else cfg


def want_fast_cpu(flag: bool | None, meta: dict[str, Any], device: torch.device, args: Any) -> bool:
    """The int8 CPU path (engine.cpu.fastcpu): ``flag``, else ``$EDIT_SERVER_FASTCPU`` (0/1), else on for
    checkpoints whose loader vouches for it (``meta["fast_cpu"]``: the default model, whose quality
    was measured with it), block-causal models on a CPU only."""
    if device.type != "cpu" or args is not None and args.attention != "block_causal":
        return False
    if flag is not None:
        return flag
    env = options.env().fast_cpu
    return env if env is not None else bool(meta.get("fast_cpu"))


def resolve(cfg: SamplerConfig | None, default: SamplerConfig) -> SamplerConfig:
    """``cfg`` with its engine-chosen fields (None) filled from ``default``."""
    if cfg is None:
        return default
    fill = {k: getattr(default, k) for k in ("window", "speculate") if getattr(cfg, k) is None}
    return replace(cfg, **fill) if fill else cfg


VARIANT_TEMPERATURE = 0.7  # sampled next-edit alternatives (`engine.api.RewriteCall.variant`)


def variant_sampler(cfg: SamplerConfig, variant: int) -> SamplerConfig:
    """``cfg`` for alternative ``variant`` of a call: itself for 0, else sampled at `VARIANT_TEMPERATURE`
    (top-p 0.95) with seed ``variant`` — reproducible, and different per variant."""
    if variant <= 0:
        return cfg
    return replace(cfg, temperature=VARIANT_TEMPERATURE, top_p=0.95, seed=variant)
