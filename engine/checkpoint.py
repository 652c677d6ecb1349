"""What every loader returns: args + HF-layout state dict + tokenizer + provenance."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from engine.config import ModelArgs
from engine.tokenizer import Tokenizer


@dataclass
class LoadedCheckpoint:
    args: ModelArgs
    state_dict: dict[str, torch.Tensor]  # HF Llama parameter names (see engine.config)
    tokenizer: Tokenizer
    name: str  # human-readable model name (shown by `edit-server check`)
    meta: dict[str, Any] = field(default_factory=dict)  # source paths, sha256, adapter label, ...
