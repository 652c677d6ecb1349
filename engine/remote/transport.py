"""HTTP for the remote backend: one aiohttp ``ClientSession`` on its own event-loop thread.

The engine API is synchronous (it runs on the server's engine worker thread); :meth:`Transport.post`
blocks that thread until the answer, the timeout or the call's :class:`AbortSignal`. An abort cancels
the request's task, which closes its connection: the remote sees the client go away and stops the
generation (``edit-server http`` aborts the engine job of a disconnected client).

Nothing is started or contacted until the first request. The API key goes into the ``Authorization``
header only; error messages name the host, the status and the reason, never the key or the body.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from engine.types import AbortSignal

log = logging.getLogger(__name__)
POLL_S = 0.02  # how often a waiting worker thread looks at the abort signals
MAX_ANSWER_BYTES = 16 << 20


class RemoteError(Exception):
    """The remote could not answer (connection, timeout, HTTP status, bad body): fall back or report."""


class Aborted(Exception):
    """The call's AbortSignal fired: the request was cancelled and its connection closed."""


@dataclass(frozen=True)
class Request:
    path: str  # appended to the base URL's path
    body: dict[str, Any]
    abort: AbortSignal | None = None


def redacted_url(url: str) -> str:
    """scheme://host[:port]/path — what logs and status messages show of the endpoint."""
    u = urlsplit(url)
    host = u.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{u.scheme}://{host}{f':{u.port}' if u.port else ''}{u.path.rstrip('/')}"


class Transport:
    def __init__(self, base_url: str, api_key: str = "", connect_timeout_s: float = 2.0,
                 timeout_s: float = 10.0, user_agent: str = "edit-server") -> None:
        self.base = base_url.rstrip("/")
        self.name = redacted_url(base_url)
        self._headers = {"Content-Type": "application/json", "Accept": "application/json",
                         "User-Agent": user_agent}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self.connect_timeout_s, self.timeout_s = connect_timeout_s, timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: Any = None
        self._lock = threading.Lock()

    # -- the loop thread ---------------------------------------------------------------------------
    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=_run_loop, args=(loop,), name="remote-http", daemon=True).start()
                self._loop = loop
            return self._loop

    async def _get_session(self) -> Any:
        import aiohttp

        if self._session is None or self._session.closed:
            timeout = aiohttp.ClientTimeout(total=self.timeout_s, sock_connect=self.connect_timeout_s,
                                            connect=self.connect_timeout_s)
            self._session = aiohttp.ClientSession(timeout=timeout, headers=self._headers,
                                                  connector=aiohttp.TCPConnector(limit=32))
        return self._session

    async def _post(self, req: Request) -> dict[str, Any]:
        import aiohttp

        session = await self._get_session()
        data = json.dumps(req.body, ensure_ascii=False).encode()
        try:
            async with session.post(self.base + req.path, data=data) as resp:
                raw = await resp.content.read(MAX_ANSWER_BYTES + 1)
                if resp.status >= 400:
                    raise RemoteError(f"{self.name}{req.path} answered HTTP {resp.status}{_detail(raw)}")
        except asyncio.TimeoutError:
            raise RemoteError(f"{self.name} timed out ({self._timeout_text()})") from None
        except aiohttp.ClientConnectorError as e:
            raise RemoteError(f"{self.name} unreachable ({_reason(e)})") from None
        except aiohttp.ClientError as e:
            raise RemoteError(f"{self.name}: {type(e).__name__}") from None
        if len(raw) > MAX_ANSWER_BYTES:
            raise RemoteError(f"{self.name}{req.path}: answer over {MAX_ANSWER_BYTES} bytes")
        try:
            out = json.loads(raw)
        except ValueError:
            raise RemoteError(f"{self.name}{req.path}: the answer is not JSON") from None
        if not isinstance(out, dict):
            raise RemoteError(f"{self.name}{req.path}: the answer is not a JSON object")
        return out

    def _timeout_text(self) -> str:
        return f"connect {self.connect_timeout_s:g} s, total {self.timeout_s:g} s"

    # -- called from the engine worker thread ------------------------------------------------------
    def post_many(self, reqs: Sequence[Request]) -> list[dict[str, Any] | Exception]:
        """Send ``reqs`` concurrently; per request its JSON answer, a :class:`RemoteError` or
        :class:`Aborted` (its abort signal fired: the request was cancelled, the connection closed)."""
        loop = self._ensure_loop()
        # one aborted before it is sent is not sent (a fast server's answer could otherwise beat the first poll)
        aborted = {i for i, r in enumerate(reqs) if r.abort is not None and r.abort.aborted}
        futs: list[concurrent.futures.Future[dict[str, Any]]] = []
        for i, r in enumerate(reqs):
            if i in aborted:
                futs.append(concurrent.futures.Future())
                futs[-1].cancel()
            else:
                futs.append(asyncio.run_coroutine_threadsafe(self._post(r), loop))
        while True:
            for i, (r, f) in enumerate(zip(reqs, futs, strict=True)):
                if i not in aborted and not f.done() and r.abort is not None and r.abort.aborted:
                    f.cancel()  # cancels the task on the loop: aiohttp closes the connection
                    aborted.add(i)
            pending = [f for f in futs if not f.done()]
            if not pending:
                break
            concurrent.futures.wait(pending, timeout=POLL_S, return_when=concurrent.futures.FIRST_COMPLETED)
        out: list[dict[str, Any] | Exception] = []
        for i, f in enumerate(futs):
            if i in aborted or f.cancelled():
                out.append(Aborted())
                continue
            e = f.exception()
            if e is None:
                out.append(f.result())
            elif isinstance(e, RemoteError):
                out.append(e)
            else:  # a bug or an unexpected library error: still the remote's failure, named by type
                log.warning("remote request failed", exc_info=e)
                out.append(RemoteError(f"{self.name}: {type(e).__name__}"))
        return out

    def post(self, path: str, body: dict[str, Any], abort: AbortSignal | None = None) -> dict[str, Any]:
        r = self.post_many([Request(path, body, abort)])[0]
        if isinstance(r, Exception):
            raise r
        return r

    def close(self) -> None:
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is None:
            return

        async def _close() -> None:
            if self._session is not None:
                await self._session.close()

        try:
            asyncio.run_coroutine_threadsafe(_close(), loop).result(timeout=2)
        except Exception:  # closing is best effort
            pass
        loop.call_soon_threadsafe(loop.stop)


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    try:
        loop.run_forever()
    finally:
        loop.close()


def _reason(e: Exception) -> str:
    os_error = getattr(e, "os_error", None)
    text = getattr(os_error, "strerror", None) or type(e).__name__
    return str(text).lower()


def _detail(raw: bytes) -> str:
    """A short reason from an error body (OpenAI-style ``{"error": {"message"}}``), for the status."""
    try:
        body = json.loads(raw)
        msg = body.get("error", {}).get("message") if isinstance(body.get("error"), dict) else body.get("error")
    except (ValueError, AttributeError):
        return ""
    return f": {str(msg)[:120]}" if msg else ""
