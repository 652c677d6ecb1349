"""Zed front end: an OpenAI-compatible ``POST /v1/completions`` endpoint (aiohttp).

Zed's ``open_ai_compatible_api`` edit-prediction provider sends ``{"model", "prompt", "max_tokens",
"stop"}`` in one of two prompt formats; both are parsed here by pure functions into engine prompts:

``qwen``   ``<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>`` → ``Engine.infill``; the reply is
           the middle, inserted at the cursor.
``zeta2``  ``<[fim-suffix]>{after}<[fim-prefix]>`` + ``<filename>{path}\\n{excerpt}`` related files +
           ``<filename>edit_history\\n{diffs}`` + ``<filename>{path}\\n{before}<<<<<<< CURRENT\\n{region
           with <|user_cursor|>}=======\\n<[fim-middle]>`` → ``Engine.rewrite``; the reply is the whole new
           region followed by exactly ``>>>>>>> UPDATED\\n`` (Zed diffs old vs new region).

The engine runs on one worker thread, off the event loop. A newer request for the same file aborts the
older in-flight one (Zed keeps at most two pending). ``GET /health`` reports the model. With
``EDIT_SERVER_HTTP_TOKEN`` set, requests must carry ``Authorization: Bearer <token>``. Replies pass the
LSP path's filters and show/hide gate (``edit_server.selectivity.gate``; ``EDIT_SERVER_HTTP_GATE=off`` or a threshold).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web

from edit_server.selectivity import gate
from engine.templates import EditPrompt, FimPrompt, Section
from engine.types import AbortSignal, GenerateResult

log = logging.getLogger(__name__)

PromptFormat = Literal["qwen", "zeta2"]

# qwen FIM markers
FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE = "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"
FILE_SEP = "<|file_sep|>"
# zeta2 markers
Z_SUFFIX, Z_PREFIX, Z_MIDDLE = "<[fim-suffix]>", "<[fim-prefix]>", "<[fim-middle]>"
Z_FILENAME = "<filename>"
Z_HISTORY = "edit_history"
Z_CURRENT, Z_SEPARATOR, Z_UPDATED = "<<<<<<< CURRENT\n", "=======\n", ">>>>>>> UPDATED\n"
Z_CURSOR = "<|user_cursor|>"
Z_ACCEPTED = "// User accepted prediction:"

MAX_CANVAS = 256  # cap on FIM output tokens whatever max_tokens asks
TOKEN_ENV = "EDIT_SERVER_HTTP_TOKEN"
GATE_ENV = "EDIT_SERVER_HTTP_GATE"  # "off" = show everything non-empty; a number in [0,1] = threshold


class PromptError(ValueError):
    """The prompt is not in the format it claims (→ HTTP 400)."""


# ---- pure parsing --------------------------------------------------------------------------------
def detect_format(prompt: str) -> PromptFormat:
    """Which of Zed's prompt formats ``prompt`` is in."""
    if Z_MIDDLE in prompt and Z_SUFFIX in prompt:
        return "zeta2"
    if FIM_PREFIX in prompt and FIM_MIDDLE in prompt:
        return "qwen"
    raise PromptError("prompt is neither a qwen FIM prompt (<|fim_prefix|>…<|fim_middle|>) "
                      "nor a zeta2 edit prompt (<[fim-suffix]>…<[fim-middle]>)")


def parse_qwen(prompt: str) -> FimPrompt:
    """``[<|file_sep|>{path}\\n]<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>`` → FimPrompt."""
    i = prompt.find(FIM_PREFIX)
    j = prompt.find(FIM_SUFFIX, i + len(FIM_PREFIX))
    k = prompt.rfind(FIM_MIDDLE)
    if i < 0 or j < 0 or k < j:
        raise PromptError("qwen prompt must be <|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>")
    head = prompt[:i]
    path = ""
    if FILE_SEP in head:  # optional repo-level header: <|file_sep|>{path}\n
        path = head[head.rfind(FILE_SEP) + len(FILE_SEP):].split("\n", 1)[0].strip()
    return FimPrompt(prefix=prompt[i + len(FIM_PREFIX):j], suffix=prompt[j + len(FIM_SUFFIX):k], path=path)


