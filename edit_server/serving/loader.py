"""Which engine serves: the one loader the worker thread calls (`load_engine`).

A hub id (``ORG/NAME[@REV]``) downloads with progress; anything else loads as ``Engine.load`` does (the CPU
fast path for the default model). With a KTO-aligned adapter (`edit_server.selectivity.kto_gate`: the current
local version, or a path) the engine is stacked with it and a reward scorer comes back beside it; an adapter
that does not fit is logged and the confidence gate serves. ``$EDIT_SERVER_ENGINE_FACTORY``
(``module:callable(spec, device)``) replaces all of it, for tests and embedding.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from edit_server.core.messages import ProgressFn
from edit_server.selectivity import kto_gate
from engine import options
from engine.api import EngineAPI

if TYPE_CHECKING:
    from engine.engine import Engine
    from engine.reward import RewardScorer

log = logging.getLogger(__name__)
FACTORY_ENV = options.ENGINE_FACTORY  # "module:callable(spec, device)", for tests and embedding


def load_engine(spec: str, device: str, progress: ProgressFn | None = None, kto: str | Path | None = "off"
                ) -> tuple[EngineAPI, RewardScorer | None]:
    """(engine, reward scorer or None). A hub id downloads with ``progress``; otherwise the engine
    loads as ``Engine.load`` does (the CPU fast path for the default model), with the KTO-aligned
    adapter stacked on it when ``kto`` names one ("" = the current local version)."""
    factory = options.env().engine_factory
    if factory:
        mod, _, fn = factory.partition(":")
        return getattr(importlib.import_module(mod), fn)(spec, device), None
    from engine import Engine
    from engine.loading.hub import parse_hub_spec

    if parse_hub_spec(spec) is not None:
        from engine.specs import load_checkpoint_spec

        eng = Engine.from_checkpoint(load_checkpoint_spec(spec, progress=progress), device=device)
        return aligned_engine(eng, kto)
    # with an adapter the engine keeps plain fp32 linear layers (``fast_cpu=False``: the int8 CPU layout fuses
    # them, a stacked LoRA cannot wrap it); without one it loads exactly as before
    path = kto_gate.adapter_path(kto)
    if path is None or not Path(f"{path}.safetensors").is_file():
        return Engine.load(spec, device=device), None
    return aligned_engine(Engine.load(spec, device=device, fast_cpu=False), path)


def aligned_engine(eng: Engine, adapter: str | Path | None = "") -> tuple[EngineAPI, RewardScorer | None]:
    """(engine, reward scorer): ``eng`` with the aligned adapter stacked on it, and its
    `engine.reward.RewardScorer`; ``(eng, None)`` when there is no adapter (``adapter`` "" = the
    current local version, None / "off" = none) or it does not fit the model (logged)."""
    path = kto_gate.adapter_path(adapter)
    if path is None:
        return eng, None
    try:
        from engine.loading.stacked import AlignedEngine
        from engine.reward import RewardScorer

        aligned = AlignedEngine.from_engine(eng, path)
        return aligned, RewardScorer(aligned)
    except Exception:  # a broken or mismatched adapter must not take serving down
        log.warning("aligned adapter %s not used; confidence gate", path, exc_info=True)
        return eng, None
