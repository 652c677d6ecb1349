"""`edit-server http`: the HTTP front end (aiohttp) — Zed, Mercury Edit clients, a team server.

Routes (handlers in handlers.py / handlers_mercury.py, their shared pieces in common.py, free of aiohttp;
formats in zed.py / mercury.py):

``POST /v1/completions``        Zed's ``open_ai_compatible_api`` (prompt formats in zed.py); with a
                                ``suffix`` field: OpenAI-style FIM
``POST /v1/fim/completions``    Mercury FIM      ``POST /v1/edit/completions``   Mercury next edit
``POST /v1/apply/completions``  Mercury apply    (each also without the ``/v1`` prefix)
``POST /v1/engine/complete``    the engine contract for another edit-server's remote backend
                                (handlers_engine.py: built prompt in, raw result + confidences out)
``GET /health``                 model state, queue, version; ``GET /ready``: 200 once loaded, else 503
                                (neither needs a key)
``GET /metrics``                Prometheus text (metrics.py)

Every route uses the same :class:`~edit_server.serving.pipeline.Pipeline` as the LSP server: one worker
(requests queued together from any number of editors run as one batched engine call), one gate
(calibrated thresholds included), one settings struct, one feedback store. A newer request for the same
user and file aborts the older one; a client that disconnects cancels its generation.

Guards (settings ``http.*``): ``Host`` and ``Origin`` must be loopback or allow-listed (403: a web page
cannot drive the server by DNS rebinding or CSRF); bearer keys (401) from ``http.apiKeys``,
``http.apiKeyFile`` or ``EDIT_SERVER_HTTP_TOKEN``, compared in constant time; per-user rate limits
(429 + ``Retry-After``); JSON bodies only (415); body and prompt-token limits (413); a bounded queue
(503 + ``Retry-After``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from edit_server import __version__
from edit_server.core.settings import Settings
from edit_server.http import common, handlers, handlers_engine, handlers_mercury
from edit_server.http.auth import KeyRing, RateLimiter, retry_after
from edit_server.http.common import Ctx, Reply, Stream
from edit_server.http.metrics import MeteredEngine, Registry
from edit_server.serving.pipeline import Pipeline
from engine import options
from engine.api import EngineAPI
from engine.types import EngineInfo

log = logging.getLogger(__name__)

TOKEN_ENV = options.HTTP_TOKEN
LOOPBACK = {"localhost", "127.0.0.1", "::1"}
PIPELINE: web.AppKey[Pipeline] = web.AppKey("pipeline", Pipeline)
STATE: web.AppKey[dict[str, Any]] = web.AppKey("state", dict)
METRICS: web.AppKey[Registry] = web.AppKey("metrics", Registry)
KEYS: web.AppKey[KeyRing] = web.AppKey("keys", KeyRing)
LIMITS: web.AppKey[RateLimiter] = web.AppKey("limits", RateLimiter)
USER: web.RequestKey[str] = web.RequestKey("user", str)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Route = Callable[[Ctx, Any], Awaitable[Reply | Stream]]
ROUTES: list[tuple[str, Route]] = [
    ("/v1/completions", handlers.completions),
    ("/v1/fim/completions", handlers_mercury.fim),
    ("/v1/edit/completions", handlers_mercury.edit),
    ("/v1/apply/completions", handlers_mercury.apply),
    ("/v1/engine/complete", handlers_engine.complete),
]


def _json(reply: Reply) -> web.Response:
    return web.json_response(reply.body, status=reply.status, headers=reply.headers,
                             dumps=lambda o: json.dumps(o, ensure_ascii=False, default=str))


def _error(status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> web.Response:
    return _json(common.error(status, message, kind, headers))


def _hostname(value: str) -> str:
    """'127.0.0.1:8377' / '[::1]:80' / 'example.com' -> host name without port or brackets."""
    return (urlsplit("//" + value).hostname or "").lower()


def _route(request: web.Request) -> str:
    """The route template (bounded label set), never the raw path."""
    info = request.match_info.route.resource
    return info.canonical if info is not None else "other"


@web.middleware
async def _observe(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Outermost: every answer, refusals included, is counted by route and status and timed."""
    started = time.perf_counter()
    status = 500
    try:
        resp = await handler(request)
        status = resp.status
        return resp
    except web.HTTPException as e:
        status = e.status
        raise
    finally:
        request.app[METRICS].request(_route(request), status, time.perf_counter() - started)


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
    keys = request.app[KEYS]
    open_path = request.path in ("/health", "/ready") or (request.path == "/metrics" and not s.http.metrics_auth)
    user = keys.user(request.headers.get("Authorization", "")) if keys.required else None
    if keys.required and user is None and not open_path:
        return _error(401, "missing or wrong bearer key (Authorization: Bearer KEY)", "authentication_error")
    request[USER] = user or f"addr:{request.remote or 'unknown'}"
    if request.method != "POST":
        return await handler(request)
    limits, metrics = request.app[LIMITS], request.app[METRICS]
    limits.configure(s.http.rate_limit_per_minute, s.http.rate_limit_burst)
    wait = limits.take(request[USER])
    metrics.user(user or "anonymous", limited=wait > 0)
    if wait > 0:
        return _error(429, f"rate limit: {s.http.rate_limit_per_minute} requests per minute "
                           "(settings http.rateLimitPerMinute)", "rate_limit_error", {"Retry-After": retry_after(wait)})
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


