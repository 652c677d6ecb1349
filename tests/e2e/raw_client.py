"""A raw byte-level stdio client for hostile-input tests: it writes exactly the bytes it is given."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from typing import Any

from tests.conftest import ROOT

ENV = dict(os.environ, TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1",
           EDIT_SERVER_ENGINE_FACTORY="tests.e2e.fake_engines:scripted")


def frame(obj: Any) -> bytes:
    body = json.dumps(obj).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class RawServer:
    def __init__(self, *extra: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "edit_server", "--model", "tiny-random", "--device", "cpu", *extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env or ENV)
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        self.stderr = b""

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for chunk in iter(lambda: self.proc.stderr.read1(65536), b""):  # type: ignore[union-attr]
            self.stderr += chunk

    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    return
                if not line.strip():
                    break
                k, _, v = line.decode().partition(":")
                if k.lower() == "content-length":
                    length = int(v)
            assert length is not None
            self.messages.put(json.loads(out.read(length)))

    def send(self, data: bytes | dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(frame(data) if isinstance(data, dict) else data)
        self.proc.stdin.flush()

    def wait_for(self, pred: Any, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            msg = self.messages.get(timeout=max(0.01, deadline - time.monotonic()))
            self.seen.append(msg)
            if pred(msg):
                return msg

    def response(self, rid: Any, timeout: float = 60.0) -> dict[str, Any]:
        return self.wait_for(lambda m: m.get("id") == rid and "method" not in m, timeout)

    def request(self, rid: Any, method: str, params: Any = None, timeout: float = 60.0) -> dict[str, Any]:
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return self.response(rid, timeout)

    def initialize(self, **options: Any) -> dict[str, Any]:
        opts = {"feedbackDb": ":memory:", "gate": {"enabled": False}, **options}
        res = self.request("init", "initialize", {"capabilities": {}, "initializationOptions": opts})
        self.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})

        def ready(m: dict[str, Any]) -> bool:
            return m.get("method") == "$/editServer/status" and m["params"]["state"] == "ready"

        if not any(ready(m) for m in self.seen):  # it may have come before the initialize reply
            self.wait_for(ready)
        return res

    def close(self) -> int:
        try:
            return self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)
