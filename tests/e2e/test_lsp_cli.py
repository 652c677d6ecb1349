"""The `edit-server` command: --version, check, --tcp, demo (real subprocesses, tiny-random on CPU)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edit_server import __version__
from tests.conftest import ROOT

pytestmark = pytest.mark.e2e
ENV = dict(os.environ, TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
CMD = [sys.executable, "-m", "edit_server"]


def test_version() -> None:
    out = subprocess.run([*CMD, "--version"], capture_output=True, text=True, timeout=60, env=ENV)
    assert out.returncode == 0 and out.stdout.strip() == f"edit-server {__version__}"


def test_check_reports_what_it_used() -> None:
    out = subprocess.run([*CMD, "check", "--model", "tiny-random", "--device", "cpu"], capture_output=True,
                         text=True, timeout=240, env=ENV)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "model      tiny-random  (random weights" in text
    assert "device     cpu" in text and "attention " in text
    assert "completion" in text and "next edit" in text and " ms " in text


def test_check_broken_model_names_the_problem(tmp_path) -> None:
    bad = tmp_path / "nope.gguf"
    bad.write_bytes(b"not a gguf")
    out = subprocess.run([*CMD, "check", "--model", str(bad), "--device", "cpu"], capture_output=True,
                         text=True, timeout=240, env=ENV)
    assert out.returncode == 1 and "nope.gguf" in out.stderr


def _frame(obj: dict) -> bytes:
    body = json.dumps(obj).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def _read(stream) -> dict:
    """One LSP message from a buffered binary stream (keeps whatever follows it buffered)."""
    n = 0
    while (line := stream.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            n = int(line.split(b":")[1])
    return json.loads(stream.read(n))


def test_tcp_transport() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([*CMD, "--tcp", f"127.0.0.1:{port}", "--model", "tiny-random", "--device", "cpu"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=60)
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "server did not listen"
                time.sleep(0.2)
        with sock, sock.makefile("rb") as stream:
            sock.sendall(_frame({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                 "params": {"capabilities": {}, "initializationOptions": {"feedbackDb": ":memory:"}}}))
            while (msg := _read(stream)).get("id") != 1:
                pass
            assert "inlineCompletionProvider" in msg["result"]["capabilities"]
            sock.sendall(_frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown"}))
            while _read(stream).get("id") != 2:
                pass
            sock.sendall(_frame({"jsonrpc": "2.0", "method": "exit"}))
    finally:
        proc.kill()
        proc.wait(10)


@pytest.mark.slow
def test_demo_replays_a_session(tmp_path: Path) -> None:
    log, scratch = tmp_path / "server.log", tmp_path / "tmp"
    scratch.mkdir()
    out = subprocess.run([*CMD, "demo", "--model", "tiny-random", "--device", "cpu", "--no-gate",
                          "--server-log", str(log)], capture_output=True, text=True, timeout=280,
                         env={**ENV, "TMPDIR": str(scratch)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert not list(scratch.glob("edit-server-demo-*"))  # its scratch workspace is gone again
    assert "model ready after" in out.stdout
    assert out.stdout.count(" ms  '    return 2") == 6 and out.stdout.count(" ms  ") == 7
    assert "edit(s)" in out.stdout
    # the server logged one line per model call, with the prompt size, cache reuse and step counts
    calls = [ln for ln in log.read_text().splitlines() if "edit_server.serving.worker" in ln and " steps, " in ln]
    fim = [ln for ln in calls if " fim file:" in ln]
    assert 1 <= len(fim) <= 6 and sum(" edit file:" in ln for ln in calls) == 1
    assert all("prompt tokens" in ln and "decode" in ln for ln in calls)
