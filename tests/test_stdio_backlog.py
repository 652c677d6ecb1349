"""The stdio transport reads ahead at most two messages' worth of bytes: a client that writes faster than
the server handles fills the pipe, not the server's memory; every frame is still handled, in order."""

from __future__ import annotations

import io
import json
import threading
import time
from typing import Any

from edit_server.lsp.stdio import Backlog, StdioServer


class SlowProtocol:
    """Just enough of pygls' protocol for StdioServer: records what it is given, slowly."""

    _shutdown = True

    def __init__(self) -> None:
        self.seen: list[int] = []

    def set_writer(self, writer: Any) -> None:
        self.writer = writer

    def structure_message(self, data: dict) -> dict:
        return data

    def handle_message(self, msg: dict) -> None:
        time.sleep(0.01)  # the server is slower than the client writes
        self.seen.append(msg["params"]["n"])

    def _send_data(self, data: dict) -> None:
        raise AssertionError(f"unexpected reply {data}")


def _frame(n: int, size: int) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "method": "x/y", "params": {"n": n, "pad": "a" * size}}).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def test_read_ahead_is_bounded_and_nothing_is_lost() -> None:
    proto = SlowProtocol()
    frames = b"".join(_frame(n, 200_000) for n in range(40))  # 8 MB, 40 frames
    server = StdioServer(proto, max_bytes=lambda: 500_000, on_stop=lambda: None)
    assert server.run(io.BytesIO(frames), io.BytesIO()) == 0  # EOF after shutdown: exit 0
    assert proto.seen == list(range(40))
    frame = len(_frame(0, 200_000)) - len(b"Content-Length: 200032\r\n\r\n")
    assert frame <= server.backlog.peak <= 2 * 500_000  # read ahead, but never more than two messages' worth
    assert server.backlog.bytes == 0


def test_one_oversized_frame_is_let_through_and_close_releases_the_reader() -> None:
    b = Backlog(lambda: 10)
    b.add(50)  # empty backlog: a frame larger than the limit still goes through
    assert b.bytes == 50
    waited = threading.Event()

    def second() -> None:
        b.add(5)
        waited.set()

    t = threading.Thread(target=second, daemon=True)
    t.start()
    assert not waited.wait(0.2)  # full: the reader waits
    b.done(50)
    assert waited.wait(2) and b.bytes == 5 and b.peak == 50
    t2 = threading.Thread(target=b.add, args=(20,), daemon=True)  # 5 + 20 > 10: waits
    t2.start()
    t2.join(0.2)
    assert t2.is_alive()
    b.close()  # the server stopped: the reader must not stay blocked
    t2.join(2)
    assert not t2.is_alive() and b.bytes == 25
