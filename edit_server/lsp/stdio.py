"""The stdio transport: LSP base-protocol framing that a careless or hostile client cannot break.

pygls's own loop trusts its input: a ``Content-Length`` of 10^15 allocates (MemoryError), odd header
lines are ignored until the server is deaf, every nested object that looks like a JSON-RPC message is
treated as one, and ``exit`` always ends with status 0. Here:

* header lines are case-insensitive, ``\\n`` or ``\\r\\n``, at most 8 KiB each (longer ones are drained);
* a frame without a usable ``Content-Length``, or over ``limits.maxMessageBytes``, is answered with a
  JSON-RPC error (id null) and skipped without buffering it: reading resumes at the next header block
  (found even when the skipped body has no line end and runs into it);
* a body that is not a JSON object is answered -32700 / -32600 (id null); only the top-level object
  is a message;
* the reader is a daemon thread, so ``exit`` (status 0 after ``shutdown``, else 1 — as LSP says) and
  SIGINT / SIGTERM stop the server at once, even while stdin stays open.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, BinaryIO

log = logging.getLogger(__name__)

MAX_HEADER_LINE = 8192
PARSE_ERROR, INVALID_REQUEST = -32700, -32600


class FdReader:
    """``readline(limit)`` / ``read(n)`` over a file descriptor with our own buffer: a daemon thread
    blocked here holds no interpreter-level lock (a blocked ``sys.stdin.buffer`` read aborts the
    interpreter at exit)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = bytearray()
        self.eof = False

    def _fill(self) -> bool:
        if self.eof:
            return False
        chunk = os.read(self.fd, 1 << 16)
        if not chunk:
            self.eof = True
            return False
        self.buf += chunk
        return True

    def readline(self, limit: int = -1) -> bytes:
        while True:
            i = self.buf.find(b"\n")
            if i >= 0 or (0 <= limit <= len(self.buf)):
                end = i + 1 if i >= 0 else limit
                end = min(end, limit) if limit >= 0 else end
                line = bytes(self.buf[:end])
                del self.buf[:end]
                return line
            if not self._fill():
                line = bytes(self.buf)
                self.buf.clear()
                return line

    def read(self, n: int) -> bytes:
        while len(self.buf) < n and self._fill():
            pass
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out


