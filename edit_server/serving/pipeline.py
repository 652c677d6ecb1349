"""The one road every front end takes: documents → history → context → engine worker → gate → feedback.

The LSP server (edit_server/lsp) and the HTTP front end (edit_server/http) parse their wire formats into
plain calls on one :class:`Pipeline`; everything below works on character offsets and typed values.
Calls that wait for the model are coroutines (they await the worker thread without blocking the loop).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import msgspec

from edit_server.core.documents import DocumentStore
from edit_server.core.history import EditHistory, Hunk
from edit_server.core.messages import Job, Outcome, ProgressFn, StatusFn
from edit_server.core.requests import (
    Built,
    EditAnswer,
    EditBuilt,
    EditRequest,
    FimRequest,
    InlineAnswer,
    Suggestion,
)
from edit_server.core.settings import Settings
from edit_server.nextedit import serve as nextedit
from edit_server.selectivity.feedback import FeedbackStore
from edit_server.selectivity.select import (
    Candidate,
    Output,
    edit_results,
    fim_result,
    select,
    skip_reason,
)
from edit_server.selectivity.thresholds import gate_kind, model_thresholds
from edit_server.serving.contexts import max_lines
from edit_server.serving.remote import load_key
from edit_server.serving.suggest_cache import SuggestCache
from edit_server.serving.worker import EngineWorker
from engine.api import EngineAPI
from engine.templates import EditPrompt, FimPrompt
from engine.types import GenerateResult, StepCallback

log = logging.getLogger(__name__)
EMPTY = "model output empty after filtering"  # the reason when the model ran but left nothing to show


def open_feedback(settings: Settings) -> FeedbackStore:
    try:
        return FeedbackStore(settings.feedback_db, settings.suggestion_ttl_s)
    except Exception as e:  # e.g. a read-only data dir: keep serving, don't persist feedback
        log.warning("feedback store unavailable (%s); keeping signals in memory", e)
        return FeedbackStore(":memory:", settings.suggestion_ttl_s)


class Pipeline:
    def __init__(self, settings: Settings, on_status: StatusFn, roots: list[Path] | None = None,
                 feedback: FeedbackStore | None = None, engine: EngineAPI | None = None,
                 on_progress: ProgressFn | None = None,
                 on_suggestion: Callable[[Suggestion], None] | None = None) -> None:
        """``engine``: an engine already loaded (embedding, tests); else ``settings.model`` is loaded on
        the worker thread (status: loading → ready / degraded / error). ``on_suggestion``: told about
        every suggestion computed, shown or hidden (a model run that left nothing: reason `EMPTY`)."""
        self.settings = settings
        self.docs = DocumentStore()
        self.history = EditHistory(pause_s=settings.history_pause_ms / 1000)
        self.cache = SuggestCache(ttl_s=settings.suggestion_ttl_s)
        self.feedback = feedback if feedback is not None else open_feedback(settings)
        self.worker = EngineWorker(on_status, roots, on_progress)
        self.loaded: tuple[object, ...] | None = None
        self.on_suggestion = on_suggestion
        self._generation: dict[tuple[str, str], int] = {}
        if engine is not None:
            self.loaded = load_key(settings)
            self.worker.load(settings.model, settings.device, settings, engine)
        self.configure(settings)

    # -- settings and lifecycle ------------------------------------------------------------------
    def configure(self, settings: Settings) -> None:
        """New settings: context/gate follow at once; a different model or device is (re)loaded."""
        self.settings = settings
        self.cache.ttl_s = settings.suggestion_ttl_s
        self.history.pause_s = settings.history_pause_ms / 1000
        self.worker.set_settings(settings)
        want = load_key(settings)  # a new model, device or remote backend: load again
        if want != self.loaded:
            self.loaded = want
            self.worker.load(settings.model, settings.device, settings)

    @property
    def ready(self) -> bool:
        return self.worker.ready.is_set()

    def stop(self) -> None:
        self.worker.stop()
        self.feedback.expire(now=float("inf"))
        self.feedback.close()  # commits what is queued

    # -- documents -------------------------------------------------------------------------------
    def open_document(self, uri: str, path: str, text: str, version: int, language_id: str = "") -> None:
        self.docs.open(uri, path, text, version, language_id)

    def _too_big(self, text: str) -> bool:
        """Documents over ``limits.maxDocumentChars`` stay in sync but get no history and no suggestions."""
        return len(text) > self.settings.limits.max_document_chars

    def change_document(self, uri: str, start: int, end: int, new: str) -> None:
        """One content change, in character offsets of the current text (apply changes in order)."""
        ev = self.docs.apply(uri, start, end, new, time.monotonic())
        if not self._too_big(ev.before) and not self._too_big(ev.after):
            self.history.record(ev)

    def replace_document(self, uri: str, text: str) -> None:
        ev = self.docs.replace_all(uri, text, time.monotonic())
        if not self._too_big(ev.before) and not self._too_big(ev.after):
            self.history.record(ev)

    def changed(self, uri: str, version: int) -> None:
        """After a batch of changes: new version, in-flight work for the document stops, feedback."""
        doc = self.docs.get(uri)
        if doc is None:
            return
        self.docs.set_version(uri, version)
        self.worker.abort_document(uri)  # typing supersedes in-flight predictions for this document
        valid = self.cache.still_valid(uri, doc.text)
        entry = self.cache.peek(uri)
        self.feedback.typed_over(uri, {entry.id} if valid and entry else set())
        self.feedback.expire()
        if not valid:
            self.cache.drop(uri)

    def close_document(self, uri: str) -> None:
        doc = self.docs.get(uri)
        self.docs.close(uri)
        self.cache.drop(uri)
        if doc is not None:
            self.worker.close_document(doc.path or "", uri)

    def set_roots(self, roots: list[Path], removed: list[Path] | None = None) -> None:
        """The editor's workspace folders changed (LSP ``workspace/didChangeWorkspaceFolders``): context
        comes from ``roots`` only, never again from a ``removed`` folder, and no suggestion built before
        is served again."""
        self._drop_suggestions()
        self.worker.set_roots(roots, removed)

    def files_changed(self, changes: list[tuple[str, bool]]) -> None:
        """Files created / changed / deleted on disk (``(path, deleted)``, LSP didChangeWatchedFiles): the
        context builder re-reads them before the requests that follow (no suggestion built on their old
        text is served again)."""
        self._drop_suggestions()
        self.worker.files_changed(changes)

    def settle(self, timeout: float = 120.0) -> Future:
        """A future answered (True: in time) once the work queued so far and the context builder's indexing
        are done: an evaluation or benchmark client asks this before timing a request."""
        return self.worker.settle(timeout)

    def clear_history(self) -> None:
        """Forget the edit history, cached suggestions and the engine's cached prompts (evals isolate
        cases with this: each then runs as on a fresh server)."""
        self.history.clear()
        self._drop_suggestions()
        self.worker.forget()

    def _drop_suggestions(self) -> None:
        """No suggestion computed so far is served again (its context may no longer hold)."""
        self.cache = SuggestCache(ttl_s=self.settings.suggestion_ttl_s)

    def _history(self, path: str, text: str, offset: int) -> list[Hunk]:
        return self.history.recent(self.settings.history_size, now=time.monotonic(),
                                   cursor=(path, text.count("\n", 0, offset)))

    # -- feedback ------------------------------------------------------------------------------
    def accepted(self, sid: str, kind: str, uri: str, score: float) -> Future:
        """Done once the accept is committed to the feedback store (acknowledge the client then)."""
        if kind == "fim":
            self.cache.drop(uri)
        return self.feedback.accepted(sid, kind, uri, score)

    def shown(self, sid: str) -> None:
        self.feedback.shown(sid)

    def partially_accepted(self, sid: str, length: int) -> None:
        self.feedback.shown(sid)
        self.feedback.partial(sid, length)

    # -- suggestions ---------------------------------------------------------------------------
    def _report(self, sug: Suggestion) -> None:
        if self.on_suggestion is not None:
            try:
                self.on_suggestion(sug)
            except Exception:  # a reporting hook never breaks a suggestion
                log.warning("on_suggestion hook failed", exc_info=True)

    async def _debounced(self, key: tuple[str, str]) -> bool:
        """Wait debounceMs; False if a newer request for the same document/kind arrived meanwhile."""
        gen = self._generation[key] = self._generation.get(key, 0) + 1
        if self.settings.debounce_ms:
            await asyncio.sleep(self.settings.debounce_ms / 1000)
        return self._generation.get(key) == gen

    async def _run(self, job: Job) -> Outcome | None:
        fut = self.worker.submit(job)
        try:
            return await asyncio.wrap_future(fut)
        except asyncio.CancelledError:  # the client cancelled: stop the engine between denoising steps
            job.abort.abort()
            raise

    async def inline_completion(self, uri: str, offset: int, invoked: bool = True) -> InlineAnswer | None:
        """A FIM suggestion at ``offset`` of an open document (None: nothing worth showing)."""
        doc = self.docs.get(uri)
        if doc is None or self._too_big(doc.text):
            return None
        text, version = doc.text, doc.version
        hit = self.cache.lookup(uri, text, offset)
        if hit is not None:  # the user typed what we predicted: serve the rest, no model call
            entry, rest = hit
            return InlineAnswer(Suggestion(entry.id, "fim", rest, offset, offset, entry.score, True), text, version)
        if not self.ready:
            return None  # model still loading (or failed): answer empty, quickly
        req = FimRequest(uri, doc.path, text, version, offset, invoked, self._history(doc.path, text, offset))
        if skip_reason(req, self.settings) is not None or not await self._debounced((uri, "fim")):
            return None
        sug = await self._fim(req, None, uri)
        if sug is None or not sug.show:
            return None
        self.cache.put(uri, sug.id, sug.text, text, offset, sug.score)
        now = self.docs.get(uri)
        if now is None:
            return None
        if now.version != version:  # stale: re-base onto what the user typed since, or drop
            cur = len(now.text) - (len(text) - offset)
            hit = self.cache.lookup(uri, now.text, cur)
            if hit is None:
                return None
            return InlineAnswer(Suggestion(sug.id, "fim", hit[1], cur, cur, sug.score, True), now.text, now.version)
        return InlineAnswer(sug, text, version)

    def cursor_rest(self, uri: str, offset: int) -> None:
        """The cursor rests at ``offset`` (an editor plugin says so after a move): the completion prompt there
        is prefilled while the server is idle (`edit_server.serving.ahead`), so the first suggestion the user
        asks for there is computed from a cached prompt."""
        doc = self.docs.get(uri)
        if doc is None or not self.ready or self._too_big(doc.text) or not self.settings.inline_completion.enabled:
            return
        offset = max(0, min(offset, len(doc.text)))
        self.worker.rest(uri, FimRequest(uri, doc.path, doc.text, doc.version, offset, True,
                                         self._history(doc.path, doc.text, offset)))

    async def next_edit(self, uri: str, offset: int) -> EditAnswer | None:
        """Rewrite the editable region around ``offset`` given the recent edits (None: no edit)."""
        doc = self.docs.get(uri)
        if doc is None or not self.ready or not self.settings.next_edit.enabled or self._too_big(doc.text):
            return None
        text, version = doc.text, doc.version
        req = EditRequest(uri, doc.path, text, version, offset, self._history(doc.path, text, offset))
        if not await self._debounced((uri, "edit")):
            return None
        answer = await self._edit(req, None, uri)
        if answer is None or not answer.suggestion.show:
            answer = self._elsewhere(req)  # nothing here: a carried edit due in another open document
        now = self.docs.get(uri)
        if answer is None or not answer.suggestion.show or now is None or now.version != version:
            return None  # nothing to change, hidden by the gate, or the document moved on
        return answer

    def _elsewhere(self, req: EditRequest) -> EditAnswer | None:
        """The carried edit worth showing in another open document (a jump there), or None."""
        others = [nextedit.OpenDocument(d.uri, d.path, d.text, d.version) for d in self.docs if d.uri != req.uri]
        found = nextedit.other_documents(req, others, self.settings)
        if found is None:
            return None
        model = {**model_thresholds(self.worker.info), **nextedit.thresholds(self.settings)}
        doc = found.doc
        sug, edits = select(Output("edit", doc.path, doc.text, found.start, found.end, found.new, [found.probability],
                                   history=req.history, origin=nextedit.CARRY), self.settings, model)
        if sug is None or not sug.show:
            return None
        sug.jump = True
        self._report(sug)
        self.feedback.offered(sug.id, gate_kind(sug.kind, sug.origin), doc.uri, sug.score)
        return EditAnswer(sug, edits, doc.text, doc.version, doc.uri)

    async def infill_prompt(self, key: str, prompt: FimPrompt, max_tokens: int,
                            on_step: StepCallback | None = None) -> Suggestion | None:
        """A FIM prompt the client built itself (HTTP front end): same worker, gate and feedback. The
        suggestion comes back even when the gate hides it (``show`` False: the front end sends nothing).
        ``on_step``: called on the worker thread after each denoising step."""
        settings = msgspec.structs.replace(self.settings, max_tokens=max_tokens)  # the client's, capped by it
        return await self._fim(fim_request(key, prompt), prompt, key, settings, on_step)

    async def rewrite_prompt(self, key: str, prompt: EditPrompt,
                             on_step: StepCallback | None = None) -> EditAnswer | None:
        """An edit prompt the client built itself (HTTP front end)."""
        return await self._edit(*edit_request(key, prompt), key, on_step)

    async def engine_call(self, key: str, prompt: FimPrompt | EditPrompt, max_tokens: int = 64,
                          single_line: bool = False) -> GenerateResult | None:
        """A prompt another edit-server built (its remote backend: ``/v1/engine/complete``): the engine's
        own result through the same worker (queue, batching, supersede by ``key``, abort on cancel) — no
        gate, no feedback: the caller's decide. None: superseded or cancelled."""
        if isinstance(prompt, FimPrompt):
            settings = msgspec.structs.replace(self.settings, max_tokens=max_tokens)
            job = Job(key, fim_request(key, prompt), settings, prompt, single_line=single_line)
        else:
            req, built = edit_request(key, prompt)
            one = msgspec.structs.replace(self.settings.next_edit, candidates=1)  # the caller gets one result
            job = Job(key, req, msgspec.structs.replace(self.settings, next_edit=one), built, gated=False)
        out = await self._run(job)
        return out.result if out is not None else None

    async def _fim(self, req: FimRequest, built: Built | None, uri: str,
                   settings: Settings | None = None, on_step: StepCallback | None = None) -> Suggestion | None:
        """The suggestion, shown or hidden by the gate (``show``); None when there is nothing at all."""
        settings = settings or self.settings
        out = await self._run(Job(uri, req, settings, built, on_step=on_step))
        if out is None:
            return None
        sug = fim_result(req, out.text, out.confidences, settings, out.reward,
                         max_lines=max_lines(settings, self.worker.engine),
                         model=model_thresholds(self.worker.info))
        if sug is None:
            self._report(Suggestion("", "fim", "", 0, 0, 0.0, False, EMPTY))
            return None
        self._offer(sug, out, uri, out.built)
        return sug

    async def _edit(self, req: EditRequest, built: EditBuilt | None, uri: str,
                    on_step: StepCallback | None = None) -> EditAnswer | None:
        """The edit, shown or hidden by the gate (``suggestion.show``); None when nothing changes."""
        out = await self._run(Job(uri, req, self.settings, built, on_step=on_step))
        if out is None:
            return None
        assert isinstance(out.built, EditBuilt)
        cands, outcomes = edit_candidates(req, out, self.settings)
        model = {**model_thresholds(self.worker.info), **nextedit.thresholds(self.settings)}
        i, sug, edits = edit_results(req, out.built, cands, self.settings, model)
        if sug is None:
            return None
        sug.jump = cands[i].span is not None
        self._offer(sug, outcomes[i], uri, out.built.prompt)
        return EditAnswer(sug, edits, req.text, req.version)

    def _offer(self, sug: Suggestion, out: Outcome, uri: str, prompt: Built | EditPrompt) -> None:
        """Either kind, after selection: reported (status, hidden reason), sized, and offered to feedback
        when shown."""
        self._report(sug)
        r = out.result
        sug.prompt_tokens, sug.completion_tokens, sug.finish_reason = r.prompt_tokens, len(r.tokens), r.finish_reason
        if sug.show:
            if sug.kind == "fim":
                self.feedback.typed_over(uri, reason="replaced", kind="fim")  # the shown completion replaced
            # stored under the gate's kind (``edit:repeat`` for the rule's candidate): `align gate --feedback`
            # then calibrates each source apart, as it does from eval runs
            self.feedback.offered(sug.id, gate_kind(sug.kind, sug.origin), uri, sug.score, prompt=prompt,
                                  completion=out.text, shown_text=sug.text)


