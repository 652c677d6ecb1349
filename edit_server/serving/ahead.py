"""After a jump: a quick first answer now, the full prompt prefilled while the server is idle.

A completion's prompt is the full build (`edit_server.context.builder`). When the engine says its
prefill would take more than half the single-line budget (`EngineAPI.prefill_plan`: the tokens no
cached slot of the document holds, at the rate the engine measured), the answer comes from a quick
prompt instead (`edit_server.context.quick`: the document's last served sections and history, whose KV
is cached, and a short window sized to what fits that half), and the full build's prompt waits here.
The worker prefills the waiting prompts whenever its queue is empty (`EngineAPI.prefetch`, a chunk at a
time), stopping as soon as anything else is queued; once the cache holds the full prompt the next
request is answered from it. Editors that say where the cursor rests (`edit_server.core.messages.Rest`)
get the full prompt prefilled before they ask.

Nothing is quick where there is no served head to reuse (the first request of a document), on a GPU
(whose prefill fits the budget), or with the time budgets lifted (the evaluations' "no time budget").
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable

from edit_server.context.options import FimBuild
from edit_server.core.messages import Job
from edit_server.core.requests import FimRequest
from edit_server.serving.contexts import Context, completion_budget_ms
from engine.api import EngineAPI
from engine.templates import FimPrompt
from engine.types import AbortSignal

log = logging.getLogger(__name__)

QUICK_SHARE = 0.5  # of the single-line budget a first answer's prefill may take before a quick prompt is used
QUICK_MAX_SHARE = 1.0  # ... and what the quick prompt's own prefill may take (more: the full prompt, better)
OWN_HEAD_SLACK = 1.25  # a quick prompt behind this place's own head may cost this much more than the served one's
MAX_WAITING = 4  # documents whose full prompts wait for idle time (the most recent ones)


class Ahead:
    """The full prompts waiting to be prefilled, one per document (cache key), newest last. The worker
    thread owns it; ``interrupt`` may be called from any thread (something was queued)."""

    def __init__(self) -> None:
        self._waiting: OrderedDict[str, FimPrompt] = OrderedDict()
        self._abort = AbortSignal()
        self._lock = threading.Lock()

    @property
    def pending(self) -> bool:
        return bool(self._waiting)

    def want(self, key: str, prompt: FimPrompt) -> None:
        self._waiting.pop(key, None)
        self._waiting[key] = prompt
        while len(self._waiting) > MAX_WAITING:
            self._waiting.popitem(last=False)

    def drop(self, key: str | None = None) -> None:
        if key is None:
            self._waiting.clear()
        else:
            self._waiting.pop(key, None)

    def interrupt(self) -> None:
        with self._lock:
            self._abort.abort()

    def run_one(self, engine: EngineAPI, busy: Callable[[], bool] = lambda: False) -> None:
        """Prefill the newest waiting prompt until it is done or ``interrupt`` is called; an interrupted
        one waits on (what it computed stays cached), a failed one is dropped. ``busy``: whether something
        is queued (checked once the new abort signal is in place: a message queued before it is seen
        here, one queued after it interrupts)."""
        key, prompt = next(reversed(self._waiting.items()))
        with self._lock:
            self._abort = abort = AbortSignal()
        if busy():
            return
        try:
            n = engine.prefetch(prompt, key, abort)
        except Exception:
            log.warning("prefetch of %s failed", key, exc_info=True)
            self._waiting.pop(key, None)
            return
        if not abort.aborted and self._waiting.get(key) is prompt:
            del self._waiting[key]
            log.info("fim %s: %d prompt tokens prefilled ahead", key, n)


def first_prompt(job: Job, ctx: Context, engine: EngineAPI | None, ahead: Ahead) -> FimPrompt | None:
    """The prompt to answer ``job`` (a FIM request) from now: the full build, or a quick prompt when the full
    one's prefill would not fit (its prompt then waits in ``ahead``). None: the context blocked the file."""
    assert isinstance(job.req, FimRequest)
    full = ctx.fim_build(job.req)
    if full is None:
        return None
    quick = _quick(job, ctx, engine, full) if engine is not None and job.req.from_editor else None
    if quick is None:
        ahead.drop(job.key)
        ctx.served(job.req, full)
        return full.prompt
    ahead.want(job.key, full.prompt)
    return quick


def _quick(job: Job, ctx: Context, engine: EngineAPI, full: FimBuild) -> FimPrompt | None:
    """A quick prompt for ``job`` when the full one's prefill would take more than ``QUICK_SHARE`` of the
    single-line budget and a quick one takes at most ``QUICK_MAX_SHARE`` of it (its head cached), else None."""
    budget = completion_budget_ms(job.settings, engine, True)
    plan = engine.prefill_plan(full.prompt, job.key)
    if plan is None or plan.ms <= QUICK_SHARE * budget:
        return None
    tokens = int(QUICK_SHARE * budget / (plan.ms / max(1, plan.uncached)))
    # behind the served head (cached since the last answer; none: the document's first request, never quick),
    # or behind the full build's own (a prefetch may have computed it: its definitions are this place's, so it
    # is taken when it costs at most a quarter more)
    served = ctx.quick_fim(job.req, tokens)
    best = (served, engine.prefill_plan(served, job.key)) if served is not None else None
    if best is None or best[1] is None:
        return None
    own = ctx.quick_fim(job.req, tokens, head=full)
    op = engine.prefill_plan(own, job.key) if own is not None else None
    if own is not None and op is not None and op.ms <= OWN_HEAD_SLACK * best[1].ms:
        best = (own, op)
    prompt, qplan = best
    if qplan is None or qplan.ms > QUICK_MAX_SHARE * budget or qplan.ms >= plan.ms:
        return None  # its head is not cached either (evicted, forgotten): the full prompt is the better answer
    log.info("fim %s: quick prompt, %d tokens to compute (the full one: %d, ~%.0f ms)",
             job.key, qplan.uncached, plan.uncached, plan.ms)
    return prompt


def rest_prompt(req: FimRequest, ctx: Context) -> FimPrompt | None:
    """The full prompt for where the cursor rests (a `Rest` message), to prefill before the user asks."""
    full = ctx.fim_build(req)
    return None if full is None else full.prompt
