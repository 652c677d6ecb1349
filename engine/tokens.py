"""Names of the special tokens the engine adds to a base tokenizer.

Only *names* live here. Their ids come from the model config (``special_tokens`` in
config.json / the adapter's JSON) and the tokenizer; code never hard-codes an id.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Protocol

# role -> token text
SPECIAL_TOKENS: dict[str, str] = {
    "mask": "<|mask|>",
    "fim_prefix": "<|fim_prefix|>",
    "fim_suffix": "<|fim_suffix|>",
    "fim_middle": "<|fim_middle|>",
    "eom": "<|end_of_middle|>",
    "pad": "<|dlm_pad|>",
    "edit_history": "<|edit_history|>",
    "region_start": "<|editable_region_start|>",
    "region_end": "<|editable_region_end|>",
    "cursor": "<|user_cursor|>",
    "file_sep": "<|file_sep|>",
}


@dataclass(frozen=True)
class SpecialIds:
    """Resolved ids of the special tokens of one loaded model."""

    mask: int
    fim_prefix: int
    fim_suffix: int
    fim_middle: int
    eom: int
    pad: int
    edit_history: int
    region_start: int
    region_end: int
    cursor: int
    file_sep: int
    eos: int  # the base model's own end-of-text token (also ends a canvas)

    @classmethod
    def from_mapping(cls, ids: dict[str, int], *, source: str = "config") -> SpecialIds:
        missing = [f.name for f in fields(cls) if f.name not in ids]
        if missing:
            raise ValueError(f"{source}: special_tokens is missing {', '.join(missing)}")
        return cls(**{f.name: int(ids[f.name]) for f in fields(cls)})

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def end_ids(self) -> frozenset[int]:
        """Tokens that end a canvas (variable-length output)."""
        return frozenset({self.eom, self.pad, self.eos})


class TokenizerLike(Protocol):
    """What templates need from a tokenizer (engine.tokenizer.Tokenizer satisfies it)."""

    special: SpecialIds

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...
