"""The engine worker thread: loads the model, runs context building + generation off the event loop.

One thread owns the engine. Jobs for the same (document, kind) supersede each other: submitting a new
one aborts the older (queued jobs are dropped, the running one stops between denoising steps through its
AbortSignal). Several jobs queued together run as one batched engine call (``generate_batch``).
"""

from __future__ import annotations

import importlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edit_server.core.pipeline import EditRequest, FimRequest, auto_budget, is_single_line, make_context
from edit_server.core.settings import Settings
from engine.types import AbortSignal

log = logging.getLogger(__name__)
StatusFn = Callable[[str, str], None]  # (state: loading|ready|busy|error, message)
FACTORY_ENV = "EDIT_SERVER_ENGINE_FACTORY"  # "module:callable(spec, device)", for tests and embedding


@dataclass
class Job:
    kind: str  # "fim" | "edit"
    key: str  # document URI
    req: FimRequest | EditRequest
    settings: Settings
    abort: AbortSignal = field(default_factory=AbortSignal)
    future: Future = field(default_factory=Future)
    queued_at: float = field(default_factory=time.monotonic)


@dataclass
class Outcome:
    """What the worker hands back: the prompt/region used and the engine result."""

    built: Any  # FimPrompt or pipeline.EditBuilt
    text: str
    confidences: list[float]
    result: Any  # engine GenerateResult
    batch: int = 1


def load_engine(spec: str, device: str) -> Any:
    factory = os.environ.get(FACTORY_ENV)
    if factory:
        mod, _, fn = factory.partition(":")
        return getattr(importlib.import_module(mod), fn)(spec, device)
    from engine import Engine

    return Engine.load(spec, device=device)


