"""In-process diffusion language-model engine (no LSP, never imports edit_server)."""

from engine.templates import EditPrompt, FimPrompt, Section
from engine.types import AbortSignal, CanvasSpec, GenerateRequest, GenerateResult, SamplerConfig

__all__ = [
    "AbortSignal", "CanvasSpec", "EditPrompt", "Engine", "FimPrompt", "GenerateRequest",
    "GenerateResult", "SamplerConfig", "Section",
]


def __getattr__(name: str):  # lazy: importing engine.types must not import torch
    if name == "Engine":
        from engine.engine import Engine

        return Engine
    raise AttributeError(name)
