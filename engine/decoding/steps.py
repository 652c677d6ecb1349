"""The typed interface between the `Engine` and its decoding strategies.

The strategies (block-causal `engine.decoding.blocks`, bidirectional `engine.decoding.bidir`, window decoding
`engine.decoding.window.WindowDecoder`) and the call renderer (`engine.calls`) see the engine only as a
`StepRunner`: the model and where it runs, the prefix cache, and a few calls — take a prefix-cache slot,
run one denoising step for several jobs (``step``: one LM-head matmul, the denoisers' step, the step
events), the canvas text. Each request is a `DecodeJob`. An engine variant changes how the prompt is
prefilled by plugging in a `PrefillHook` (the aligned-reward engine, `engine.loading.stacked`), not by
overriding the engine's methods."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from torch import Tensor

from engine.types import AbortSignal, SamplerConfig, StepCallback

if TYPE_CHECKING:
    import torch

    from engine.caches.prefix import KVCache, PrefixCache, Slot
    from engine.config import ModelArgs
    from engine.decoding.expand import ExpandCanvas
    from engine.decoding.graphs import StepGraphs
    from engine.decoding.sampler import Denoiser
    from engine.formats import PromptFormat
    from engine.model import Transformer
    from engine.tokenizer import Tokenizer


@dataclass
class DecodeJob:
    """One request being decoded: its prompt, its denoiser and where its KV lives."""

    prompt: list[int]
    den: Denoiser | ExpandCanvas
    cache_key: str | None
    abort: AbortSignal | None
    on_step: StepCallback | None
    after: list[int] = field(default_factory=list)  # tokens after the canvas (in-place infilling)
    lead: list[int] = field(default_factory=list)  # absolute blocks: the prompt's partial last block
    base: int = 0  # prompt tokens committed to the KV cache by the prefill
    slot: Slot | None = None
    kv: KVCache | None = None
    ctx: int = 0
    last_hidden: Tensor | None = None
    cached: int = 0
    forwards: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    heal: str = ""  # typed text the prompt left out, spelled again by the model's tokens (`engine.decoding.heal`)
    healed: str = ""  # ... and what those tokens added past it: the output's text starts with this
    healed_ids: list[int] = field(default_factory=list)  # ... and the tokens, committed after the prompt


StepItem = tuple[DecodeJob, Tensor, "Tensor | None"]  # (job, hidden states of its block, the state before it)


class StepRunner(Protocol):
    """What a decoding strategy needs of the engine (`engine.engine.Engine` is one)."""

    model: Transformer
    args: ModelArgs
    tokenizer: Tokenizer
    device: torch.device
    dtype: torch.dtype
    kv_dtype: torch.dtype
    cache: PrefixCache
    graphs: StepGraphs | None
    approx_cache: bool
    sampler: SamplerConfig
    format: PromptFormat

    @property
    def block_size(self) -> int: ...

    @property
    def newline_ids(self) -> frozenset[int]: ...

    def block(self, cfg: SamplerConfig | None) -> int:
        """The denoising block of a call (the model's when it was trained with one)."""
        ...

    def slot_key(self, j: DecodeJob) -> str | None: ...

    def take_slot(self, j: DecodeJob, need: int) -> Slot:
        """``j``'s prefix-cache slot with room for ``need`` positions."""
        ...

    def step(self, items: Sequence[StepItem]) -> list[int]:
        """One denoising step of each job from its block's hidden states (one LM-head matmul); the
        positions each unmasked."""
        ...

    def emit(self, j: DecodeJob, unmasked: int) -> None:
        """``j``'s step event (its ``on_step``)."""
        ...

    def text(self, ids: list[int], single_line: bool) -> str: ...


class PrefillHook(Protocol):
    """Changes how a block-causal prompt is prefilled."""

    def take_slot(self, j: DecodeJob, slot: Slot) -> Slot:
        """The slot the engine took for ``j``, adjusted."""
        ...

    def prefill(self, j: DecodeJob, run: Callable[[DecodeJob], None]) -> None:
        """Prefill ``j``; ``run`` is the engine's own prefill."""
        ...

    def extend(self, j: DecodeJob, ids: list[int], forward: Callable[[DecodeJob, list[int]], None]) -> None:
        """Commit ``ids`` after ``j``'s prefilled prompt, as prompt (token healing's picks); ``forward`` is the
        engine's own commit."""
        ...