def split_diffs(text: str) -> tuple[str, ...]:
    """Unified diffs in an edit-history block, oldest first, without Zed's 'accepted' comments."""
    lines = [ln for ln in text.splitlines(keepends=True) if not ln.startswith(Z_ACCEPTED)]
    diffs: list[list[str]] = []
    for n, line in enumerate(lines):
        starts = line.startswith("--- ") and n + 1 < len(lines) and lines[n + 1].startswith("+++ ")
        if starts or not diffs:
            diffs.append([])
        diffs[-1].append(line)
    out = ("".join(d).rstrip("\n") + "\n" for d in diffs)  # Zed ends the section with a blank line
    return tuple(d for d in out if d.strip())


def parse_zeta2(prompt: str) -> EditPrompt:
    """A zeta2 prompt → EditPrompt (related files as sections, diffs as history, cursor from the marker)."""
    if not prompt.startswith(Z_SUFFIX):
        raise PromptError("zeta2 prompt must start with <[fim-suffix]>")
    p = prompt.find(Z_PREFIX)
    if p < 0:
        raise PromptError("zeta2 prompt has no <[fim-prefix]>")
    after = prompt[len(Z_SUFFIX):p]
    body = prompt[p + len(Z_PREFIX):]
    end = body.rfind(Z_SEPARATOR + Z_MIDDLE)
    c = body.rfind(Z_CURRENT, 0, max(end, 0))
    if end < 0 or c < 0:
        raise PromptError("zeta2 prompt must end with <<<<<<< CURRENT\\n{region}=======\\n<[fim-middle]>")
    marked = body[c + len(Z_CURRENT):end]
    chunks = body[:c].split(Z_FILENAME)
    if chunks[0].strip() or len(chunks) < 2:
        raise PromptError("zeta2 prompt must name the current file with <filename>{path}\\n before the region")
    path, _, before = chunks[-1].partition("\n")
    sections: list[Section] = []
    history: tuple[str, ...] = ()
    for chunk in chunks[1:-1]:
        name, _, text = chunk.partition("\n")
        if name.strip() == Z_HISTORY:
            history += split_diffs(text)
        else:
            sections.append(Section(kind="related", path=name.strip(), text=text))
    cursor = marked.find(Z_CURSOR)
    region = marked.replace(Z_CURSOR, "")
    return EditPrompt(before=before, region=region, after=after, cursor=max(cursor, 0), path=path.strip(),
                      history=history, sections=tuple(sections))


def zeta2_reply(new_region: str, old_region: str) -> str:
    """The reply Zed expects: the whole new region + ``>>>>>>> UPDATED\\n``.

    A whitespace-only rewrite of a non-blank region is treated as "no edit" (the region comes back
    unchanged), and a dropped final newline is restored, so a weak model never deletes the region.
    """
    new = new_region.replace(Z_UPDATED.rstrip("\n"), "")
    if not new.strip() and old_region.strip():
        new = old_region
    if old_region.endswith("\n") and not new.endswith("\n"):
        new += "\n"
    return new + Z_UPDATED


def apply_stops(text: str, stops: list[str]) -> tuple[str, bool]:
    """Cut ``text`` at the first stop string; (text, whether one was found)."""
    cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


# ---- request validation --------------------------------------------------------------------------
@dataclass(frozen=True)
class CompletionRequest:
    model: str
    prompt: str
    max_tokens: int
    stop: tuple[str, ...]


