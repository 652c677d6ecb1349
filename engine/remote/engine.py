"""``RemoteEngine``: the engine contract (``EngineAPI``) over HTTP, with fallback to a local engine.

Calls in one ``complete`` go out concurrently (one request each, so each can be cancelled alone; the
remote batches them). An aborted call cancels its request (the connection closes) and comes back
``aborted``. A connection error, timeout, HTTP error or unreadable answer is a *failure*: with a
``fallback`` the failed calls run on the local engine (built by the factory on the first failure, then
kept: no model in memory while the remote works), and for ``retry_s`` seconds after a failure the
remote is skipped; without one the call raises :class:`RemoteError`. ``degraded`` names the last
failure until the remote answers again (the server's status shows it).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

from engine.api import ByComplete, Call, EngineAPI, InfillCall, RewriteCall
from engine.remote import backends as b
from engine.remote.transport import Aborted, RemoteError, Request, Transport, redacted_url
from engine.types import EngineInfo, GenerateResult

log = logging.getLogger(__name__)
DEFAULT_CONTEXT = 8192
LOOPBACK = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class RemoteConfig:
    url: str
    kind: str = "edit-server"  # edit-server | openai | sglang
    api_key: str = ""
    model: str = ""
    fim_format: str = "qwen"
    connect_timeout_s: float = 2.0
    timeout_s: float = 10.0
    retry_s: float = 30.0
    context_tokens: int = 0


def insecure(url: str) -> bool:
    """Plain http to a host that is not this machine: prompts (code) travel unencrypted."""
    u = urlsplit(url)
    return u.scheme == "http" and (u.hostname or "") not in LOOPBACK and not (u.hostname or "").startswith("127.")


def _aborted() -> GenerateResult:
    return GenerateResult(text="", tokens=[], confidences=[], steps=0, forwards=0, prompt_tokens=0,
                          cached_tokens=0, finish_reason="aborted")


class RemoteEngine(ByComplete):
    def __init__(self, cfg: RemoteConfig, fallback: Callable[[], EngineAPI] | None = None,
                 transport: Transport | None = None) -> None:
        self.cfg = cfg
        self.transport = transport or Transport(cfg.url, cfg.api_key, cfg.connect_timeout_s, cfg.timeout_s)
        self.name = redacted_url(cfg.url)
        self._fallback_factory = fallback
        self._local: EngineAPI | None = None
        self._lock = threading.Lock()
        self.failure: str | None = None  # the last failure, until the remote answers again
        self._skip_until = 0.0
        self.calls = {"remote": 0, "local": 0, "failed": 0}
        self.tokenizer = None  # the context builder estimates token counts (UTF-8 bytes / 3)
        self.args = SimpleNamespace(max_seq_len=cfg.context_tokens or DEFAULT_CONTEXT)
        warning = "plain http to another machine: prompts travel unencrypted (use https)" if insecure(cfg.url) else None
        self.info = EngineInfo(model=cfg.model or self.name, label=f"remote {cfg.kind}", device="remote",
                               remote=self.name, kind=cfg.kind, warning=warning)
        if warning:
            log.warning("remote backend %s: %s", self.name, warning)

    # -- state ------------------------------------------------------------------------------------
    @property
    def degraded(self) -> str | None:
        if self.failure is None:
            return None
        tail = "running on the local model" if self._fallback_factory else "no suggestions"
        return f"remote {self.failure}; {tail}"

    @property
    def local(self) -> EngineAPI | None:
        """The fallback engine, when it was needed (and so loaded)."""
        return self._local

    def close(self) -> None:
        self.transport.close()

    def forget(self, cache_key: str | None = None) -> None:
        if self._local is not None:  # the remote keeps no state of ours; the fallback engine may
            self._local.forget(cache_key)

    # -- the contract ----------------------------------------------------------------------------
    def complete(self, calls: Sequence[Call]) -> list[GenerateResult]:
        out: list[GenerateResult | None] = [None] * len(calls)
        failed: list[int] = []
        error: RemoteError | None = None
        if time.monotonic() < self._skip_until:
            failed = list(range(len(calls)))
            error = RemoteError(f"{self.failure or 'unavailable'} (retrying in "
                                f"{self._skip_until - time.monotonic():.0f} s)")
        else:
            answers = self.transport.post_many([self._request(c) for c in calls])
            ok = 0
            for i, (c, a) in enumerate(zip(calls, answers, strict=True)):
                if isinstance(a, Aborted):
                    out[i] = _aborted()
                    continue
                if not isinstance(a, Exception):
                    try:
                        out[i] = self._parse(c, a)
                        ok += 1
                        continue
                    except RemoteError as e:
                        a = RemoteError(f"{self.name}: {e}")
                assert isinstance(a, RemoteError)
                failed.append(i)
                error = a
            if error is not None:
                self._failed(error)
            elif ok:
                self._recovered()
        self.calls["remote"] += len(calls) - len(failed)
        if failed:
            assert error is not None
            self._run_local([calls[i] for i in failed], failed, out, error)
        return [r if r is not None else _aborted() for r in out]

    # -- failure and fallback ---------------------------------------------------------------------
    def _failed(self, e: RemoteError) -> None:
        first = self.failure is None
        self.failure = str(e)
        self._skip_until = time.monotonic() + self.cfg.retry_s
        (log.warning if first else log.info)("remote backend failed: %s; %s for %g s", e,
                                             "local model" if self._fallback_factory else "no suggestions",
                                             self.cfg.retry_s)

    def _recovered(self) -> None:
        if self.failure is not None:
            log.warning("remote backend %s answers again", self.name)
            self.failure = None

    def _run_local(self, calls: list[Call], idx: list[int], out: list[GenerateResult | None],
                   error: RemoteError) -> None:
        live = [(i, c) for i, c in zip(idx, calls, strict=True) if not (c.abort is not None and c.abort.aborted)]
        for i, c in zip(idx, calls, strict=True):
            if c.abort is not None and c.abort.aborted:
                out[i] = _aborted()
        if not live:
            return
        if self._fallback_factory is None:
            self.calls["failed"] += len(live)
            raise error
        with self._lock:
            if self._local is None:
                log.warning("loading the local model for the remote backend's fallback")
                self._local = self._fallback_factory()
        self.calls["local"] += len(live)
        for (i, _), r in zip(live, self._local.complete([c for _, c in live]), strict=True):
            out[i] = r

    # -- per backend --------------------------------------------------------------------------------
    def _key(self, cache_key: str | None) -> str:
        """The remote's supersede / prefix-cache key: a hash (document URIs hold local paths)."""
        return hashlib.sha256((cache_key or "").encode("utf-8", "surrogatepass")).hexdigest()[:24] if cache_key else ""

    def _request(self, c: Call) -> Request:
        cfg = self.cfg
        if cfg.kind == "edit-server":
            if isinstance(c, InfillCall):
                body = b.native_body(c.prompt, max_tokens=c.max_tokens, single_line=c.single_line,
                                     key=self._key(c.cache_key), model=cfg.model)
            else:
                body = b.native_body(c.prompt, key=self._key(c.cache_key), model=cfg.model)
            return Request("/v1/engine/complete", body, c.abort)
        if isinstance(c, RewriteCall):
            tokens = max(64, 2 * len(c.prompt.region) // 3 + 32)  # ≥ the region's tokens at ~1.5 chars each
            return Request("/v1/chat/completions", b.chat_body(b.EDIT_INSTRUCTION, b.edit_message(c.prompt),
                                                               cfg.model, tokens), c.abort)
        if cfg.fim_format == "chat":
            system = b.FIM_INSTRUCTION.format(cursor=b.CURSOR)
            return Request("/v1/chat/completions", b.chat_body(system, b.fim_message(c.prompt), cfg.model,
                                                               c.max_tokens + 8), c.abort)
        if cfg.kind == "sglang" and cfg.fim_format != "suffix":
            return Request("/generate", b.generate_body(c.prompt, cfg.fim_format, c.max_tokens, c.single_line),
                           c.abort)
        return Request("/v1/completions", b.completions_body(c.prompt, cfg.fim_format, cfg.model, c.max_tokens,
                                                             c.single_line), c.abort)

    def _parse(self, c: Call, body: dict[str, Any]) -> GenerateResult:
        cfg = self.cfg
        if cfg.kind == "edit-server":
            return b.native_result(body)
        if isinstance(c, RewriteCall):
            r = b.chat_text(body)[1]
            if c.prompt.region.endswith("\n") and not r.text.endswith("\n"):  # the fence took it
                r.text += "\n"
            return r
        if cfg.fim_format == "chat":
            r = b.chat_text(body)[1]
        elif cfg.kind == "sglang" and cfg.fim_format != "suffix":
            r = b.generate_result(body)
        else:
            r = b.completion_result(body)
        return b.single_line_cut(r) if isinstance(c, InfillCall) and c.single_line else r
