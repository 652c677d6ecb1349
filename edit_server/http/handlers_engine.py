"""``POST /v1/engine/complete``: the engine contract over HTTP, for another edit-server's remote backend
(``remote.kind: "edit-server"``, engine/remote/). Free of aiohttp, like the other handlers.

The caller built the prompt (its own context builder: exclusions and secret redaction applied there) and
keeps its own gate and feedback; this route runs the prompt through this server's worker — queue,
batching with every other client, supersede by ``key``, prefix KV cache, abort when the client
disconnects — and answers the engine's raw result with per-token confidences, for the caller's gate.

Request:  ``{"kind": "infill", "prompt": {prefix, suffix, path, history, sections, layout},
"maxTokens", "singleLine", "key"}`` or ``{"kind": "rewrite", "prompt": {before, region, after, cursor,
path, history, sections}, "key"}``.
Answer:   ``{"text", "tokens", "confidences", "steps", "forwards", "promptTokens", "cachedTokens",
"finishReason", "timings", "model"}`` (``finishReason: "aborted"``: superseded by a newer call with the
same key).
"""

from __future__ import annotations

import itertools
import logging
from typing import Annotated, Any, Literal

import msgspec

from edit_server.http.common import Ctx, Reply, error, max_tokens, not_ready, too_long
from engine.templates import EditPrompt, FimPrompt

log = logging.getLogger(__name__)
_anon = itertools.count()


class EngineBody(msgspec.Struct, rename="camel", kw_only=True, forbid_unknown_fields=False):
    kind: Literal["infill", "rewrite"]
    prompt: dict[str, Any]
    max_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    single_line: bool = False
    key: Annotated[str, msgspec.Meta(max_length=200)] = ""
    model: str = ""


def _prompt_text(p: FimPrompt | EditPrompt) -> str:
    body = p.prefix + p.suffix if isinstance(p, FimPrompt) else p.before + p.region + p.after
    return body + "".join(p.history) + "".join(s.path + s.text for s in p.sections)


async def complete(ctx: Ctx, body: Any) -> Reply:
    try:
        req = msgspec.convert(body, EngineBody)
        prompt: FimPrompt | EditPrompt = msgspec.convert(req.prompt, FimPrompt if req.kind == "infill" else EditPrompt)
        if isinstance(prompt, EditPrompt) and not 0 <= prompt.cursor <= len(prompt.region):
            raise msgspec.ValidationError("prompt.cursor is outside the region")
    except msgspec.ValidationError as e:
        return error(400, f"bad engine call: {e}")
    if (r := await not_ready(ctx)) or (r := await too_long(ctx, _prompt_text(prompt))):
        return r
    key = f"http:{ctx.user}:engine:{req.kind}:{req.key}" if req.key else f"http:{ctx.user}:engine:#{next(_anon)}"
    try:
        res = await ctx.pipeline.engine_call(key, prompt, max_tokens(ctx, req.max_tokens), req.single_line)
    except Exception as e:  # engine failure: a 500 (the caller falls back), details in the log
        log.error("engine failed on a remote %s call: %s", req.kind, e)
        return error(500, str(e), "server_error")
    if res is None:
        return Reply(200, {"text": "", "tokens": [], "confidences": [], "steps": 0, "forwards": 0,
                           "promptTokens": 0, "cachedTokens": 0, "finishReason": "aborted", "timings": {},
                           "model": ctx.model(req.model)})
    return Reply(200, {"text": res.text, "tokens": list(res.tokens), "confidences": list(res.confidences),
                       "steps": res.steps, "forwards": res.forwards, "promptTokens": res.prompt_tokens,
                       "cachedTokens": res.cached_tokens, "finishReason": res.finish_reason,
                       "timings": res.timings, "model": ctx.model(req.model)})
