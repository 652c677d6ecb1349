"""The LSP server (pygls): handlers, supersede/cancel, status. The only pygls user besides convert.py.

Rule: handlers run on the event loop and only parse, update documents/history and schedule; context
building and generation run on the engine worker thread (worker.py), awaited without blocking the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import JsonRPCNotification, JsonRPCRequestMessage, LanguageServerProtocol, lsp_method
from pygls.uris import to_fs_path

from edit_server import __version__
from edit_server.core import pipeline
from edit_server.core.documents import DocumentStore
from edit_server.core.history import EditHistory
from edit_server.core.settings import Settings, resolve
from edit_server.core.suggest_cache import SuggestCache
from edit_server.core.worker import EngineWorker, Job
from edit_server.lsp import convert
from edit_server.selectivity.feedback import FeedbackStore

log = logging.getLogger(__name__)

INLINE_EDIT = "textDocument/copilotInlineEdit"
DID_SHOW_COMPLETION = "textDocument/didShowCompletion"
DID_PARTIAL_ACCEPT = "textDocument/didPartiallyAcceptCompletion"
DID_SHOW_INLINE_EDIT = "textDocument/didShowInlineEdit"
STATUS = "$/editServer/status"
COPILOT_STATUS = "didChangeStatus"
ACCEPT = "editServer.accept"
CLEAR_HISTORY = "editServer.clearHistory"
RAW_METHODS = {INLINE_EDIT, DID_SHOW_COMPLETION, DID_PARTIAL_ACCEPT, DID_SHOW_INLINE_EDIT}
_DROPPED = object()


class EditProtocol(LanguageServerProtocol):
    """Replies -32602 to requests whose params fail to parse (pygls drops them); raw params for custom
    methods; UTF-16 positions always (convert.py speaks UTF-16)."""

    def structure_message(self, data: dict[str, Any]) -> Any:
        if "jsonrpc" in data and data.get("method") in RAW_METHODS:
            if "id" in data:
                return JsonRPCRequestMessage(id=data["id"], method=data["method"], jsonrpc=data["jsonrpc"],
                                             params=data.get("params"))
            return JsonRPCNotification(method=data["method"], jsonrpc=data["jsonrpc"], params=data.get("params"))
        try:
            return super().structure_message(data)
        except JsonRpcException as e:
            if "id" in data and "method" in data:
                err = e if isinstance(e, JsonRpcInvalidParams) else JsonRpcInvalidParams()
                err.message = f"invalid params for {data['method']}"
                self._send_response(data["id"], error=err.to_response_error())
                return _DROPPED
            raise

    def handle_message(self, message: Any) -> None:
        if message is not _DROPPED:
            super().handle_message(message)

    @lsp_method(lsp.INITIALIZE)
    def lsp_initialize(self, params: lsp.InitializeParams):  # type: ignore[override]
        if params.capabilities.general is not None:
            params.capabilities.general.position_encodings = None  # -> UTF-16
        return (yield from super().lsp_initialize(params))


class EditServer(LanguageServer):
    def __init__(self, model: str | None = None, device: str | None = None) -> None:
        super().__init__("edit-server", __version__, protocol_cls=EditProtocol)
        self.cli_model, self.cli_device = model, device
        self.settings = Settings()
        self.docs = DocumentStore()
        self.history = EditHistory()
        self.cache = SuggestCache()
        self.feedback: FeedbackStore | None = None
        self.worker: EngineWorker | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loaded: tuple[str, str] | None = None
        self.generation: dict[tuple[str, str], int] = {}
        self.state = "loading"

    # -- status -----------------------------------------------------------------------------
    def status(self, state: str, message: str) -> None:
        """Thread-safe: report worker/model state to the client."""
        if self.loop is None:
            return
        self.loop.call_soon_threadsafe(self._status, state, message)

    def _status(self, state: str, message: str) -> None:
        self.state = state
        self.protocol.notify(STATUS, {"state": state, "message": message})
        kind = {"error": "Error", "loading": "Normal", "busy": "Normal", "ready": "Normal"}[state]
        self.protocol.notify(COPILOT_STATUS, {"busy": state in ("loading", "busy"), "message": message,
                                              "kind": kind})

    def apply_settings(self, raw: Any, base: Settings) -> None:
        settings, bad = resolve(raw, base)
        inner = raw.get("editServer", raw) if isinstance(raw, dict) else {}
        inner = inner if isinstance(inner, dict) else {}
        if base == Settings():  # first resolution: command-line flags fill what the client did not set
            if self.cli_model and "model" not in inner:
                settings.model = self.cli_model
            if self.cli_device and "device" not in inner:
                settings.device = self.cli_device
        self.settings = settings
        self.cache.ttl_s = settings.suggestion_ttl_s
        if bad:
            self.window_show_message(lsp.ShowMessageParams(
                type=lsp.MessageType.Warning,
                message=f"edit-server: invalid setting(s) {', '.join(bad)}; using defaults for them"))
        if self.worker is not None:
            self.worker.set_settings(settings)
            want = (settings.model, settings.device)
            if want != self.loaded:
                self.loaded = want
                self.worker.load(settings.model, settings.device, settings)

    def snapshot_history(self, path: str, text: str, offset: int) -> list:
        return self.history.recent(self.settings.history_size, now=time.monotonic(),
                                   cursor=(path, text.count("\n", 0, offset)))


def _path(uri: str) -> str:
    return to_fs_path(uri) or ""


def build(model: str | None = None, device: str | None = None) -> EditServer:
    ls = EditServer(model, device)

    @ls.feature(lsp.INITIALIZE)
    def initialize(ls: EditServer, params: lsp.InitializeParams) -> None:
        ls.loop = asyncio.get_running_loop() if _has_loop() else None
        roots = [Path(p) for f in (params.workspace_folders or []) if (p := _path(f.uri))]
        if not roots and params.root_uri:
            roots = [Path(_path(params.root_uri))]
        ls.worker = EngineWorker(ls.status, roots)
        raw = params.initialization_options
        ls.apply_settings(raw, Settings())
        try:
            ls.feedback = FeedbackStore(ls.settings.feedback_db, ls.settings.suggestion_ttl_s)
        except Exception as e:  # e.g. a read-only data dir: keep serving, don't persist feedback
            log.warning("feedback store unavailable (%s); keeping signals in memory", e)
            ls.feedback = FeedbackStore(":memory:", ls.settings.suggestion_ttl_s)

    @ls.feature(lsp.SHUTDOWN)
    def shutdown(ls: EditServer, *_: Any) -> None:
        if ls.worker is not None:
            ls.worker.stop()
        if ls.feedback is not None:
            ls.feedback.expire(now=float("inf"))

    @ls.feature(lsp.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: EditServer, params: lsp.DidChangeConfigurationParams) -> None:
        ls.apply_settings(params.settings, ls.settings)

    @ls.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: EditServer, params: lsp.DidOpenTextDocumentParams) -> None:
        d = params.text_document
        ls.docs.open(d.uri, _path(d.uri), d.text, d.version, d.language_id)

    @ls.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: EditServer, params: lsp.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        doc = ls.docs.get(uri)
        if doc is None:
            return
        now = time.monotonic()
        for ch in params.content_changes:
            if isinstance(ch, lsp.TextDocumentContentChangePartial):
                a, b = convert.range_to_offsets(doc.text, ch.range)
                ev = ls.docs.apply(uri, a, b, ch.text, now)
            else:
                ev = ls.docs.replace_all(uri, ch.text, now)
            ls.history.record(ev)
        ls.docs.set_version(uri, params.text_document.version)
        if ls.worker is not None:  # typing supersedes in-flight edit predictions for this document
            ls.worker.abort_document(uri)
        if ls.feedback is not None:
            valid = ls.cache.still_valid(uri, doc.text)
            entry = ls.cache.peek(uri)
            ls.feedback.typed_over(uri, {entry.id} if valid and entry else set())
            ls.feedback.expire()
            if not valid:
                ls.cache.drop(uri)

    @ls.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: EditServer, params: lsp.DidCloseTextDocumentParams) -> None:
        doc = ls.docs.get(params.text_document.uri)
        ls.docs.close(params.text_document.uri)
        ls.cache.drop(params.text_document.uri)
        if doc is not None and doc.path and ls.worker is not None:
            ls.worker.close_document(doc.path)

    @ls.feature(lsp.TEXT_DOCUMENT_INLINE_COMPLETION, lsp.InlineCompletionOptions())
    async def inline_completion(ls: EditServer, params: lsp.InlineCompletionParams
                                ) -> lsp.InlineCompletionList | None:
        return await _inline_completion(ls, params)

    @ls.feature(INLINE_EDIT)
    async def inline_edit(ls: EditServer, params: Any) -> dict[str, Any]:
        return await _inline_edit(ls, _validate_inline_edit(params))

    @ls.command(ACCEPT)
    def accept(ls: EditServer, item: Any = None) -> None:
        if isinstance(item, dict) and isinstance(item.get("id"), str) and ls.feedback is not None:
            ls.feedback.accepted(item["id"], str(item.get("kind", "")), str(item.get("uri", "")),
                                 float(item.get("score", 0.0) or 0.0))
            if item.get("kind") == "fim":
                ls.cache.drop(str(item.get("uri", "")))

    @ls.command(CLEAR_HISTORY)
    def clear_history(ls: EditServer, *_: Any) -> None:
        """Forget the edit history and cached suggestions (evals isolate cases with this)."""
        ls.history.clear()
        ls.cache = SuggestCache(ttl_s=ls.settings.suggestion_ttl_s)

    @ls.feature(DID_SHOW_COMPLETION)
    def did_show_completion(ls: EditServer, params: Any) -> None:
        if (sid := _item_id(params)) and ls.feedback is not None:
            ls.feedback.shown(sid)

    @ls.feature(DID_SHOW_INLINE_EDIT)
    def did_show_inline_edit(ls: EditServer, params: Any) -> None:
        if (sid := _item_id(params)) and ls.feedback is not None:
            ls.feedback.shown(sid)

    @ls.feature(DID_PARTIAL_ACCEPT)
    def did_partial_accept(ls: EditServer, params: Any) -> None:
        if (sid := _item_id(params)) and ls.feedback is not None:
            ls.feedback.shown(sid)
            ls.feedback.partial(sid, int(params.get("acceptedLength", 0) or 0))

    return ls


def _has_loop() -> bool:
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        return False


def _item_id(params: Any) -> str | None:
    """The suggestion id inside a didShow*/didPartiallyAccept item's accept command."""
    try:
        item = params["item"]
        args = item["command"]["arguments"]
        return str(args[0]["id"])
    except (KeyError, IndexError, TypeError):
        return None


