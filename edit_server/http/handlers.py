"""Zed's ``/v1/completions`` (edit_server/http/zed.py parses the prompt formats), free of aiohttp; the shared
pieces (:class:`~edit_server.http.common.Ctx`, replies, guards) are in common.py, the Mercury routes in
handlers_mercury.py. Every handler goes through the one :class:`~edit_server.serving.pipeline.Pipeline` (worker,
gate, feedback); the supersede key carries the user, so two people editing a file with the same path never
cancel each other.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from edit_server.http.common import (
    Ctx,
    Reply,
    Stream,
    bad_prompt,
    doc_key,
    error,
    finish_reason,
    max_tokens,
    new_id,
    not_ready,
    too_long,
    usage,
)
from edit_server.http.handlers_mercury import fim
from edit_server.http.zed import PromptError, apply_stops, edit_reply, parse_prompt, parse_request
from engine.templates import FimPrompt

log = logging.getLogger(__name__)


# ---- Zed: /v1/completions ----------------------------------------------------------------------------
async def completions(ctx: Ctx, body: Any) -> Reply | Stream:
    """Zed's ``open_ai_compatible_api`` request; a body with ``suffix`` is an OpenAI-style FIM request
    (Continue's Inception provider posts those here) and is answered like ``/v1/fim/completions``."""
    if isinstance(body, dict) and "suffix" in body:
        return await fim(ctx, body)
    try:
        req = parse_request(body)
        zp = parse_prompt(req.prompt)
    except PromptError as e:
        return bad_prompt(e)
    if (r := await not_ready(ctx)) or (r := await too_long(ctx, req.prompt)):
        return r
    p = ctx.pipeline
    p0 = zp.prompt
    key = doc_key(ctx, zp.format, p0.path, p0.prefix if isinstance(p0, FimPrompt) else p0.before + p0.region)
    started = time.perf_counter()
    stopped = False
    try:
        if isinstance(zp.prompt, FimPrompt):
            sug = await p.infill_prompt(key, zp.prompt, max_tokens(ctx, req.max_tokens))
            shown = sug is not None and sug.show
            text, stopped = apply_stops(sug.text if sug is not None and shown else "", list(req.stop))
        else:
            ans = await p.rewrite_prompt(key, zp.prompt)
            sug = ans.suggestion if ans is not None else None
            shown = sug is not None and sug.show
            text = edit_reply(zp, sug.text if sug is not None and shown else None)
    except Exception as e:  # engine failure: report it, keep serving (details in the log)
        log.error("engine failed on a %s request: %s", zp.format, e)
        return error(500, str(e), "server_error")
    log.info("%s: %d chars in %.0f ms (%s)", zp.format, len(text), (time.perf_counter() - started) * 1000,
             "shown" if shown else "hidden")
    u = usage(sug)
    return Reply(200, {
        "id": new_id("cmpl"), "object": "text_completion", "created": int(time.time()),
        "model": ctx.model(req.model),
        "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish_reason(sug, stopped)}],
        "usage": {"prompt_tokens": u[0], "completion_tokens": u[1], "total_tokens": sum(u)},
    })
