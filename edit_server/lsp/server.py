"""The LSP front end (pygls): wire messages → :class:`edit_server.serving.pipeline.Pipeline` calls → LSP results.

Only this package imports pygls / lsprotocol. Handlers run on the event loop and only parse and call the
pipeline; context building and generation run on its engine worker thread, awaited without blocking.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Generator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pygls.exceptions import (
    JsonRpcException,
    JsonRpcInvalidParams,
    JsonRpcInvalidRequest,
    JsonRpcServerNotInitialized,
)
from pygls.lsp.server import LanguageServer
from pygls.protocol import JsonRPCNotification, JsonRPCRequestMessage, LanguageServerProtocol, lsp_method

from edit_server import __version__
from edit_server.core.requests import Suggestion
from edit_server.core.settings import Settings, build_settings
from edit_server.lsp import convert, suggest, workspace
from edit_server.lsp.features import (
    declares_inline_completion,
    hidden_reason,
    lenient_initialize,
)
from edit_server.selectivity.thresholds import gate_kind
from edit_server.serving.pipeline import Pipeline

log = logging.getLogger(__name__)

INLINE_EDIT = "textDocument/copilotInlineEdit"
DID_SHOW_COMPLETION = "textDocument/didShowCompletion"
DID_PARTIAL_ACCEPT = "textDocument/didPartiallyAcceptCompletion"
DID_SHOW_INLINE_EDIT = "textDocument/didShowInlineEdit"
STATUS = "$/editServer/status"
CURSOR_REST = "$/editServer/cursorRest"  # client → server: where the cursor rests after a move (debounced)
COPILOT_STATUS = "didChangeStatus"
ACCEPT = "editServer.accept"
CLEAR_HISTORY = "editServer.clearHistory"
DOCUMENT_STATE = "editServer.documentState"
SETTLE = "editServer.settle"
RAW_METHODS = {INLINE_EDIT, DID_SHOW_COMPLETION, DID_PARTIAL_ACCEPT, DID_SHOW_INLINE_EDIT, CURSOR_REST}
_DROPPED = object()


async def _stored(done: Future[Any]) -> None:
    """Wait for the feedback store's write of an accept (a failure is logged by the store; the client
    still gets its answer)."""
    try:
        await asyncio.wrap_future(done)
    except Exception as e:
        log.warning("accept not stored: %s", e)


def _text_problem(method: str, params: Any) -> str | None:
    """Why a didOpen / didChange would desync the document (a non-string text is never coerced)."""
    try:
        if method == lsp.TEXT_DOCUMENT_DID_OPEN:
            td = params["textDocument"]
            ok = isinstance(td["text"], str) and isinstance(td["uri"], str) and isinstance(td["version"], int)
            return None if ok else "textDocument.text / uri / version have the wrong type"
        changes = params["contentChanges"]
        version = params["textDocument"]["version"]
        if not isinstance(changes, list) or not isinstance(version, int) or isinstance(version, bool):
            return "contentChanges must be a list and textDocument.version an integer"
        if not all(isinstance(c, dict) and isinstance(c.get("text"), str) for c in changes):
            return "every content change needs a string text"
    except (KeyError, TypeError):
        return "missing textDocument / contentChanges"
    return None


class EditProtocol(LanguageServerProtocol):
    """pygls's protocol with the rules a hostile or careless client needs: -32602 for requests whose
    params fail to parse (pygls drops them); raw params for custom methods; didOpen/didChange with a
    non-string text rejected (the last good text is kept); -32002 before ``initialize``, -32600 for a
    second ``initialize`` and for requests after ``shutdown``; ``exit`` → status 0 after ``shutdown``,
    else 1; no traceback in a reply's ``error.data`` (it goes to the log); UTF-16 positions always."""

    transport: Any = None  # edit_server.lsp.stdio.StdioServer, when serving
    client_inline = False  # the client declares textDocument.inlineCompletion: no completion items

    def structure_message(self, data: dict[str, Any]) -> Any:
        method = data.get("method") if isinstance(data, dict) else None
        if method == lsp.INITIALIZE and not self._server.initialized:  # a second one is refused anyway
            self.client_inline = declares_inline_completion(data)
            data = lenient_initialize(data, self._converter)
        if "jsonrpc" in data and method in RAW_METHODS:
            if "id" in data:
                return JsonRPCRequestMessage(id=data["id"], method=data["method"], jsonrpc=data["jsonrpc"],
                                             params=data.get("params"))
            return JsonRPCNotification(method=data["method"], jsonrpc=data["jsonrpc"], params=data.get("params"))
        if method in (lsp.TEXT_DOCUMENT_DID_OPEN, lsp.TEXT_DOCUMENT_DID_CHANGE) and "id" not in data:
            problem = _text_problem(method, data.get("params"))
            if problem:
                log.warning("%s rejected: %s", method, problem)
                self.notify(lsp.WINDOW_LOG_MESSAGE, lsp.LogMessageParams(
                    type=lsp.MessageType.Error, message=f"edit-server: {method} rejected (invalid params: "
                                                        f"{problem}); the document keeps its last good text"))
                return _DROPPED
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
        if message is _DROPPED:
            return
        method = getattr(message, "method", None)
        is_request = method is not None and getattr(message, "id", None) is not None
        if is_request and self._shutdown and method != lsp.EXIT:
            self._send_response(message.id, error=JsonRpcInvalidRequest(
                f"{method}: the server is shutting down").to_response_error())
            return
        if is_request and method != lsp.INITIALIZE and not self._server.initialized:  # shutdown too (LSP)
            self._send_response(message.id, error=JsonRpcServerNotInitialized(
                f"{method}: initialize first").to_response_error())
            return
        super().handle_message(message)

    def _send_response(self, msg_id: Any, result: Any = None, error: Any = None) -> None:
        if error is not None and getattr(error, "data", None) is not None:
            log.debug("error data withheld from the client: %s", error.data)
            error.data = None
        super()._send_response(msg_id, result, error)

    @lsp_method(lsp.INITIALIZE)
    def lsp_initialize(self, params: lsp.InitializeParams):  # type: ignore[override]
        if self._server.initialized:
            raise JsonRpcInvalidRequest("initialize: the server is already initialized")
        if params.capabilities.general is not None:
            params.capabilities.general.position_encodings = None  # -> UTF-16
        result = yield from super().lsp_initialize(params)
        if self.client_inline:  # ghost text only: completion items would duplicate it (and its model calls)
            result.capabilities.completion_provider = None
        return result

    # Documents live in the pipeline's DocumentStore only: pygls's own workspace copy cost a second
    # copy of every text and a whole-document pass per keystroke (0.3 s on a 20 MB document).
    def _to_handler(self, method: str, params: Any):
        if (handler := self.fm.features.get(method)) is not None:
            yield handler, (params,), None

    @lsp_method(lsp.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: lsp.DidOpenTextDocumentParams):  # type: ignore[override]
        yield from self._to_handler(lsp.TEXT_DOCUMENT_DID_OPEN, params)

    @lsp_method(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: lsp.DidChangeTextDocumentParams):  # type: ignore[override]
        yield from self._to_handler(lsp.TEXT_DOCUMENT_DID_CHANGE, params)

    @lsp_method(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: lsp.DidCloseTextDocumentParams):  # type: ignore[override]
        yield from self._to_handler(lsp.TEXT_DOCUMENT_DID_CLOSE, params)

    @lsp_method(lsp.EXIT)
    def lsp_exit(self, *args: Any):  # type: ignore[override]
        code = 0 if self._shutdown else 1
        if self.transport is not None:
            self.transport.stop(code)
        else:
            raise SystemExit(code)
        yield from ()


