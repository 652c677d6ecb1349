"""The engine worker thread: loads the model (`edit_server.serving.loader`), runs context building +
generation off the event loop.

One thread owns the engine. Jobs for the same (document, kind) supersede each other: submitting a new
one aborts the older (queued jobs are dropped, the running one stops between denoising steps through its
AbortSignal). Jobs queued together run as one batched engine call (``EngineAPI.complete``). Messages
to the thread are typed (`edit_server.core.messages`); a command met while draining a batch runs right
after that batch, before anything queued later.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any

from edit_server.core.messages import (
    CloseDocument,
    Configure,
    FilesChanged,
    Forget,
    Job,
    Load,
    Message,
    Outcome,
    ProgressFn,
    Rest,
    SetRoots,
    Settle,
    StatusFn,
    Stop,
)
from edit_server.core.requests import Built, EditBuilt, FimRequest
from edit_server.core.settings import Settings
from edit_server.selectivity.select import is_single_line, rewrite_hidden
from edit_server.serving.ahead import Ahead, first_prompt, rest_prompt
from edit_server.serving.contexts import Context, completion_budget_ms, make_context, max_lines
from edit_server.serving.loader import load_engine
from engine.api import Call, EngineAPI, InfillCall, RewriteCall
from engine.templates import FimPrompt
from engine.types import EngineInfo, GenerateResult

log = logging.getLogger(__name__)


def alternatives_wanted(job: Job) -> int:
    """How many sampled alternatives a job wants besides its first result: ``nextEdit.candidates`` - 1
    for a next edit on the local engine (a remote backend has no seeded sampling: it would repeat itself)."""
    if job.kind != "edit" or job.settings.remote.url:
        return 0
    return job.settings.next_edit.candidates - 1


def engine_call(job: Job, built: Built, engine: EngineAPI | None = None, variant: int = 0) -> Call:
    """The engine call for a job: the block rule, output cut and cursor handling are the engine's."""
    if isinstance(job.req, FimRequest):
        assert isinstance(built, FimPrompt)
        one = job.single_line if job.single_line is not None else is_single_line(job.req, job.settings.multiline)
        return InfillCall(built, max_tokens=job.settings.max_tokens, single_line=one,
                          cache_key=job.key, abort=job.abort, on_step=job.on_step,
                          max_lines=None if one else max_lines(job.settings, engine),
                          budget_ms=completion_budget_ms(job.settings, engine, one))
    assert isinstance(built, EditBuilt)
    return RewriteCall(built.prompt, cache_key=job.key, abort=job.abort,
                       on_step=job.on_step if not variant else None, variant=variant)


