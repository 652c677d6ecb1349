"""What every HTTP route shares, free of aiohttp: a handler takes a :class:`Ctx` and the parsed JSON body and
returns a :class:`Reply` (a JSON answer) or a :class:`Stream` (server-sent events); app.py does the wire.
Error replies, readiness and size guards, ids, usage and the supersede key. The routes: handlers.py (Zed
``/v1/completions``), handlers_mercury.py (Mercury Edit), handlers_engine.py (``/v1/engine/complete``).
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from edit_server.core.requests import Suggestion
from edit_server.core.settings import Settings
from edit_server.http.zed import SETTING, SUPPORTED, UnsupportedFormat
from edit_server.serving.pipeline import Pipeline
from engine.types import EngineInfo


@dataclass
class Ctx:
    """One request's view of the server: the pipeline, who is asking, the app's model state."""

    pipeline: Pipeline
    user: str = "anonymous"
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def settings(self) -> Settings:
        return self.pipeline.settings

    def model(self, asked: str) -> str:
        return asked or EngineInfo.of(getattr(self.pipeline.worker.engine, "info", None)).model or "edit-server"


@dataclass
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] | None = None


@dataclass
class Stream:
    """Server-sent events: each dict is one ``data: {json}`` event; app.py ends with ``data: [DONE]``."""

    events: AsyncIterator[dict[str, Any]]


def error(status: int, message: str, kind: str = "invalid_request_error", headers: dict[str, str] | None = None,
          **extra: Any) -> Reply:
    return Reply(status, {"error": {"message": message, "type": kind, **extra}}, headers)


def bad_prompt(e: Exception) -> Reply:
    """A 400 for a malformed body; an unsupported Zed format names the supported ones and the setting."""
    if isinstance(e, UnsupportedFormat):
        return error(400, str(e), code="unsupported_prompt_format", param="prompt", detected=e.detected,
                     supported_formats=list(SUPPORTED), setting=SETTING)
    return error(400, str(e))


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def finish_reason(sug: Suggestion | None, stopped: bool = False) -> str:
    return "length" if sug is not None and sug.finish_reason == "length" and not stopped else "stop"


def usage(sug: Suggestion | None) -> tuple[int, int]:
    return (sug.prompt_tokens, sug.completion_tokens) if sug is not None else (0, 0)


async def not_ready(ctx: Ctx) -> Reply | None:
    """503 + Retry-After while the model loads (waits up to 2 s for it first)."""
    p = ctx.pipeline
    if p.ready or await asyncio.to_thread(p.worker.ready.wait, 2.0):
        return None
    return error(503, f"model not ready ({ctx.state.get('message', 'loading')})", "server_error",
                 {"Retry-After": "2"})


def _too_long(p: Pipeline, prompt: str) -> str | None:
    limit = p.settings.http.max_prompt_tokens
    if len(prompt) > 16 * limit:  # more characters than any tokenizer turns into `limit` tokens
        return f"prompt over {limit} tokens (settings http.maxPromptTokens)"
    tok = getattr(p.worker.engine, "tokenizer", None)
    if tok is not None and len(prompt) > limit and len(tok.encode(prompt)) > limit:
        return f"prompt over {limit} tokens (settings http.maxPromptTokens)"
    return None


async def too_long(ctx: Ctx, text: str) -> Reply | None:
    """413 when ``text`` is over ``http.maxPromptTokens`` (counted off the event loop)."""
    problem = await asyncio.get_running_loop().run_in_executor(None, _too_long, ctx.pipeline, text)
    return error(413, problem) if problem else None


def doc_key(ctx: Ctx, kind: str, path: str, text: str) -> str:
    """The supersede / prefix-cache key of a request: the user, the kind and the document — its path, or
    for clients that send none (FIM bodies) a hash of the document's first 256 characters — so a newer
    request aborts only the same user's older one for the same document."""
    doc = path or "#" + hashlib.sha1(text[:256].encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"http:{ctx.user}:{kind}:{doc}"


def max_tokens(ctx: Ctx, asked: int | None) -> int:
    return min(asked or ctx.settings.max_tokens, ctx.settings.http.max_output_tokens)