class EditServer(LanguageServer):
    def __init__(self, cli: dict[str, Any] | None = None) -> None:
        super().__init__("edit-server", __version__, protocol_cls=EditProtocol)
        self.cli = dict(cli or {})
        self.settings = Settings()
        self.pipeline: Pipeline | None = None
        self.roots: list[Path] = []  # the workspace folders, as the client last told them
        self.initialized = False
        self._stopped = False
        self._download_token: str | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.state = "loading"
        self.message = ""
        self.hidden = ""  # why the last suggestion was not shown ("" = it was)

    # -- status -----------------------------------------------------------------------------
    def status(self, state: str, message: str) -> None:
        """Thread-safe: report worker/model state to the client."""
        if self.loop is None or self.loop.is_closed():  # not started, or shut down while the model loaded
            return
        try:
            self.loop.call_soon_threadsafe(self.status_now, state, message)
        except RuntimeError:  # closed between the check and the call: nobody is listening any more
            pass

    def status_now(self, state: str, message: str) -> None:
        """On the loop: the status notification (``$/editServer/status`` and Copilot's)."""
        self.state, self.message = state, message
        self.protocol.notify(STATUS, {"state": state, "message": message})
        kind = {"error": "Error", "degraded": "Warning"}.get(state, "Normal")
        self.protocol.notify(COPILOT_STATUS, {"busy": state in ("loading", "busy"), "message": message,
                                              "kind": kind})

    def suggested(self, sug: Suggestion) -> None:
        """On the loop, for every suggestion computed: the status line says why nothing shows."""
        hidden = hidden_reason(sug, self.settings)
        if hidden != self.hidden:
            self.hidden = hidden
            self.protocol.notify(STATUS, {"state": self.state, "message": self.message, "hidden": hidden})

    def progress(self, done: int, total: int, message: str) -> None:
        """Thread-safe: a model download's progress as LSP work-done progress (and a loading status)."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self._progress, done, total, message)

    def _progress(self, done: int, total: int, message: str) -> None:
        pct = int(100 * done / total) if total else 0
        caps = self.protocol.client_capabilities
        supported = bool(caps and caps.window and caps.window.work_done_progress)
        if supported and self._download_token is None and done < total:
            self._download_token = f"edit-server-download-{id(self)}"
            self.work_done_progress.create(self._download_token)
            self.work_done_progress.begin(self._download_token, lsp.WorkDoneProgressBegin(
                title="edit-server: downloading model", message=message, percentage=pct, cancellable=False))
        elif self._download_token is not None:
            if done >= total:
                self.work_done_progress.end(self._download_token, lsp.WorkDoneProgressEnd(message=message))
                self._download_token = None
            else:
                self.work_done_progress.report(self._download_token,
                                               lsp.WorkDoneProgressReport(message=message, percentage=pct))
        self.status_now("loading", f"{message} ({pct}%)")

    def stop(self) -> None:
        """shutdown / exit / signal / end of input: stop the engine, settle feedback (idempotent)."""
        if self.pipeline is not None and not self._stopped:
            self._stopped = True
            self.pipeline.stop()

    def serve(self, stdin: Any = None, stdout: Any = None) -> int:
        """Serve over binary streams (stdin/stdout by default); returns the process exit status."""
        from edit_server.lsp.stdio import StdioServer

        transport = StdioServer(self.protocol, lambda: self.settings.limits.max_message_bytes, self.stop)
        self.protocol.transport = transport  # type: ignore[attr-defined]
        return transport.run(stdin, stdout)

    def apply_settings(self, raw: Any, initial: bool = False) -> None:
        """initializationOptions (``initial``: the command line wins over them) or a later
        didChangeConfiguration (a deliberate change: it applies over the current settings)."""
        settings, bad = build_settings(raw, self.cli if initial else None, None if initial else self.settings)
        self.settings = settings
        if bad:
            log.warning("settings: %s", "; ".join(bad))
            self.window_show_message(lsp.ShowMessageParams(
                type=lsp.MessageType.Warning, message="edit-server settings: " + "; ".join(bad)))
        if self.pipeline is not None:
            self.pipeline.configure(settings)


def build(cli: dict[str, Any] | None = None) -> EditServer:
    """The LSP server; ``cli`` = settings given on the command line (camelCase keys; they win)."""
    ls = EditServer(cli)

    @ls.feature(lsp.INITIALIZE)
    def initialize(ls: EditServer, params: lsp.InitializeParams) -> None:
        ls.loop = asyncio.get_running_loop() if _has_loop() else None
        roots = [Path(p) for f in (params.workspace_folders or []) if (p := convert.uri_path(f.uri))]
        if not roots and params.root_uri:
            roots = [Path(convert.uri_path(params.root_uri))]
        ls.apply_settings(params.initialization_options, initial=True)
        ls.roots = roots
        ls.pipeline = Pipeline(ls.settings, ls.status, roots, on_progress=ls.progress,
                               on_suggestion=ls.suggested)
        ls.initialized = True

    workspace.register(ls)

    @ls.feature(lsp.SHUTDOWN)
    def shutdown(ls: EditServer, *_: Any) -> None:
        ls.stop()

    @ls.feature(lsp.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: EditServer, params: lsp.DidChangeConfigurationParams) -> None:
        ls.apply_settings(params.settings)

    @ls.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: EditServer, params: lsp.DidOpenTextDocumentParams) -> None:
        d = params.text_document
        if ls.pipeline is not None:
            ls.pipeline.open_document(d.uri, convert.uri_path(d.uri), d.text, d.version, d.language_id)

    @ls.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: EditServer, params: lsp.DidChangeTextDocumentParams) -> None:
        p = ls.pipeline
        uri = params.text_document.uri
        doc = p.docs.get(uri) if p is not None else None
        if p is None or doc is None:
            return
        for ch in params.content_changes:
            if isinstance(ch, lsp.TextDocumentContentChangePartial):
                a, b = convert.range_to_offsets(doc.text, ch.range, doc.line_starts())  # no rescan per keystroke
                p.change_document(uri, a, b, ch.text)
            else:
                p.replace_document(uri, ch.text)
        p.changed(uri, params.text_document.version)

    @ls.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: EditServer, params: lsp.DidCloseTextDocumentParams) -> None:
        if ls.pipeline is not None:
            ls.pipeline.close_document(params.text_document.uri)

    @ls.feature(lsp.TEXT_DOCUMENT_INLINE_COMPLETION, lsp.InlineCompletionOptions())
    async def inline_completion(ls: EditServer, params: lsp.InlineCompletionParams
                                ) -> lsp.InlineCompletionList | None:
        return await suggest.inline_completion(ls, params)

    @ls.feature(lsp.TEXT_DOCUMENT_COMPLETION, lsp.CompletionOptions(trigger_characters=list(".([{,=:")))
    async def completion(ls: EditServer, params: lsp.CompletionParams) -> lsp.CompletionList | None:
        """The FIM suggestion as a completion item, for clients without inline completion."""
        return None if ls.protocol.client_inline else await suggest.completion(ls, params)

    @ls.feature(INLINE_EDIT)
    async def inline_edit(ls: EditServer, params: Any) -> dict[str, Any]:
        return await suggest.inline_edit(ls, suggest.validate_inline_edit(params))

    @ls.command(ACCEPT)
    def accept(ls: EditServer, item: Any = None) -> Generator[Any, Any, None]:
        """Recorded the moment the message is read — a generator handler runs at once, where a coroutine
        would start only after the messages read with it: the didChange that applies the suggestion, sent
        right behind the accept, would otherwise count it typed over (rejected) first — and answered once
        the accept is on disk (the store's writer thread commits it)."""
        if isinstance(item, dict) and isinstance(item.get("id"), str) and ls.pipeline is not None:
            score = item.get("score", 0.0)
            origin = item.get("origin")
            kind = gate_kind(str(item.get("kind", "")), origin if isinstance(origin, str) else None)
            done = ls.pipeline.accepted(item["id"], kind, str(item.get("uri", "")),
                                        float(score) if isinstance(score, int | float) else 0.0)
            yield _stored, (done,), {}

    @ls.command(CLEAR_HISTORY)
    def clear_history(ls: EditServer, *_: Any) -> None:
        """Forget the edit history and cached suggestions (evals isolate cases with this)."""
        if ls.pipeline is not None:
            ls.pipeline.clear_history()

    @ls.command(SETTLE)
    async def settle(ls: EditServer, *_: Any) -> dict[str, bool]:
        """Answered once the server's queued work and its context indexing (a workspace folder just added)
        are done: ``{"settled": false}`` after two minutes. Eval clients time their requests after it."""
        if ls.pipeline is None:
            return {"settled": False}
        return {"settled": bool(await asyncio.wrap_future(ls.pipeline.settle()))}

    @ls.command(DOCUMENT_STATE)
    def document_state(ls: EditServer, item: Any = None) -> dict[str, Any] | None:
        """{version, length, sha256} of the server's copy of a document (UTF-8, surrogates passed
        through): a client can check that it and the server agree, without any text on the wire."""
        uri = item.get("uri") if isinstance(item, dict) else None
        doc = ls.pipeline.docs.get(uri) if ls.pipeline is not None and isinstance(uri, str) else None
        if doc is None:
            return None
        digest = hashlib.sha256(doc.text.encode("utf-8", "surrogatepass")).hexdigest()
        return {"version": doc.version, "length": convert.utf16_len(doc.text), "sha256": digest}

    @ls.feature(DID_SHOW_COMPLETION)
    def did_show_completion(ls: EditServer, params: Any) -> None:
        if (sid := _item_id(params)) and ls.pipeline is not None:
            ls.pipeline.shown(sid)

    @ls.feature(DID_SHOW_INLINE_EDIT)
    def did_show_inline_edit(ls: EditServer, params: Any) -> None:
        if (sid := _item_id(params)) and ls.pipeline is not None:
            ls.pipeline.shown(sid)

    @ls.feature(CURSOR_REST)
    def cursor_rest(ls: EditServer, params: Any) -> None:
        """The cursor rests here (``{textDocument: {uri}, position}``, sent by the plugins a moment after a
        move): the completion prompt there is prefilled while the server is idle. A notification: bad params
        are logged and dropped."""
        try:
            uri, _version, line, ch = suggest.validate_inline_edit(params, CURSOR_REST)
        except JsonRpcInvalidParams as e:
            log.warning("%s dropped: %s", CURSOR_REST, e)
            return
        doc = ls.pipeline.docs.get(uri) if ls.pipeline is not None else None
        if ls.pipeline is not None and doc is not None:
            ls.pipeline.cursor_rest(uri, convert.position_to_offset(doc.text, line, ch, doc.line_starts()))

    @ls.feature(DID_PARTIAL_ACCEPT)
    def did_partial_accept(ls: EditServer, params: Any) -> None:
        if (sid := _item_id(params)) and ls.pipeline is not None:
            n = params.get("acceptedLength", 0) if isinstance(params, dict) else 0
            ls.pipeline.partially_accepted(sid, n if isinstance(n, int) and not isinstance(n, bool) else 0)

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
