"""A fake remote for the remote-backend tests: a threaded ``http.server`` on a free loopback port that
records every request (path, headers, raw body bytes) and answers per a settable ``mode``."""

from __future__ import annotations

import json
import math
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Fake:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.mode = "ok"  # ok | 500 | slow | hang | garbage
        self.text = "a + b"
        self.chat_text = "```\nnew code\n```"
        self.received = threading.Event()  # a request arrived
        self.closed = threading.Event()  # the client closed a connection we were holding ("hang")
        self.release = threading.Event()  # ends "slow" / "hang" early (teardown)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                fake.requests.append({"path": self.path, "headers": dict(self.headers), "raw": raw,
                                      "body": json.loads(raw or b"{}")})
                fake.received.set()
                if fake.mode == "500":
                    return self._send(500, {"error": {"message": "out of memory", "type": "server_error"}})
                if fake.mode == "slow":
                    fake.release.wait(10)
                if fake.mode == "hang":  # wait until the client goes away (or teardown)
                    sock: socket.socket = self.connection
                    while not fake.release.is_set():
                        r, _, _ = select.select([sock], [], [], 0.05)
                        if r and sock.recv(1, socket.MSG_PEEK) == b"":
                            fake.closed.set()
                            return
                    return
                if fake.mode == "garbage":
                    return self._send(200, ["not", "an", "object"])
                self._send(200, fake.answer(self.path))

            def _send(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, path: str) -> dict[str, Any]:
        lp = [math.log(0.5)] * 3
        if path.endswith("/chat/completions"):
            return {"choices": [{"message": {"role": "assistant", "content": self.chat_text},
                                 "finish_reason": "stop", "logprobs": {"content": [{"logprob": 0.0}]}}],
                    "usage": {"prompt_tokens": 7, "completion_tokens": 2}}
        if path.endswith("/generate"):
            return {"text": self.text, "meta_info": {"prompt_tokens": 5, "completion_tokens": 3,
                                                     "finish_reason": {"type": "stop"},
                                                     "output_token_logprobs": [[v, 1, None] for v in lp]}}
        return {"choices": [{"text": self.text, "index": 0, "finish_reason": "stop",
                             "logprobs": {"tokens": ["a", " +", " b"], "token_logprobs": lp}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 3}}

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(cond: Any, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return False