def _endpoint(fn: Route) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            return _error(400, f"body is not valid JSON: {e}", "invalid_request_error")
        ctx = Ctx(request.app[PIPELINE], request[USER], request.app[STATE])
        out = await fn(ctx, body)
        if isinstance(out, Reply):
            return _json(out)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        async with aclosing(out.events) as events:  # a client gone mid-stream stops the generation
            async for event in events:
                await resp.write(b"data: " + json.dumps(event, ensure_ascii=False).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    return handle


async def _health(request: web.Request) -> web.Response:
    p, st = request.app[PIPELINE], request.app[STATE]
    info = EngineInfo.of(getattr(p.worker.engine, "info", None)).as_dict() if p.worker.engine is not None else {}
    return web.json_response({
        "status": "ok" if p.ready else st["state"], "state": st["state"], "message": st["message"],
        "ready": p.ready, "model": info, "error": p.worker.error, "degraded": p.worker.degraded,
        "queue": {"inflight": st["inflight"], "max": p.settings.http.max_queue},
        "auth": request.app[KEYS].required, "version": __version__,
        "uptime_s": round(time.monotonic() - st["started"], 1),
    }, dumps=lambda o: json.dumps(o, default=str))


async def _ready(request: web.Request) -> web.Response:
    """Readiness (load balancers, Kubernetes): 200 once the model is loaded, else 503."""
    p, st = request.app[PIPELINE], request.app[STATE]
    return web.json_response({"ready": p.ready, "state": st["state"]}, status=200 if p.ready else 503)


async def _metrics(request: web.Request) -> web.Response:
    return web.Response(text=request.app[METRICS].render(), content_type="text/plain",
                        headers={"X-Content-Type-Options": "nosniff"}, charset="utf-8")


def make_app(settings: Settings | None = None, *, engine: EngineAPI | None = None, token: str | None = None,
             bind_host: str = "127.0.0.1") -> web.Application:
    """The aiohttp application around one :class:`Pipeline` (``engine``: an engine already loaded;
    otherwise ``settings.model`` is loaded in the background and requests get 503 until it is ready).
    ``token``: one more accepted bearer key (``EDIT_SERVER_HTTP_TOKEN`` for ``serve``)."""
    settings = settings or Settings()
    app = web.Application(middlewares=[_observe, _guard], client_max_size=settings.http.max_body_bytes)
    state: dict[str, Any] = {"state": "loading", "message": "starting", "inflight": 0, "started": time.monotonic(),
                             "bind_hosts": {bind_host.lower()} if bind_host not in ("0.0.0.0", "::") else set()}
    registry = Registry()

    def on_status(s: str, message: str) -> None:  # from the worker thread: plain assignments only
        worker = app[PIPELINE].worker if PIPELINE in app else None
        if worker is not None and worker.engine is not None and not isinstance(worker.engine, MeteredEngine):
            worker.engine = MeteredEngine(worker.engine, registry)  # before any batch: same thread
        if s != "busy":
            state["state"], state["message"] = s, message
            log.log(logging.ERROR if s == "error" else logging.INFO, "model %s: %s", s, message)

    app[STATE], app[METRICS] = state, registry
    app[KEYS] = KeyRing(settings.http.api_keys, settings.http.api_key_file, token)
    app[LIMITS] = RateLimiter()
    app[PIPELINE] = Pipeline(settings, on_status, roots=[], engine=engine)
    worker = app[PIPELINE].worker
    registry.gauge("edit_server_http_inflight_requests", "admitted POST requests, waiting or running",
                   lambda: state["inflight"])
    registry.gauge("edit_server_engine_queue_depth", "admitted requests not in the engine call under way",
                   lambda: max(0, state["inflight"] - getattr(worker.engine, "running", 0)))
    registry.gauge("edit_server_model_ready", "1 when the model is loaded", lambda: float(worker.ready.is_set()))
    for path, fn in ROUTES:
        app.router.add_post(path, _endpoint(fn))
        app.router.add_post(path.removeprefix("/v1"), _endpoint(fn))
    app.router.add_get("/health", _health)
    app.router.add_get("/ready", _ready)
    app.router.add_get("/metrics", _metrics)

    async def _close(app: web.Application) -> None:
        app[PIPELINE].stop()

    app.on_cleanup.append(_close)
    return app


def serve(host: str, port: int, settings: Settings) -> int:
    """Serve HTTP until interrupted (blocking); the model loads in the background. Returns an exit code."""
    token = options.env().http_token or None
    app = make_app(settings, token=token, bind_host=host)
    if host not in LOOPBACK:
        log.warning("binding to %s: the endpoints are reachable from other machines%s", host,
                    "" if app[KEYS].required else " and no key is required (settings http.apiKeys)")
    log.info("serving on http://%s:%d/v1/completions%s", host, port,
             " (bearer key required)" if app[KEYS].required else "")
    web.run_app(app, host=host, port=port, print=None, handler_cancellation=True,
                access_log=logging.getLogger("edit_server.http.access"))
    return 0
