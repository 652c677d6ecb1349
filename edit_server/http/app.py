"""`edit-server http`: the HTTP front end (aiohttp) — Zed's ``open_ai_compatible_api`` provider.

``POST /v1/completions`` (and ``/completions``) takes ``{"model", "prompt", "max_tokens", "stop"}`` in
Zed's qwen FIM or zeta2 edit format (edit_server/http/zed.py parses them) and hands the prompt to the
same :class:`~edit_server.core.pipeline.Pipeline` the LSP server uses: one worker, one gate (calibrated
thresholds included), one settings struct, one feedback store. A newer request for the same file aborts
the older one; a client that disconnects cancels its generation. ``GET /health`` reports the model state.

Guards (settings ``http.*``): JSON bodies only (415), body and prompt-token limits (413), ``Host`` and
``Origin`` must be loopback or allow-listed (403: a web page cannot drive the server by DNS rebinding or
CSRF), a bounded queue (503 + ``Retry-After``), and with ``EDIT_SERVER_HTTP_TOKEN`` set a bearer token
compared in constant time (401).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from edit_server.core.pipeline import Pipeline
from edit_server.core.settings import Settings
from edit_server.http.zed import (
    CompletionRequest,
    PromptError,
    apply_stops,
    detect_format,
    parse_qwen,
    parse_request,
    parse_zeta2,
    zeta2_reply,
)
from engine.api import EngineAPI
from engine.templates import EditPrompt, FimPrompt

log = logging.getLogger(__name__)

TOKEN_ENV = "EDIT_SERVER_HTTP_TOKEN"
LOOPBACK = {"localhost", "127.0.0.1", "::1"}
PIPELINE: web.AppKey[Pipeline] = web.AppKey("pipeline", Pipeline)
STATE: web.AppKey[dict[str, Any]] = web.AppKey("state", dict)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind}}, status=status, headers=headers)


def _hostname(value: str) -> str:
    """'127.0.0.1:8377' / '[::1]:80' / 'example.com' -> host name without port or brackets."""
    return (urlsplit("//" + value).hostname or "").lower()


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    st = request.app[STATE]
    s: Settings = request.app[PIPELINE].settings
    allowed = LOOPBACK | {h.lower() for h in s.http.allowed_hosts} | st["bind_hosts"]
    if _hostname(request.headers.get("Host", "")) not in allowed:
        return _error(403, "Host not allowed (settings http.allowedHosts)", "permission_error")
    origin = request.headers.get("Origin")
    if origin is not None and origin not in s.http.allowed_origins and _hostname(
            urlsplit(origin).netloc) not in LOOPBACK:
        return _error(403, "Origin not allowed (settings http.allowedOrigins)", "permission_error")
    token = st["token"]
    if token and request.path != "/health":
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return _error(401, "missing or wrong bearer token", "authentication_error")
    if request.method == "POST":
        if request.content_type != "application/json":
            return _error(415, "the body must be JSON (Content-Type: application/json)", "invalid_request_error")
        if (request.content_length or 0) > s.http.max_body_bytes:
            return _error(413, f"body over {s.http.max_body_bytes} bytes (settings http.maxBodyBytes)",
                          "invalid_request_error")
        if st["inflight"] >= s.http.max_queue:
            return _error(503, "server busy", "server_error", {"Retry-After": "1"})
        st["inflight"] += 1
        try:
            return await handler(request)
        finally:
            st["inflight"] -= 1
    return await handler(request)


async def _health(request: web.Request) -> web.Response:
    p, st = request.app[PIPELINE], request.app[STATE]
    info = getattr(p.worker.engine, "info", {}) or {}
    return web.json_response({"status": "ok" if p.ready else st["state"], "state": st["state"],
                              "message": st["message"], "model": info},
                             dumps=lambda o: json.dumps(o, default=str))


async def _read(request: web.Request) -> tuple[CompletionRequest, FimPrompt | EditPrompt, str]:
    try:
        body = await request.json()
    except json.JSONDecodeError as e:
        raise PromptError(f"body is not valid JSON: {e}") from e
    req = parse_request(body)
    fmt = detect_format(req.prompt)
    return req, parse_qwen(req.prompt) if fmt == "qwen" else parse_zeta2(req.prompt), fmt


def _too_long(p: Pipeline, prompt: str) -> str | None:
    limit = p.settings.http.max_prompt_tokens
    if len(prompt) > 16 * limit:  # more characters than any tokenizer turns into `limit` tokens
        return f"prompt over {limit} tokens (settings http.maxPromptTokens)"
    tok = getattr(p.worker.engine, "tokenizer", None)
    if tok is not None and len(prompt) > limit and len(tok.encode(prompt)) > limit:
        return f"prompt over {limit} tokens (settings http.maxPromptTokens)"
    return None


async def _completions(request: web.Request) -> web.Response:
    p = request.app[PIPELINE]
    try:
        req, parsed, fmt = await _read(request)
    except (PromptError, UnicodeDecodeError) as e:
        return _error(400, str(e), "invalid_request_error")
    if not p.ready and not await asyncio.to_thread(p.worker.ready.wait, 2.0):
        return _error(503, f"model not ready ({request.app[STATE]['message']})", "server_error",
                      {"Retry-After": "2"})
    problem = await asyncio.get_running_loop().run_in_executor(None, _too_long, p, req.prompt)
    if problem:
        return _error(413, problem, "invalid_request_error")
    key = f"http:{fmt}:{parsed.path}"
    started = time.perf_counter()
    stopped, usage, finish = False, (0, 0), "stop"
    try:
        if isinstance(parsed, FimPrompt):
            sug = await p.infill_prompt(key, parsed, min(req.max_tokens, p.settings.http.max_output_tokens))
            shown = sug is not None and sug.show
            text, stopped = apply_stops(sug.text if sug is not None and shown else "", list(req.stop))
        else:
            ans = await p.rewrite_prompt(key, parsed)
            sug = ans.suggestion if ans is not None else None
            shown = sug is not None and sug.show
            text = zeta2_reply(sug.text if sug is not None and shown else parsed.region, parsed.region)
        if sug is not None:
            usage, finish = (sug.prompt_tokens, sug.completion_tokens), sug.finish_reason
    except Exception as e:  # engine failure: report it, keep serving (details in the log)
        log.error("engine failed on a %s request: %s", fmt, e)
        return _error(500, str(e), "server_error")
    log.info("%s: %d chars in %.0f ms (%s)", fmt, len(text), (time.perf_counter() - started) * 1000,
             "shown" if shown else "hidden")
    info = getattr(p.worker.engine, "info", {}) or {}
    return web.json_response({
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": req.model or str(info.get("model", "edit-server")),
        "choices": [{"text": text, "index": 0, "logprobs": None,
                     "finish_reason": "length" if finish == "length" and not stopped else "stop"}],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
    })


def make_app(settings: Settings | None = None, *, engine: EngineAPI | None = None, token: str | None = None,
             bind_host: str = "127.0.0.1") -> web.Application:
    """The aiohttp application around one :class:`Pipeline` (``engine``: an engine already loaded;
    otherwise ``settings.model`` is loaded in the background and requests get 503 until it is ready)."""
    settings = settings or Settings()
    app = web.Application(middlewares=[_guard], client_max_size=settings.http.max_body_bytes)
    state: dict[str, Any] = {"state": "loading", "message": "starting", "inflight": 0, "token": token or "",
                             "bind_hosts": {bind_host.lower()} if bind_host not in ("0.0.0.0", "::") else set()}

    def on_status(s: str, message: str) -> None:  # from the worker thread: plain assignments only
        if s != "busy":
            state["state"], state["message"] = s, message
        log.log(logging.ERROR if s == "error" else logging.INFO, "model %s: %s", s, message)

    app[STATE] = state
    app[PIPELINE] = Pipeline(settings, on_status, roots=[], engine=engine)
    app.router.add_post("/v1/completions", _completions)
    app.router.add_post("/completions", _completions)
    app.router.add_get("/health", _health)

    async def _close(app: web.Application) -> None:
        app[PIPELINE].stop()

    app.on_cleanup.append(_close)
    return app


def serve(host: str, port: int, settings: Settings) -> int:
    """Serve HTTP until interrupted (blocking); the model loads in the background. Returns an exit code."""
    if host not in LOOPBACK:
        log.warning("binding to %s: the completion endpoint is reachable from other machines", host)
    token = os.environ.get(TOKEN_ENV) or None
    log.info("serving on http://%s:%d/v1/completions%s", host, port, " (bearer token required)" if token else "")
    web.run_app(make_app(settings, token=token, bind_host=host), host=host, port=port, print=None,
                handler_cancellation=True, access_log=logging.getLogger("edit_server.http.access"))
    return 0