def _validate_inline_edit(params: Any) -> tuple[str, int | None, int, int]:
    """(uri, version, line, character) of a copilotInlineEdit request, or a -32602 error."""
    try:
        td, pos = params["textDocument"], params["position"]
        uri, line, ch = td["uri"], pos["line"], pos["character"]
        version = td.get("version")
        ok = (isinstance(uri, str) and isinstance(line, int) and isinstance(ch, int) and line >= 0
              and ch >= 0 and (version is None or isinstance(version, int)))
    except (KeyError, TypeError):
        ok = False
    if not ok:
        raise JsonRpcInvalidParams.of(ValueError(
            "copilotInlineEdit expects {textDocument: {uri, version}, position: {line, character}}"))
    return uri, version, line, ch


async def _debounced(ls: EditServer, key: tuple[str, str]) -> bool:
    """Wait debounceMs; False if a newer request for the same document/kind arrived meanwhile."""
    gen = ls.generation[key] = ls.generation.get(key, 0) + 1
    if ls.settings.debounce_ms:
        await asyncio.sleep(ls.settings.debounce_ms / 1000)
    return ls.generation.get(key) == gen


async def _await_job(ls: EditServer, job: Job) -> Any:
    assert ls.worker is not None
    fut = ls.worker.submit(job)
    try:
        return await asyncio.wrap_future(fut)
    except asyncio.CancelledError:  # $/cancelRequest: stop the engine between denoising steps
        job.abort.abort()
        raise
    except Exception as e:  # engine failure: no suggestion + a status notification, never a crash
        log.exception("generation failed")
        ls._status("error", f"generation failed: {e}")
        return None