def parse_request(body: Any) -> CompletionRequest:
    """Validate a ``/v1/completions`` body (raises PromptError with the offending field)."""
    if not isinstance(body, dict):
        raise PromptError("body must be a JSON object")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise PromptError("field 'prompt' (string) is required")
    max_tokens = body.get("max_tokens", 64)
    if max_tokens is None:
        max_tokens = 64
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise PromptError("field 'max_tokens' must be a positive integer")
    stop = body.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise PromptError("field 'stop' must be a string or a list of strings")
    model = body.get("model") or ""
    if not isinstance(model, str):
        raise PromptError("field 'model' must be a string")
    return CompletionRequest(model=model, prompt=prompt, max_tokens=max_tokens, stop=tuple(stop))


# ---- engine worker -------------------------------------------------------------------------------
class EngineWorker:
    """One engine thread; a newer job with the same key aborts the older one."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="edit-server-engine")
        self._inflight: dict[str, AbortSignal] = {}
        self._lock = threading.Lock()

    async def submit(self, key: str, job: Callable[[AbortSignal], GenerateResult | None]
                     ) -> GenerateResult | None:
        """Run ``job(abort)`` on the engine thread; None when superseded before it started."""
        abort = AbortSignal()
        with self._lock:
            old = self._inflight.get(key)
            if old is not None:
                old.abort()
            self._inflight[key] = abort

        def run() -> GenerateResult | None:
            return None if abort.aborted else job(abort)

        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, run)
        except asyncio.CancelledError:  # client went away
            abort.abort()
            raise
        finally:
            with self._lock:
                if self._inflight.get(key) is abort:
                    del self._inflight[key]

    def close(self) -> None:
        with self._lock:
            for a in self._inflight.values():
                a.abort()
        self._pool.shutdown(wait=False, cancel_futures=True)


# ---- handlers ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GateConfig:
    enabled: bool = True
    threshold: float = 0.5

    @classmethod
    def from_env(cls, value: str | None) -> GateConfig:
        """``EDIT_SERVER_HTTP_GATE``: unset = on with the default threshold, "off" = disabled, "0.7" = on."""
        if not value:
            return cls()
        if value.strip().lower() in ("off", "0", "false", "no"):
            return cls(enabled=False)
        try:
            t = float(value)
        except ValueError:
            log.warning("%s=%r is neither 'off' nor a threshold; using the default gate", GATE_ENV, value)
            return cls()
        return cls(threshold=min(1.0, max(0.0, t)))


WORKER: web.AppKey[EngineWorker] = web.AppKey("worker", EngineWorker)
TOKEN: web.AppKey[str] = web.AppKey("token", str)
GATE: web.AppKey[GateConfig] = web.AppKey("gate", GateConfig)


def _error(status: int, message: str, kind: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind}}, status=status)


def _finish(result: GenerateResult | None, stopped: bool) -> str:
    if stopped or result is None or result.finish_reason != "length":
        return "stop"
    return "length"


@web.middleware
async def _auth(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
    token = request.app[TOKEN]
    if token and request.path != "/health":
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return _error(401, "missing or wrong bearer token", "authentication_error")
    return await handler(request)


async def _health(request: web.Request) -> web.Response:
    info = getattr(request.app[WORKER].engine, "info", {}) or {}
    return web.json_response({"status": "ok", "model": info}, dumps=lambda o: json.dumps(o, default=str))


async def _completions(request: web.Request) -> web.Response:
    try:
        req = parse_request(await request.json())
        fmt = detect_format(req.prompt)
        parsed: FimPrompt | EditPrompt = parse_qwen(req.prompt) if fmt == "qwen" else parse_zeta2(req.prompt)
    except json.JSONDecodeError as e:
        return _error(400, f"body is not valid JSON: {e}", "invalid_request_error")
    except (PromptError, UnicodeDecodeError) as e:
        return _error(400, str(e), "invalid_request_error")
    worker = request.app[WORKER]
    eng = worker.engine
    key = f"{fmt}:{parsed.path}"
    if isinstance(parsed, FimPrompt):
        fim, n = parsed, min(req.max_tokens, MAX_CANVAS)

        def job(abort: AbortSignal) -> GenerateResult:
            return eng.infill(fim, max_tokens=n, cache_key=key, abort=abort)
    else:
        edit = parsed

        def job(abort: AbortSignal) -> GenerateResult:
            return eng.rewrite(edit, cache_key=key, abort=abort)

    started = time.perf_counter()
    try:
        result = await worker.submit(key, job)
    except Exception as e:  # engine failure: report it, keep serving
        log.exception("engine failed on a %s request", fmt)
        return _error(500, f"engine failed: {type(e).__name__}: {e}", "server_error")
    aborted = result is None or result.finish_reason == "aborted"
    g = request.app[GATE]
    reason = "superseded" if aborted else "ok"
    if isinstance(parsed, FimPrompt):
        text, stopped = apply_stops("" if aborted or result is None else result.text, list(req.stop))
        text = gate.clean_fim(text, parsed.prefix, parsed.suffix, single_line=False)
        if text and result is not None:
            decision = gate.decide(text, result.confidences, g.enabled, g.threshold)
            text, reason = (text, reason) if decision.show else ("", decision.reason)
    else:
        new = parsed.region
        if not aborted and result is not None:
            new = gate.clean_edit(parsed.region, result.text)
            changed = new != parsed.region
            decision = gate.decide(new if changed else "", result.confidences, g.enabled, g.threshold)
            new, reason = (new, reason) if decision.show else (parsed.region, decision.reason)
        text = zeta2_reply(new, parsed.region)
        stopped = False
    log.info("%s %s: %d chars in %.0f ms (%s)", fmt, parsed.path or "-", len(text),
             (time.perf_counter() - started) * 1000, reason)
    completion = len(result.tokens) if result is not None and not aborted else 0
    prompt_tokens = result.prompt_tokens if result is not None else 0
    return web.json_response({
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": req.model or str((getattr(eng, "info", {}) or {}).get("model", "edit-server")),
        "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": _finish(result, stopped)}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                  "total_tokens": prompt_tokens + completion},
    })


def make_app(engine: Any, *, token: str | None = None, gate_config: GateConfig | None = None
             ) -> web.Application:
    """The aiohttp application around a loaded ``engine.Engine`` (or anything with infill/rewrite).

    Suggestions pass the same filters and show/hide gate as the LSP path (``edit_server.selectivity.gate``);
    a hidden FIM suggestion is an empty text, a hidden rewrite returns the region unchanged.
    """
    app = web.Application(middlewares=[_auth], client_max_size=8 * 1024 * 1024)
    app[WORKER] = EngineWorker(engine)
    app[TOKEN] = token or ""
    app[GATE] = gate_config or GateConfig()
    app.router.add_post("/v1/completions", _completions)
    app.router.add_post("/completions", _completions)
    app.router.add_get("/health", _health)

    async def _close(app: web.Application) -> None:
        app[WORKER].close()

    app.on_cleanup.append(_close)
    return app


def serve(host: str, port: int, engine_spec: str, device: str) -> int:
    """Load the engine, then serve HTTP until interrupted (blocking). Returns an exit code."""
    from engine import Engine  # torch import happens here, not at module import

    if host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("binding to %s: the completion endpoint is reachable from other machines", host)
    token = os.environ.get(TOKEN_ENV) or None
    gate_config = GateConfig.from_env(os.environ.get(GATE_ENV))
    log.info("loading model %r on %s", engine_spec, device)
    try:
        eng = Engine.load(engine_spec, device=device)
    except Exception as e:
        log.error("could not load model %r: %s", engine_spec, e)
        return 1
    log.info("serving %s on http://%s:%d/v1/completions%s", getattr(eng, "info", {}).get("model", engine_spec),
             host, port, " (bearer token required)" if token else "")
    web.run_app(make_app(eng, token=token, gate_config=gate_config), host=host, port=port, print=None,
                access_log=logging.getLogger("edit_server.http.zed.access"))
    return 0