def edit_candidates(req: EditRequest, out: Outcome, settings: Settings) -> tuple[list[Candidate], list[Outcome]]:
    """A next edit's candidates — the model's rewrite, its sampled alternatives (``nextEdit.candidates``),
    the model-free rules' (the repeated last edit, its changes on look-alike lines, the finished move, the
    superseded import: ``nextEdit.repeatEdit`` / ``analogEdit`` / ``moveEdit`` / ``importEdit``) — and the outcome each is offered to feedback as."""
    assert isinstance(out.built, EditBuilt)
    cands = [Candidate(out.text, edit_scored(out.result), out.reward)]
    outcomes = [out]
    for r, reward in out.alternatives:
        cands.append(Candidate(r.text, edit_scored(r), reward, "sampled"))
        outcomes.append(Outcome(out.built, r, out.batch, reward))
    for rep in nextedit.rule_candidates(req, out.built, settings):
        cands.append(rep)
        outcomes.append(Outcome(out.built, GenerateResult(rep.new, [], [], 0, 0, out.result.prompt_tokens, 0,
                                                          "end"), out.batch))
    return cands, outcomes


def edit_scored(r: GenerateResult) -> list[float]:
    """The confidences a rewrite is gated on: its changed tokens' (``GenerateResult.changed``: the copied
    rest of the region says nothing about the edit), else — an engine that cannot tell — all of them."""
    return list(r.changed) if r.changed else list(r.confidences)


def fim_request(key: str, prompt: FimPrompt) -> FimRequest:
    """The request of a FIM prompt a client built itself (the cursor between prefix and suffix)."""
    return FimRequest(key, prompt.path, prompt.prefix + prompt.suffix, 0, len(prompt.prefix), True,
                      from_editor=False)


def edit_request(key: str, prompt: EditPrompt) -> tuple[EditRequest, EditBuilt]:
    """The request of an edit prompt a client built itself, and the region it names."""
    start = len(prompt.before)
    text = prompt.before + prompt.region + prompt.after
    return EditRequest(key, prompt.path, text, 0, start + prompt.cursor), EditBuilt(prompt, start,
                                                                                   start + len(prompt.region))