async def _inline_completion(ls: EditServer, params: lsp.InlineCompletionParams
                             ) -> lsp.InlineCompletionList | None:
    uri = params.text_document.uri
    doc = ls.docs.get(uri)
    if doc is None or ls.worker is None:
        return None
    text, version = doc.text, doc.version
    offset = convert.position_to_offset(text, params.position.line, params.position.character)
    hit = ls.cache.lookup(uri, text, offset)
    if hit is not None:  # the user typed what we predicted: serve the rest, no model call
        entry, rest = hit
        sug = pipeline.Suggestion(entry.id, "fim", rest, offset, offset, entry.score, True)
        return lsp.InlineCompletionList(items=[convert.inline_item(text, uri, version, offset, sug)])
    if not ls.worker.ready.is_set():
        return None  # model still loading (or failed): answer empty, quickly
    invoked = params.context.trigger_kind == lsp.InlineCompletionTriggerKind.Invoked
    req = pipeline.FimRequest(uri, doc.path, text, version, offset, invoked,
                              ls.snapshot_history(doc.path, text, offset))
    if pipeline.skip_reason(req, ls.settings) is not None:
        return None
    if not await _debounced(ls, (uri, "fim")):
        return None
    out = await _await_job(ls, Job("fim", uri, req, ls.settings))
    if out is None:
        return None
    sug = pipeline.fim_result(req, out.built, out.text, out.confidences, ls.settings)
    if sug is None or not sug.show:
        return None
    ls.cache.put(uri, sug.id, sug.text, text, offset, sug.score)
    if ls.feedback is not None:  # a shown suggestion replaced by a new one was dismissed
        ls.feedback.typed_over(uri, reason="replaced")
        ls.feedback.offered(sug.id, "fim", uri, sug.score)
    now = ls.docs.get(uri)
    if now is None:
        return None
    if now.version != version:  # stale: re-base onto what the user typed since, or drop
        cur = len(now.text) - (len(text) - offset)
        hit = ls.cache.lookup(uri, now.text, cur)
        if hit is None:
            return None
        sug = pipeline.Suggestion(sug.id, "fim", hit[1], cur, cur, sug.score, True)
        return lsp.InlineCompletionList(items=[convert.inline_item(now.text, uri, now.version, cur, sug)])
    return lsp.InlineCompletionList(items=[convert.inline_item(text, uri, version, offset, sug)])


async def _inline_edit(ls: EditServer, args: tuple[str, int | None, int, int]) -> dict[str, Any]:
    uri, _version, line, ch = args
    doc = ls.docs.get(uri)
    if doc is None or ls.worker is None or not ls.worker.ready.is_set() or not ls.settings.next_edit.enabled:
        return {"edits": []}
    text, version = doc.text, doc.version
    offset = convert.position_to_offset(text, line, ch)
    req = pipeline.EditRequest(uri, doc.path, text, version, offset, ls.snapshot_history(doc.path, text, offset))
    if not await _debounced(ls, (uri, "edit")):
        return {"edits": []}
    out = await _await_job(ls, Job("edit", uri, req, ls.settings))
    if out is None:
        return {"edits": []}
    sug, edits = pipeline.edit_result(req, out.built, out.text, out.confidences, ls.settings)
    now = ls.docs.get(uri)
    if sug is None or not sug.show or now is None or now.version != version:
        return {"edits": []}  # nothing to change, hidden by the gate, or the document moved on
    if ls.feedback is not None:
        ls.feedback.offered(sug.id, "edit", uri, sug.score)
    return {"edits": [convert.inline_edit(text, uri, version, e, sug.id, sug.score) for e in edits]}