class EngineWorker:
    def __init__(self, on_status: StatusFn, roots: list[Path] | None = None) -> None:
        self.on_status = on_status
        self.roots = roots or []
        self.engine: Any = None
        self.ready = threading.Event()
        self.error: str | None = None
        self._ctx: Any = None
        self._q: queue.Queue[Any] = queue.Queue()
        self._lock = threading.Lock()
        self._live: list[Job] = []  # queued or running
        self._thread = threading.Thread(target=self._run, name="engine-worker", daemon=True)
        self._thread.start()

    # -- called from the event loop ------------------------------------------------------------
    def load(self, spec: str, device: str, settings: Settings) -> None:
        self.ready.clear()
        self._q.put(("load", spec, device, settings))

    def set_settings(self, settings: Settings) -> None:
        self._q.put(("settings", settings))

    def close_document(self, path: str) -> None:
        self._q.put(("close", path))

    def submit(self, job: Job) -> Future:
        with self._lock:
            for old in self._live:
                if old.key == job.key and old.kind == job.kind:
                    old.abort.abort()
            self._live.append(job)
        self._q.put(job)
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
        self._q.put(None)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    # -- worker thread --------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                self._fail_pending("server stopping")
                return
            if isinstance(item, tuple):
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
                else:
                    self._q.put(nxt)  # a command: handle after this batch
                    break
            self._run_jobs(jobs)

    def _command(self, item: tuple) -> None:
        if item[0] == "close":
            if self._ctx is not None:
                self._ctx.close_document(item[1])
            return
        if item[0] == "settings":
            if self._ctx is not None and hasattr(self._ctx, "settings"):
                self._ctx.settings = item[1]
                self._ctx.budget = auto_budget(item[1], self.engine)
            return
        _, spec, device, settings = item
        self.on_status("loading", f"loading model {spec!r} on {device}")
        t0 = time.perf_counter()
        try:
            self.engine = None
            if settings.threads:  # fewer threads than cores avoids spin-wait collapse on busy machines
                import torch

                torch.set_num_threads(settings.threads)
            eng = load_engine(spec, device)
            self._ctx = make_context(settings, self.roots, eng)
            self.engine = eng
            self.error = None
            self.ready.set()
            info = getattr(eng, "info", {}) or {}
            self.on_status("ready", f"{info.get('model', spec)} ({info.get('label', '')}) on "
                                    f"{info.get('device', device)}, loaded in {time.perf_counter() - t0:.1f}s")
        except Exception as e:  # a broken model: clear message, keep serving (empty answers)
            log.exception("model load failed")
            self.error = f"model load failed: {e}"
            self.on_status("error", self.error)

    def _fail_pending(self, why: str) -> None:
        with self._lock:
            jobs, self._live = self._live, []
        for j in jobs:
            if not j.future.done():
                j.future.set_result(None)

    def _finish(self, job: Job, outcome: Outcome | None) -> None:
        if outcome is not None:
            r = outcome.result  # per-request numbers for support: `--log-level INFO`
            t = getattr(r, "timings", None) or {}
            log.info("%s %s: %s prompt tokens (%s cached), %s steps, %s forwards, %s; prefill %.0f ms, "
                     "decode %.0f ms, batch %d", job.kind, job.key, *(getattr(r, a, "?") for a in (
                         "prompt_tokens", "cached_tokens", "steps", "forwards", "finish_reason")),
                     t.get("prefill_ms", 0.0), t.get("decode_ms", 0.0), outcome.batch)
        with self._lock:
            if job in self._live:
                self._live.remove(job)
        if not job.future.done():
            job.future.set_result(outcome)

    def _run_jobs(self, jobs: list[Job]) -> None:
        live = []
        for j in jobs:
            if j.abort.aborted or self.engine is None:
                self._finish(j, None)
            else:
                live.append(j)
        if not live:
            return
        self.on_status("busy", f"generating ({len(live)} request{'s' if len(live) > 1 else ''})")
        built: list[tuple[Job, Any]] = []
        for j in live:
            try:
                self._ctx.settings = j.settings
                b = self._ctx.fim(j.req) if j.kind == "fim" else self._ctx.edit(j.req)
                if b is None:  # the context builder blocked this file (excluded / secret)
                    self._finish(j, None)
                else:
                    built.append((j, b))
            except Exception as e:
                log.exception("context building failed")
                self._error(j, e)
        try:
            if len(built) > 1 and hasattr(self.engine, "generate_batch"):
                try:
                    self._batched(built)
                except Exception:
                    log.exception("batched generation failed; running one by one")
                    for j, b in built:
                        if not j.future.done():
                            self._single(j, b)
            else:
                for j, b in built:
                    self._single(j, b)
        finally:
            self.on_status("ready", "idle")

    def _error(self, job: Job, e: Exception) -> None:
        with self._lock:
            if job in self._live:
                self._live.remove(job)
        if not job.future.done():
            job.future.set_exception(e)

    def _single(self, job: Job, built: Any) -> None:
        eng = self.engine
        try:
            if job.kind == "fim":
                assert isinstance(job.req, FimRequest)
                r = eng.infill(built, max_tokens=job.settings.max_tokens, single_line=is_single_line(job.req),
                               cache_key=job.key, abort=job.abort)
            else:
                r = eng.rewrite(built.prompt, cache_key=job.key, abort=job.abort)
        except Exception as e:
            log.exception("engine failed")
            self._error(job, e)
            return
        self._finish(job, None if r.aborted else Outcome(built, r.text, list(r.confidences), r))

    def _batched(self, built: list[tuple[Job, Any]]) -> None:
        from engine.templates import edit_canvas_length, render_edit, render_fim
        from engine.types import CanvasSpec, GenerateRequest

        eng = self.engine
        tok = eng.tokenizer
        reqs = []
        for j, b in built:
            if j.kind == "fim":
                assert isinstance(j.req, FimRequest)
                ids = render_fim(tok, b).ids
                blk = eng.args.block_size
                canvas = CanvasSpec(-(-j.settings.max_tokens // blk) * blk, single_line=is_single_line(j.req))
            else:
                ids = render_edit(tok, b.prompt).ids
                canvas = CanvasSpec(edit_canvas_length(len(tok.encode(b.prompt.region)),
                                                       block_size=eng.args.block_size))
            reqs.append(GenerateRequest(ids, canvas, cache_key=j.key, abort=j.abort))
        results = eng.generate_batch(reqs)
        cur = tok.special.cursor
        for (j, b), r in zip(built, results, strict=True):
            if r.aborted:
                self._finish(j, None)
                continue
            keep = [i for i, t in enumerate(r.tokens) if t != cur][: j.settings.max_tokens if j.kind == "fim"
                                                                    else None]
            toks = [r.tokens[i] for i in keep]
            text = tok.decode_content(toks)
            if j.kind == "fim" and is_single_line(j.req):  # type: ignore[arg-type]
                text = text.split("\n", 1)[0]
            self._finish(j, Outcome(b, text, [r.confidences[i] for i in keep], r, len(built)))