def reader_for(stream: Any) -> Any:
    """An FdReader for real files / pipes / sockets; the stream itself otherwise (tests' BytesIO)."""
    try:
        return FdReader(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return stream


class Frame:
    """One read result: ``body`` (bytes), or ``problem`` (a framing error to report), or EOF (neither)."""

    __slots__ = ("body", "problem")

    def __init__(self, body: bytes | None = None, problem: str | None = None) -> None:
        self.body, self.problem = body, problem


def _readline(stdin: Any) -> tuple[bytes, bool]:
    """(line, too_long); an over-long line is drained to its end and only its last 8 KiB are returned:
    a header glued to the end of a skipped body (one long line, as JSON bodies are) is found there."""
    line = stdin.readline(MAX_HEADER_LINE)
    if len(line) < MAX_HEADER_LINE or line.endswith(b"\n"):
        return line, False
    while True:  # drain the rest, keeping only its tail
        more = stdin.readline(MAX_HEADER_LINE)
        line = (line + more)[-MAX_HEADER_LINE:]
        if not more or more.endswith(b"\n"):
            return line, True


def read_frame(stdin: Any, max_bytes: int) -> Frame:
    """Read one header block and its body."""
    length: int | None = None
    problem: str | None = None
    seen = False
    while True:
        line, too_long = _readline(stdin)
        if not line:
            return Frame()  # EOF
        text = line.strip()
        at = text.lower().rfind(b"content-length:")
        if at > 0 or (at == 0 and too_long):  # a skipped body glued to the next header: resynchronise on it
            text, too_long = text[at:], False
        if not text:
            if seen:
                break
            continue  # stray blank line between messages
        seen = True
        if too_long:
            problem = problem or "header line too long"
            continue
        name, sep, value = text.partition(b":")
        if not sep:
            problem = problem or f"malformed header line {text[:40]!r}"
        elif name.strip().lower() == b"content-length":
            try:
                length = int(value.strip())
            except ValueError:
                problem = problem or f"Content-Length is not an integer: {value.strip()[:40]!r}"
    if problem is None and length is None:
        problem = "missing Content-Length header"
    elif problem is None and length is not None and not 0 < length <= max_bytes:
        problem = (f"Content-Length {length} is outside 1..{max_bytes} bytes (settings limits.maxMessageBytes);"
                   " message skipped")
    if problem is not None:
        return Frame(problem=problem)  # the body (if any) is skipped as unknown header lines
    assert length is not None
    body = stdin.read(length)
    if len(body) < length:
        return Frame()  # EOF inside the body
    return Frame(body=body)


def decode(body: bytes) -> tuple[dict[str, Any] | None, tuple[int, str] | None]:
    """(message, None) or (None, (error code, message))."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        return None, (PARSE_ERROR, f"parse error: {type(e).__name__}")
    if not isinstance(data, dict) or data.get("jsonrpc") != "2.0":
        return None, (INVALID_REQUEST, "invalid request: expected one JSON-RPC 2.0 object")
    return data, None


class Backlog:
    """Bytes of frames read but not yet handled. The reader thread waits while ``limit`` would be passed
    (one frame is always let through), so a client that writes faster than the server handles fills the
    pipe instead of the server's memory (20 frames of 30 MB once held 0.52 GB)."""

    def __init__(self, limit: Callable[[], int]) -> None:
        self.limit, self.bytes, self.peak, self.closed = limit, 0, 0, False
        self._cv = threading.Condition()

    def add(self, n: int) -> None:
        with self._cv:
            while self.bytes and self.bytes + n > self.limit() and not self.closed:
                self._cv.wait(0.5)
            self.bytes += n
            self.peak = max(self.peak, self.bytes)

    def done(self, n: int) -> None:
        with self._cv:
            self.bytes -= n
            self._cv.notify_all()

    def close(self) -> None:
        with self._cv:
            self.closed = True
            self._cv.notify_all()


class StdioServer:
    """Runs ``protocol`` (a pygls LanguageServerProtocol) over binary stdin/stdout."""

    def __init__(self, protocol: Any, max_bytes: Callable[[], int], on_stop: Callable[[], None]) -> None:
        self.protocol = protocol
        self.max_bytes = max_bytes
        self.on_stop = on_stop
        self.exit_code: int | None = None
        self._stopped: asyncio.Future | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.backlog = Backlog(lambda: 2 * self.max_bytes())  # frames read ahead: at most two full messages

    def stop(self, code: int) -> None:
        """From the event loop: end serving with ``code`` (first call wins)."""
        if self.exit_code is None:
            self.exit_code = code
        if self._stopped is not None and not self._stopped.done():
            self._stopped.set_result(None)

    def error(self, code: int, message: str) -> None:
        self.protocol._send_data({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}})

    def _reader(self, stdin: Any, queue: asyncio.Queue) -> None:
        assert self._loop is not None
        try:
            while True:
                frame = read_frame(stdin, self.max_bytes())
                self.backlog.add(len(frame.body or b""))
                self._loop.call_soon_threadsafe(queue.put_nowait, frame)
                if frame.body is None and frame.problem is None:
                    return
        except Exception as e:  # a closed or broken stdin: end of input
            log.warning("stdin: %s", type(e).__name__)
            self._loop.call_soon_threadsafe(queue.put_nowait, Frame())

    def _handle(self, frame: Frame) -> None:
        if frame.problem is not None:
            log.warning("bad frame: %s", frame.problem)
            self.error(INVALID_REQUEST, frame.problem)
            return
        assert frame.body is not None
        data, err = decode(frame.body)
        if err is not None:
            self.error(*err)
            return
        try:
            self.protocol.handle_message(self.protocol.structure_message(data))
        except Exception as e:  # a message pygls cannot structure: answered by EditProtocol where it can
            log.warning("unhandled message (%s)", type(e).__name__)
            if isinstance(data, dict) and "id" in data and "method" in data:
                self.protocol._send_data({"jsonrpc": "2.0", "id": data["id"],
                                          "error": {"code": INVALID_REQUEST, "message": "invalid request"}})

    async def _main(self, stdin: BinaryIO) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = self._loop.create_future()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._loop.add_signal_handler(sig, self.stop, 128 + sig)
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread / platform
                pass
        queue: asyncio.Queue[Frame] = asyncio.Queue()
        threading.Thread(target=self._reader, args=(reader_for(stdin), queue), name="stdin", daemon=True).start()
        while not self._stopped.done():
            get = asyncio.ensure_future(queue.get())
            await asyncio.wait({get, self._stopped}, return_when=asyncio.FIRST_COMPLETED)
            if not get.done():
                get.cancel()
                break
            frame = get.result()
            if frame.body is None and frame.problem is None:  # EOF: the client went away
                self.stop(0 if self.protocol._shutdown else 1)
                break
            try:
                self._handle(frame)
            finally:
                self.backlog.done(len(frame.body or b""))
        self.backlog.close()
        self.on_stop()
        await asyncio.sleep(0)  # let the last responses go out

    def run(self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> int:
        out = stdout or sys.stdout.buffer

        class _Writer:
            def write(self, data: bytes) -> None:
                out.write(data)
                out.flush()

            def close(self) -> None:
                out.flush()

        self.protocol.set_writer(_Writer())
        try:
            asyncio.run(self._main(stdin or sys.stdin.buffer))
        except BrokenPipeError:
            log.warning("the client closed the connection")
            self.exit_code = self.exit_code if self.exit_code is not None else 1
        return self.exit_code if self.exit_code is not None else 1