class EngineWorker:
    def __init__(self, on_status: StatusFn, roots: list[Path] | None = None,
                 on_progress: ProgressFn | None = None) -> None:
        self.on_status = on_status
        self.on_progress = on_progress
        self.roots = roots or []
        self.engine: EngineAPI | None = None
        self.scorer: Any = None  # engine.reward.RewardScorer when a KTO-aligned adapter is loaded
        self.ready = threading.Event()
        self.error: str | None = None
        self.degraded: str | None = None
        self._ctx: Context | None = None
        self._q: queue.Queue[Message] = queue.Queue()
        self._lock = threading.Lock()
        self._live: list[Job] = []  # queued or running
        self._ahead = Ahead()  # full prompts prefilled while the queue is empty (serving.ahead)
        self._thread = threading.Thread(target=self._run, name="engine-worker", daemon=True)
        self._thread.start()

    @property
    def info(self) -> EngineInfo | None:
        """What the loaded engine says about itself (None: no engine loaded)."""
        return self.engine.info if self.engine is not None else None

    # -- called from the event loop ------------------------------------------------------------
    def load(self, spec: str, device: str, settings: Settings, engine: EngineAPI | None = None) -> None:
        self.ready.clear()
        self._put(Load(spec, device, settings, engine))

    def set_settings(self, settings: Settings) -> None:
        self._put(Configure(settings))

    def close_document(self, path: str, key: str = "") -> None:
        self._put(CloseDocument(path, key))

    def forget(self) -> None:
        self._put(Forget())

    def files_changed(self, changes: list[tuple[str, bool]]) -> None:
        self._put(FilesChanged(tuple(changes)))

    def settle(self, timeout: float) -> Future:
        done: Future = Future()
        self._put(Settle(done, timeout))
        return done

    def set_roots(self, roots: list[Path], removed: list[Path] | None = None) -> None:
        """The workspace folders changed: requests queued after this see only the new ones."""
        self._put(SetRoots(tuple(roots), tuple(removed or ())))

    def rest(self, key: str, req: FimRequest) -> None:
        """The cursor rests at ``req.offset``: its completion prompt is prefilled while nothing else runs."""
        self._put(Rest(key, req))

    def _put(self, item: Message) -> None:
        self._q.put(item)
        self._ahead.interrupt()  # a prefill ahead stops after its current chunk: this comes first

    def submit(self, job: Job) -> Future:
        with self._lock:
            for old in self._live:
                if old.key == job.key and old.kind == job.kind:
                    old.abort.abort()
            self._live.append(job)
        self._put(job)
        return job.future

    def abort_document(self, uri: str) -> None:
        with self._lock:
            for j in self._live:
                if j.key == uri:
                    j.abort.abort()

    def stop(self) -> None:
        with self._lock:
            for j in self._live:
                j.abort.abort()
        self._put(Stop())

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    # -- worker thread --------------------------------------------------------------------------
    def _run(self) -> None:
        held: Message | None = None  # a command met while draining a batch: next, before anything queued after it
        while True:
            item, held = (held, None) if held is not None else (self._next(), None)
            if isinstance(item, Stop):
                self._fail_pending()
                self._close(self.engine)
                return
            if not isinstance(item, Job):
                self._command(item)
                continue
            jobs = [item]
            while True:  # drain: everything queued now runs as one batch
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if isinstance(nxt, Job):
                    jobs.append(nxt)
                else:  # a command: right after this batch, in order (a request sent after a
                    held = nxt  # workspace folder was removed must not be built with it)
                    break
            self._run_jobs(jobs)

    def _next(self) -> Message:
        """The next message; while none is queued, the waiting prompts are prefilled (`serving.ahead`)."""
        while self._ahead.pending and self.engine is not None:
            try:
                return self._q.get_nowait()
            except queue.Empty:
                self._ahead.run_one(self.engine, busy=lambda: not self._q.empty())
        return self._q.get()

    def _command(self, item: Load | Configure | CloseDocument | Forget | SetRoots | FilesChanged | Settle | Rest,
                 ) -> None:
        if isinstance(item, Rest):
            if self._ctx is not None and self.engine is not None:
                try:
                    prompt = rest_prompt(item.req, self._ctx)
                except Exception:
                    log.warning("context building for a resting cursor failed", exc_info=True)
                    return
                if prompt is not None:
                    self._ahead.want(item.key, prompt)
        elif isinstance(item, CloseDocument):
            if self._ctx is not None and item.path:
                self._ctx.close_document(item.path)
            if item.key:
                self._ahead.drop(item.key)
            if self.engine is not None and item.key:
                self.engine.forget(item.key)  # its prompts' KV: memory the next document can use
        elif isinstance(item, Forget):
            self._ahead.drop()
            if self._ctx is not None:
                self._ctx.forget_served()  # the heads' KV goes with the engine's cache
            if self.engine is not None:
                self.engine.forget()
        elif isinstance(item, Settle):
            item.done.set_result(self._ctx.wait_idle(item.timeout) if self._ctx is not None else True)
        elif isinstance(item, FilesChanged):
            if self._ctx is not None:
                self._ctx.files_changed(list(item.changes))
        elif isinstance(item, SetRoots):
            self.roots = list(item.roots)
            if self._ctx is not None:
                self._ctx.set_roots(self.roots, list(item.removed))
                self.degraded = self._ctx.degraded
        elif isinstance(item, Configure):
            self._ahead.drop()  # prompts built under the old settings
            if self._ctx is not None:
                self._ctx.configure(item.settings, self.engine)
        else:
            self._ahead.drop()
            self._load(item)

    def _load(self, item: Load) -> None:
        self.on_status("loading", f"loading model {item.spec!r} on {item.device}")
        t0 = time.perf_counter()
        try:
            old, self.engine = self.engine, None
            self._close(old)
            if item.settings.threads:  # fewer threads than cores avoids spin-wait collapse on busy machines
                import torch

                torch.set_num_threads(item.settings.threads)
            if item.engine is not None:
                eng, self.scorer = item.engine, None
            elif item.settings.remote.url:  # engine calls go to the remote; this machine loads no model
                eng, self.scorer = self._remote(item), None
            else:
                eng, self.scorer = load_engine(item.spec, item.device, self.on_progress,
                                               item.settings.gate.kto)
            self._ctx = make_context(item.settings, self.roots, eng)
            self.engine = eng
            self.error = None
            self.degraded = self._ctx.degraded
            self.ready.set()

            info = EngineInfo.of(eng.info)
            rev = eng.meta.get("revision")
            if rev and info.revision is None:  # a hub model: the pinned commit
                eng.info = info = replace(info, revision=str(rev))
            msg = (f"{info.model or item.spec} ({info.label}) on "
                   f"{info.device or item.device}, loaded in {time.perf_counter() - t0:.1f}s")
            if info.warning:  # a remote backend over plain http to another machine
                msg += f"; {info.warning}"
            if self.degraded:
                self.on_status("degraded", f"{msg}; {self.degraded}")
            else:
                self.on_status("ready", msg)
        except Exception as e:  # a broken model: clear message, keep serving (empty answers)
            log.exception("model load failed")
            self.error = f"model load failed: {e}"
            self.on_status("error", self.error)

    @staticmethod
    def _close(engine: EngineAPI | None) -> None:
        """An engine's connections and threads go with it (a remote backend's; in-process: nothing)."""
        if engine is not None:
            try:
                engine.close()
            except Exception:
                log.warning("closing the engine failed", exc_info=True)

    def _remote(self, item: Load) -> EngineAPI:
        from edit_server.serving.remote import remote_engine

        def local() -> EngineAPI:
            self.on_status("busy", f"remote failed: loading the local model {item.spec!r}")
            return load_engine(item.spec, item.device, self.on_progress, "off")[0]

        return remote_engine(item.settings, local)

    def _degraded_now(self) -> str | None:
        """The context builder's degradation or the remote backend's last failure (shown as status)."""
        parts = [p for p in (self.degraded, self.engine.degraded if self.engine is not None else None) if p]
        return "; ".join(parts) or None

    def _fail_pending(self) -> None:
        with self._lock:
            jobs, self._live = self._live, []
        for j in jobs:
            if not j.future.done():
                j.future.set_result(None)
        while True:  # a settle asked for before the stop: answered (not settled)
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, Settle) and not item.done.done():
                item.done.set_result(False)

    def _settle(self, job: Job, outcome: Outcome | None = None, error: Exception | None = None) -> None:
        with self._lock:
            if job in self._live:
                self._live.remove(job)
        if job.future.done():
            return
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(outcome)

    def _run_jobs(self, jobs: list[Job]) -> None:
        live = []
        for j in jobs:
            if j.abort.aborted or self.engine is None:
                self._settle(j)
            else:
                live.append(j)
        if not live:
            return
        self.on_status("busy", f"generating ({len(live)} request{'s' if len(live) > 1 else ''})")
        try:
            built: list[tuple[Job, Built]] = []
            for j in live:
                try:
                    b = j.built if j.built is not None else self._build(j)
                except Exception as e:
                    log.exception("context building failed")
                    self._settle(j, error=e)
                    continue
                if b is None:  # the context blocked this file (excluded / secret)
                    self._settle(j)
                else:
                    built.append((j, b))
            self._generate(built)
        finally:
            degraded = self._degraded_now()
            self.on_status("degraded" if degraded else "ready", degraded or "idle")

    def _build(self, job: Job) -> Built | None:
        assert self._ctx is not None
        if isinstance(job.req, FimRequest):
            return first_prompt(job, self._ctx, self.engine, self._ahead)
        return self._ctx.edit(job.req)

    def rewrite_hidden(self, job: Job) -> bool:
        """Whether a next edit's model rewrite could never be shown, so the model is not asked: the
        selection's decision (`select.rewrite_hidden`) for a gated next edit."""
        return job.kind == "edit" and job.gated and rewrite_hidden(
            job.settings, self.info, aligned=self.scorer is not None)

    def _generate(self, built: list[tuple[Job, Built]]) -> None:
        run = []
        for j, b in built:
            if not self.rewrite_hidden(j):
                run.append((j, b))
                continue
            assert isinstance(b, EditBuilt)
            log.info("edit %s: model skipped (its rewrites are never shown: show threshold inf)", j.key)
            self._settle(j, Outcome(b, GenerateResult(b.prompt.region, [], [], 0, 0, 0, 0, "skipped")))
        built = run
        if not built:
            return
        assert self.engine is not None
        try:
            self._deliver(built, self.engine.complete([engine_call(j, b, self.engine) for j, b in built]))
            return
        except Exception as e:
            if len(built) == 1:
                self._engine_failed(built[0][0], e)
                return
            log.exception("batched generation failed; running one by one")
        for j, b in built:
            if j.future.done():
                continue
            try:
                self._deliver([(j, b)], self.engine.complete([engine_call(j, b, self.engine)]))
            except Exception as e:
                self._engine_failed(j, e)

    def _engine_failed(self, job: Job, e: Exception) -> None:
        log.error("engine failed on %s %s", job.kind, job.key, exc_info=e)  # the traceback stays in the log
        self._settle(job, error=RuntimeError(f"engine failed ({type(e).__name__}: {e})"))  # no traceback

    def _deliver(self, built: list[tuple[Job, Built]], results: list[GenerateResult]) -> None:
        for (j, b), r in zip(built, results, strict=True):
            if r.aborted:
                self._settle(j)
                continue
            t = r.timings or {}  # per-request numbers for support at INFO: sizes and timings, no text
            log.info("%s %s: %d prompt tokens (%d cached), %d steps, %d forwards, %s; prefill %.0f ms, "
                     "decode %.0f ms, batch %d, %d tokens", j.kind, j.key, r.prompt_tokens, r.cached_tokens,
                     r.steps, r.forwards, r.finish_reason, t.get("prefill_ms", 0.0), t.get("decode_ms", 0.0),
                     len(built), len(r.tokens))
            self._settle(j, Outcome(b, r, len(built), self._reward(j, b, r), self._alternatives(j, b)))

    def _alternatives(self, job: Job, built: Built) -> list[tuple[GenerateResult, Any]]:
        """A next edit's sampled alternatives (`engine.api.RewriteCall.variant` 1, 2, …), one call after
        another: each finds the first call's prompt KV in the prefix cache (same key), so only its decoding
        costs. A failed or aborted one ends the list (the candidates so far still count)."""
        out: list[tuple[GenerateResult, Any]] = []
        for v in range(1, alternatives_wanted(job) + 1):
            if job.abort.aborted or self.engine is None:
                break
            try:
                r = self.engine.complete([engine_call(job, built, self.engine, variant=v)])[0]
            except Exception:
                log.warning("sampled next-edit alternative %d failed", v, exc_info=True)
                break
            if r.aborted:
                break
            out.append((r, self._reward(job, built, r)))
        return out

    def _reward(self, job: Job, built: Built, r: GenerateResult) -> Any:
        """The aligned model's implicit reward of the output (one coupled forward pair), or None."""
        if self.scorer is None or not r.tokens:
            return None
        try:
            if isinstance(built, EditBuilt):
                return self.scorer.score_edit(built.prompt, r, cache_key=job.key)
            return self.scorer.score_fim(built, r, cache_key=job.key)
        except Exception:  # the gate falls back to the confidences
            log.warning("reward scoring failed; confidence gate", exc_info=True)
            return None
