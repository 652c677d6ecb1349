"""The engine's public contract: what the server (and anything embedding the engine) may call.

``Engine`` (engine/engine.py) implements it; tests and embedders may supply any object with the same
shape (``EngineAPI`` is a ``typing.Protocol``). A call is a typed value — ``InfillCall`` (fill the middle
of a FIM prompt) or ``RewriteCall`` (rewrite the editable region of an edit prompt) — and
``complete(calls)`` runs several as one batch with exactly the per-call semantics of ``infill`` /
``rewrite``: the block rule, the output cut and the cursor-token removal live in the engine only.

Besides the calls, an engine has ``meta`` (what its loader knows: a hub model's pinned ``revision``, …),
``degraded`` (a backend's current failure, shown as the server's status: the remote backend's) and
``close()`` (release connections and threads). Engines built on :class:`ByComplete` / :class:`OneByOne`
get the in-process defaults from :class:`EngineBase` (no metadata, never degraded, nothing to close).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from engine.templates import EditPrompt, FimPrompt
from engine.types import AbortSignal, EngineInfo, GenerateResult, PrefillPlan, SamplerConfig, StepCallback


@dataclass(frozen=True)
class InfillCall:
    """Fill the masked middle of ``prompt``: at most ``max_tokens`` tokens, one line when ``single_line``,
    at most ``max_lines`` lines otherwise (decoding stops there: the rest of the canvas is never computed)."""

    prompt: FimPrompt
    max_tokens: int = 64
    single_line: bool = False
    sampler: SamplerConfig | None = None
    cache_key: str | None = None
    abort: AbortSignal | None = None
    on_step: StepCallback | None = None
    max_lines: int | None = None  # multi-line: the output ends with its ``max_lines``-th line (None: no cap)
    # multi-line: after this many ms from the call, decoding stops and the finished lines are the answer;
    # single line: after this many ms from its first decoded token, decoding stops and the answer is empty
    budget_ms: float | None = None


@dataclass(frozen=True)
class RewriteCall:
    """Rewrite ``prompt.region`` given its surroundings and the edit history. ``variant`` 0 = the
    sampler's own output (greedy by default); i > 0 = a sampled alternative: the same sampler at
    `engine.decoding.policy.VARIANT_TEMPERATURE` with seed i (`variant_sampler`), for the several
    candidates a next edit may weigh. Run one after another with the same ``cache_key``, the variants
    reuse the first call's prompt KV (the prefix cache): only their decoding costs."""

    prompt: EditPrompt
    sampler: SamplerConfig | None = None
    cache_key: str | None = None
    abort: AbortSignal | None = None
    on_step: StepCallback | None = None
    variant: int = 0


Call = InfillCall | RewriteCall


@runtime_checkable
class EngineAPI(Protocol):
    """What front ends and the pipeline use. ``info``: what the engine says about itself (`EngineInfo`: model,
    label, device, dtype, …); ``tokenizer`` / ``args`` are read only for token counting and the context budget."""

    info: EngineInfo
    tokenizer: Any
    args: Any
    meta: Mapping[str, Any]  # the loader's metadata ("revision": a hub model's pinned commit, …)

    @property
    def degraded(self) -> str | None:
        """Why the engine serves in a degraded way right now (the remote backend's last failure), or None."""
        ...

    def close(self) -> None:
        """Release connections and threads (the remote backend's); the engine is not used afterwards."""
        ...

    def forget(self, cache_key: str | None = None) -> None:
        """Drop what is cached for the prompts of ``cache_key`` (a document), or of every document: a closed
        document's memory is freed; an evaluation's cases start cold, so each answer is the same whatever
        ran before it (a reused prefix is exact in arithmetic, not in floating point)."""
        ...

    def complete(self, calls: Sequence[Call]) -> list[GenerateResult]:
        """Run ``calls`` together (one batched forward per step where the model allows it)."""
        ...

    def prefill_plan(self, prompt: FimPrompt, cache_key: str) -> PrefillPlan | None:
        """What prefilling ``prompt`` for the document ``cache_key`` would cost now (None: the engine cannot
        tell, e.g. a remote backend)."""
        ...

    def prefetch(self, prompt: FimPrompt, cache_key: str, abort: AbortSignal | None = None) -> int:
        """Prefill ``prompt`` ahead of a request (idle time), stopping soon after ``abort`` is set; the
        prompt tokens computed (0: nothing to do, or the engine does not prefetch)."""
        ...

    def infill(self, prompt: FimPrompt, max_tokens: int = 64, single_line: bool = False,
               sampler: SamplerConfig | None = None, cache_key: str | None = None,
               abort: AbortSignal | None = None, on_step: StepCallback | None = None) -> GenerateResult:
        ...

    def rewrite(self, prompt: EditPrompt, sampler: SamplerConfig | None = None,
                cache_key: str | None = None, abort: AbortSignal | None = None,
                on_step: StepCallback | None = None) -> GenerateResult:
        ...


class EngineBase:
    """The defaults of :class:`EngineAPI`'s members besides the calls, for an in-process engine."""

    meta: Mapping[str, Any] = MappingProxyType({})

    @property
    def degraded(self) -> str | None:
        return None

    def close(self) -> None:
        return None

    def forget(self, cache_key: str | None = None) -> None:
        return None

    def prefill_plan(self, prompt: FimPrompt, cache_key: str) -> PrefillPlan | None:
        return None

    def prefetch(self, prompt: FimPrompt, cache_key: str, abort: AbortSignal | None = None) -> int:
        return 0


class ByComplete(EngineBase):
    """Mixin for engines whose ``complete`` is the primitive: ``infill`` / ``rewrite`` are one-call
    batches (the in-process ``Engine``, the remote backend)."""

    def infill(self, prompt: FimPrompt, max_tokens: int = 64, single_line: bool = False,
               sampler: SamplerConfig | None = None, cache_key: str | None = None,
               abort: AbortSignal | None = None, on_step: StepCallback | None = None) -> GenerateResult:
        call = InfillCall(prompt, max_tokens, single_line, sampler, cache_key, abort, on_step)
        return self.complete([call])[0]  # type: ignore[attr-defined]

    def rewrite(self, prompt: EditPrompt, sampler: SamplerConfig | None = None,
                cache_key: str | None = None, abort: AbortSignal | None = None,
                on_step: StepCallback | None = None) -> GenerateResult:
        return self.complete([RewriteCall(prompt, sampler, cache_key, abort, on_step)])[0]  # type: ignore[attr-defined]


class OneByOne(EngineBase):
    """Mixin for engines without batching (test fakes): ``complete`` runs each call
    through the object's own ``infill`` / ``rewrite``."""

    def complete(self, calls: Sequence[Call]) -> list[GenerateResult]:
        out = []
        for c in calls:
            if isinstance(c, InfillCall):
                out.append(self.infill(c.prompt, max_tokens=c.max_tokens,  # type: ignore[attr-defined]
                                       single_line=c.single_line, sampler=c.sampler, cache_key=c.cache_key,
                                       abort=c.abort, on_step=c.on_step))
            else:
                out.append(self.rewrite(c.prompt, sampler=c.sampler,  # type: ignore[attr-defined]
                                        cache_key=c.cache_key, abort=c.abort, on_step=c.on_step))
        return out
