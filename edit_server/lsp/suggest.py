"""Suggestion requests: inline completion, completion items (for clients without inline completion) and
``textDocument/copilotInlineEdit`` → the pipeline → LSP results. Engine failures give an empty answer and
an ``error`` status, never a crash."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcInvalidParams

from edit_server.core.requests import InlineAnswer
from edit_server.lsp import convert

if TYPE_CHECKING:
    from edit_server.serving.pipeline import Pipeline

log = logging.getLogger("edit_server.lsp.server")


class Host(Protocol):
    """What the handlers need of the server (``lsp/server.py``'s ``EditServer`` is one): its pipeline, and
    the status notification, sent from the event loop."""

    @property
    def pipeline(self) -> Pipeline | None: ...

    def status_now(self, state: str, message: str) -> None: ...


def validate_inline_edit(params: Any, method: str = "copilotInlineEdit") -> tuple[str, int | None, int, int]:
    """(uri, version, line, character) of a copilotInlineEdit request (or another ``method`` with the same
    params), or a -32602 error."""
    try:
        td, pos = params["textDocument"], params["position"]
        uri, line, ch = td["uri"], pos["line"], pos["character"]
        version = td.get("version")
        ok = (isinstance(uri, str) and isinstance(line, int) and isinstance(ch, int) and line >= 0
              and ch >= 0 and (version is None or isinstance(version, int)))
    except (KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        raise JsonRpcInvalidParams.of(ValueError(
            f"{method} expects {{textDocument: {{uri, version}}, position: {{line, character}}}}"))
    return uri, version, line, ch


def engine_failed(ls: Host, e: Exception) -> None:
    """Engine failure: no suggestion + a status notification, never a crash (details in the log)."""
    log.error("generation failed: %s", e)
    ls.status_now("error", f"generation failed: {e}")


async def fim_answer(ls: Host, params: Any, invoked: bool) -> InlineAnswer | None:
    """The pipeline's FIM suggestion at ``params``' position (inline completion and completion)."""
    p = ls.pipeline
    doc = p.docs.get(params.text_document.uri) if p is not None else None
    if p is None or doc is None:
        return None
    offset = convert.position_to_offset(doc.text, params.position.line, params.position.character, doc.line_starts())
    try:
        return await p.inline_completion(doc.uri, offset, invoked)
    except Exception as e:
        engine_failed(ls, e)
        return None


async def inline_completion(ls: Host, params: lsp.InlineCompletionParams
                             ) -> lsp.InlineCompletionList | None:
    ans = await fim_answer(ls, params, params.context.trigger_kind == lsp.InlineCompletionTriggerKind.Invoked)
    if ans is None:
        return None
    item = convert.inline_item(ans.text, params.text_document.uri, ans.version, ans.suggestion.start,
                               ans.suggestion)
    return lsp.InlineCompletionList(items=[item])


async def inline_edit(ls: Host, args: tuple[str, int | None, int, int]) -> dict[str, Any]:
    uri, _version, line, ch = args
    p = ls.pipeline
    doc = p.docs.get(uri) if p is not None else None
    if p is None or doc is None:
        return {"edits": []}
    offset = convert.position_to_offset(doc.text, line, ch, doc.line_starts())
    try:
        ans = await p.next_edit(uri, offset)
    except Exception as e:
        engine_failed(ls, e)
        return {"edits": []}
    if ans is None:
        return {"edits": []}
    s = ans.suggestion
    return {"edits": [convert.inline_edit(ans.text, ans.uri or uri, ans.version, e, s.id, s.score, s.origin, s.jump)
                      for e in ans.edits]}


async def completion(ls: Host, params: lsp.CompletionParams) -> lsp.CompletionList | None:
    """The FIM suggestion as one completion item (`convert.completion_item`); incomplete, so clients ask
    again as the user types (answered from the suggestion cache while they type what it predicted)."""
    invoked = params.context is None or params.context.trigger_kind == lsp.CompletionTriggerKind.Invoked
    ans = await fim_answer(ls, params, invoked)
    if ans is None:
        return None
    item = convert.completion_item(ans.text, params.text_document.uri, ans.version, ans.suggestion.start,
                                   ans.suggestion)
    return lsp.CompletionList(is_incomplete=True, items=[item])
