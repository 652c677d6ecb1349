"""Zed HTTP front end: prompt parsing (pure) and the aiohttp app (fake engine + tiny-random engine)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from edit_server.core.settings import Gate, Settings
from edit_server.http.app import make_app
from edit_server.http.metrics import parse_text
from edit_server.http.zed import (
    PromptError,
    apply_stops,
    detect_format,
    parse_qwen,
    parse_request,
    parse_zeta2,
    split_diffs,
    zeta2_reply,
)
from engine.api import OneByOne
from engine.templates import EditPrompt, FimPrompt
from engine.textdiff import unified_diff
from engine.types import AbortSignal, EngineInfo, GenerateResult

QWEN = "<|fim_prefix|>def add(a, b):\n    return <|fim_suffix|>\n\nprint(add(1, 2))\n<|fim_middle|>"
DIFF1 = unified_diff("src/calc.py", "def add(a, b):\n    pass\n", "def add(a, b):\n    return a + b\n")
DIFF2 = unified_diff("src/calc.py", "x = 1\n", "x = 2\n")
ZETA2 = (
    "<[fim-suffix]>\nprint(mul(2, 3))\n<[fim-prefix]>"
    "<filename>src/util.py\ndef helper():\n    return 1\n"
    "<filename>edit_history\n" + DIFF1 + "// User accepted prediction:\n" + DIFF2 + "\n"
    "<filename>src/calc.py\nimport math\n\n"
    "<<<<<<< CURRENT\ndef mul(a, b):\n    return a<|user_cursor|>\n=======\n<[fim-middle]>"
)


# ---- pure parsing --------------------------------------------------------------------------------
def test_detect_format() -> None:
    assert detect_format(QWEN) == "qwen"
    assert detect_format(ZETA2) == "zeta2"
    with pytest.raises(PromptError, match="unsupported prompt format"):
        detect_format("def f():\n    return 1")


def test_parse_qwen() -> None:
    p = parse_qwen(QWEN)
    assert p == FimPrompt(prefix="def add(a, b):\n    return ", suffix="\n\nprint(add(1, 2))\n", path="")
    with_path = parse_qwen("<|file_sep|>pkg/a.py\n" + QWEN)
    assert with_path.path == "pkg/a.py" and with_path.prefix == p.prefix


def test_parse_qwen_keeps_empty_parts_and_rejects_missing_markers() -> None:
    p = parse_qwen("<|fim_prefix|><|fim_suffix|><|fim_middle|>")
    assert (p.prefix, p.suffix) == ("", "")
    with pytest.raises(PromptError):
        parse_qwen("<|fim_prefix|>abc<|fim_middle|>")


def test_parse_zeta2() -> None:
    p = parse_zeta2(ZETA2)
    assert isinstance(p, EditPrompt)
    assert p.path == "src/calc.py"
    assert p.after == "\nprint(mul(2, 3))\n"
    assert p.before == "import math\n\n"
    assert p.region == "def mul(a, b):\n    return a\n"
    assert p.region[: p.cursor] == "def mul(a, b):\n    return a"
    assert [(s.kind, s.path, s.text) for s in p.sections] == [
        ("related", "src/util.py", "def helper():\n    return 1\n")]
    assert p.history == (DIFF1, DIFF2)  # split per diff, 'accepted' comment dropped


def test_parse_zeta2_without_cursor_history_or_related() -> None:
    p = parse_zeta2("<[fim-suffix]><[fim-prefix]><filename>a.rs\n<<<<<<< CURRENT\nfn main() {}\n"
                    "=======\n<[fim-middle]>")
    assert (p.path, p.before, p.region, p.after, p.cursor) == ("a.rs", "", "fn main() {}\n", "", 0)
    assert p.history == () and p.sections == ()


@pytest.mark.parametrize("bad", [
    "<[fim-prefix]><filename>a\n<<<<<<< CURRENT\nx\n=======\n<[fim-middle]>",  # no suffix first
    "<[fim-suffix]>a<[fim-prefix]><filename>a\nx\n=======\n<[fim-middle]>",  # no CURRENT marker
    "<[fim-suffix]>a<[fim-prefix]>junk<<<<<<< CURRENT\nx\n=======\n<[fim-middle]>",  # no <filename>
])
def test_parse_zeta2_rejects_malformed(bad: str) -> None:
    with pytest.raises(PromptError):
        parse_zeta2(bad)


def test_split_diffs_keeps_each_diff_whole() -> None:
    assert split_diffs(DIFF1 + DIFF2) == (DIFF1, DIFF2)
    assert split_diffs(DIFF1 + "\n" + DIFF2 + "\n\n") == (DIFF1, DIFF2)
    assert split_diffs("") == ()


def test_zeta2_reply() -> None:
    old = "def mul(a, b):\n    return a\n"
    assert zeta2_reply("def mul(a, b):\n    return a * b\n", old) == (
        "def mul(a, b):\n    return a * b\n>>>>>>> UPDATED\n")
    assert zeta2_reply("x = 1", "x = 0\n") == "x = 1\n>>>>>>> UPDATED\n"  # final newline restored
    assert zeta2_reply("  \n", old) == old + ">>>>>>> UPDATED\n"  # blank rewrite = no edit
    assert zeta2_reply("", "") == ">>>>>>> UPDATED\n"


def test_apply_stops() -> None:
    assert apply_stops("a + b<|endoftext|>junk", ["<|fim_prefix|>", "<|endoftext|>"]) == ("a + b", True)
    assert apply_stops("a + b", ["<|endoftext|>", ""]) == ("a + b", False)


def test_parse_request() -> None:
    r = parse_request({"model": "m", "prompt": QWEN, "max_tokens": 32, "stop": ["<|endoftext|>"]})
    assert (r.model, r.max_tokens, r.stop) == ("m", 32, ("<|endoftext|>",))
    assert parse_request({"prompt": QWEN, "stop": None}).max_tokens == 64
    for bad in ([], {"model": "m"}, {"prompt": 3}, {"prompt": "x", "max_tokens": 0},
                {"prompt": "x", "max_tokens": "9"}, {"prompt": "x", "stop": [1]}):
        with pytest.raises(PromptError):
            parse_request(bad)


# ---- the app, with a scripted engine -------------------------------------------------------------
def _result(text: str, finish: str = "end", n_prompt: int = 10, conf: float = 0.9) -> GenerateResult:
    return GenerateResult(text=text, tokens=list(range(len(text))), confidences=[conf] * len(text), steps=1,
                          forwards=2, prompt_tokens=n_prompt, cached_tokens=0, finish_reason=finish)  # type: ignore[arg-type]


class FakeEngine(OneByOne):
    """Records calls; ``gate`` (when set) blocks the engine thread until released."""

    info = EngineInfo(model="fake", device="cpu")

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, dict[str, Any]]] = []
        self.fim_text = "a + b<|endoftext|>tail"
        self.edit_text = "def mul(a, b):\n    return a * b\n"
        self.fail: Exception | None = None
        self.gate: threading.Event | None = None
        self.started = threading.Event()
        self.confidence = 0.9

    def _run(self, kind: str, prompt: Any, kw: dict[str, Any], text: str) -> GenerateResult:
        self.calls.append((kind, prompt, kw))
        self.started.set()
        if self.fail:
            raise self.fail
        abort: AbortSignal = kw["abort"]
        if self.gate is not None:
            while not self.gate.wait(0.01):
                if abort.aborted:
                    return _result("", "aborted")
        return _result(text, conf=self.confidence)

    def infill(self, prompt: FimPrompt, **kw: Any) -> GenerateResult:
        return self._run("infill", prompt, kw, self.fim_text)

    def rewrite(self, prompt: EditPrompt, **kw: Any) -> GenerateResult:
        return self._run("rewrite", prompt, kw, self.edit_text)


def app(eng: Any, token: str | None = None, **kw: Any) -> Any:
    return make_app(Settings(feedback_db=":memory:", **kw), engine=eng, token=token)


@pytest.fixture
async def fake() -> AsyncIterator[tuple[TestClient, FakeEngine]]:
    eng = FakeEngine()
    async with TestClient(TestServer(app(eng))) as client:
        yield client, eng


async def test_qwen_completion(fake: tuple[TestClient, FakeEngine]) -> None:
    client, eng = fake
    resp = await client.post("/v1/completions", json={
        "model": "zed-model", "prompt": QWEN, "max_tokens": 9999, "stop": ["<|endoftext|>"]})
    assert resp.status == 200
    body = await resp.json()
    assert body["object"] == "text_completion" and body["model"] == "zed-model"
    assert body["id"] and isinstance(body["created"], int)
    assert body["choices"] == [{"text": "a + b", "index": 0, "logprobs": None, "finish_reason": "stop"}]
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]
    kind, prompt, kw = eng.calls[0]
    assert kind == "infill" and prompt.prefix.endswith("return ") and kw["max_tokens"] == 256  # capped


async def test_zeta2_completion(fake: tuple[TestClient, FakeEngine]) -> None:
    client, eng = fake
    resp = await client.post("/v1/completions", json={"model": "m", "prompt": ZETA2, "max_tokens": 1024,
                                                      "stop": []})
    assert resp.status == 200
    text = (await resp.json())["choices"][0]["text"]
    assert text == "def mul(a, b):\n    return a * b\n>>>>>>> UPDATED\n"
    kind, prompt, _ = eng.calls[0]
    assert kind == "rewrite" and prompt.path == "src/calc.py" and len(prompt.history) == 2


async def test_bad_requests_get_400_json(fake: tuple[TestClient, FakeEngine]) -> None:
    client, eng = fake
    for data in ("{not json", '{"model": "m"}', '{"prompt": "plain text, no markers"}'):
        resp = await client.post("/v1/completions", data=data, headers={"Content-Type": "application/json"})
        assert resp.status == 400
        assert (await resp.json())["error"]["type"] == "invalid_request_error"
    assert eng.calls == []


async def test_engine_failure_is_500_and_server_lives_on(fake: tuple[TestClient, FakeEngine]) -> None:
    client, eng = fake
    eng.fail = RuntimeError("CUDA out of memory")
    resp = await client.post("/v1/completions", json={"prompt": QWEN})
    assert resp.status == 500
    assert "CUDA out of memory" in (await resp.json())["error"]["message"]
    eng.fail = None
    resp = await client.post("/v1/completions", json={"prompt": QWEN})
    assert resp.status == 200 and (await resp.json())["choices"][0]["text"] == "a + b<|endoftext|>tail"


async def test_newer_request_for_same_file_supersedes_older(fake: tuple[TestClient, FakeEngine]) -> None:
    client, eng = fake
    eng.gate = threading.Event()
    first = asyncio.ensure_future(client.post("/v1/completions", json={"prompt": ZETA2}))
    assert await asyncio.to_thread(eng.started.wait, 5)
    second = asyncio.ensure_future(client.post("/v1/completions", json={"prompt": ZETA2}))
    await asyncio.sleep(0.1)  # second is queued behind the first; its arrival aborted the first
    eng.gate.set()
    r1, r2 = await first, await second
    old_region = parse_zeta2(ZETA2).region
    assert (await r1.json())["choices"][0]["text"] == old_region + ">>>>>>> UPDATED\n"  # no edit
    assert (await r2.json())["choices"][0]["text"].startswith("def mul(a, b):\n    return a * b\n")
    assert [c[2]["abort"].aborted for c in eng.calls] == [True, False]


async def test_gate_hides_low_confidence_suggestions(fake: tuple[TestClient, FakeEngine]) -> None:
    client, eng = fake
    eng.confidence = 0.1  # below the default threshold 0.5
    r = await (await client.post("/v1/completions", json={"prompt": QWEN, "stop": ["<|endoftext|>"]})).json()
    assert r["choices"][0]["text"] == ""
    r = await (await client.post("/v1/completions", json={"prompt": ZETA2})).json()
    assert r["choices"][0]["text"] == parse_zeta2(ZETA2).region + ">>>>>>> UPDATED\n"  # unchanged
    async with TestClient(TestServer(app(eng, gate=Gate(enabled=False)))) as ungated:
        r = await (await ungated.post("/v1/completions", json={"prompt": QWEN, "stop": ["<|endoftext|>"]})).json()
        assert r["choices"][0]["text"] == "a + b"  # baseline: every non-empty suggestion is shown


async def test_health_and_bearer_token() -> None:
    eng = FakeEngine()
    async with TestClient(TestServer(app(eng, token="s3cret"))) as client:
        for _ in range(100):  # the model loads in the background: "loading" until the worker has it
            health = await client.get("/health")
            body = await health.json()
            if body["status"] == "ok":
                break
            assert body["state"] == "loading"
            await asyncio.sleep(0.05)
        assert health.status == 200 and body["model"]["model"] == "fake" and body["state"] == "ready"
        assert (await client.post("/v1/completions", json={"prompt": QWEN})).status == 401
        wrong = {"Authorization": "Bearer nope"}
        assert (await client.post("/v1/completions", json={"prompt": QWEN}, headers=wrong)).status == 401
        ok = {"Authorization": "Bearer s3cret"}
        assert (await client.post("/v1/completions", json={"prompt": QWEN}, headers=ok)).status == 200


# ---- the app, with the real tiny-random engine ---------------------------------------------------
@pytest.fixture(scope="module")
def tiny_engine() -> Any:
    from engine import Engine

    return Engine.load("tiny-random", device="cpu")


async def test_tiny_random_engine_serves_both_formats(tiny_engine: Any) -> None:
    async with TestClient(TestServer(app(tiny_engine))) as client:
        r = await client.post("/v1/completions", json={"model": "m", "prompt": QWEN, "max_tokens": 8,
                                                       "stop": ["<|endoftext|>"]})
        assert r.status == 200
        body = await r.json()
        assert body["usage"]["completion_tokens"] <= 8  # (random weights may decode to nothing shown)
        assert body["choices"][0]["finish_reason"] in ("stop", "length")
        r = await client.post("/v1/completions", json={"model": "m", "prompt": ZETA2, "max_tokens": 64})
        assert r.status == 200
        assert (await r.json())["choices"][0]["text"].endswith("\n>>>>>>> UPDATED\n")
        health = await (await client.get("/health")).json()
        assert health["status"] == "ok" and health["model"]
        metrics = parse_text(await (await client.get("/metrics")).text())
        assert metrics["edit_server_engine_prompt_tokens_total"] > 0  # both prompts reached the model
        assert metrics["edit_server_engine_batch_size_count"] == 2


# ---- the real CLI: `edit-server http` as a subprocess --------------------------------------------
@pytest.mark.e2e
def test_edit_server_http_subprocess(tmp_path: Any) -> None:
    import json
    import os
    import socket
    import subprocess
    import sys
    import time
    import urllib.error
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "EDIT_SERVER_HTTP_TOKEN": "tok"}
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "edit_server.cli", "http", "--model", "tiny-random",
                             "--device", "cpu", "--port", str(port)], env=env, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"

    def post(body: bytes, token: str | None = "tok") -> tuple[int, dict[str, Any]]:
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        req = urllib.request.Request(base + "/v1/completions", data=body, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)

    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as r:
                    health = json.load(r)
                if health["status"] == "ok":  # up at once, model loading in the background
                    break
                assert health["state"] == "loading", health
                time.sleep(0.3)
            except OSError:
                assert proc.poll() is None, (tmp_path / "server.log").read_text()
                assert time.monotonic() < deadline, "server did not come up"
                time.sleep(0.3)
        assert health["model"]["model"] == "tiny-random"
        body = json.dumps({"model": "m", "prompt": ZETA2, "max_tokens": 256, "stop": []}).encode()
        assert post(body, token=None)[0] == 401
        status, reply = post(body)
        assert status == 200 and reply["choices"][0]["text"].endswith(">>>>>>> UPDATED\n")
        status, reply = post(b"{oops")
        assert status == 400 and "not valid JSON" in reply["error"]["message"]
        qwen = json.dumps({"model": "m", "prompt": QWEN, "max_tokens": 8, "stop": []}).encode()
        assert post(qwen)[0] == 200  # still serving after a bad request
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


# ---- guards: a web page or a careless client cannot drive or stall the server ---------------------
async def test_only_json_from_loopback_hosts_and_origins(fake: tuple[TestClient, FakeEngine]) -> None:
    client, eng = fake
    r = await client.post("/v1/completions", data=json.dumps({"prompt": QWEN}),
                          headers={"Content-Type": "text/plain"})  # a "simple" cross-site form post
    assert r.status == 415 and (await r.json())["error"]["type"] == "invalid_request_error"
    r = await client.post("/v1/completions", json={"prompt": QWEN}, headers={"Host": "evil.example:8377"})
    assert r.status == 403 and "Host" in (await r.json())["error"]["message"]  # DNS rebinding
    r = await client.post("/v1/completions", json={"prompt": QWEN}, headers={"Origin": "https://evil.example"})
    assert r.status == 403 and "Origin" in (await r.json())["error"]["message"]
    r = await client.post("/v1/completions", json={"prompt": QWEN}, headers={"Origin": "http://localhost:3000"})
    assert r.status == 200
    assert len(eng.calls) == 1  # nothing refused reached the engine


async def test_allow_lists_admit_named_hosts_and_origins() -> None:
    from edit_server.core.settings import Http

    eng = FakeEngine()
    settings_kw = {"http": Http(allowed_hosts=["box.lan"], allowed_origins=["https://ide.example"])}
    async with TestClient(TestServer(app(eng, **settings_kw))) as client:
        r = await client.post("/v1/completions", json={"prompt": QWEN},
                              headers={"Host": "box.lan:8377", "Origin": "https://ide.example"})
        assert r.status == 200


async def test_body_and_prompt_limits() -> None:
    from edit_server.core.settings import Http

    eng = FakeEngine()
    async with TestClient(TestServer(app(eng, http=Http(max_body_bytes=4096, max_prompt_tokens=64)))) as client:
        r = await client.post("/v1/completions", json={"prompt": QWEN + "x" * 8000})
        assert r.status == 413
        r = await client.post("/v1/completions", json={
            "prompt": "<|fim_prefix|>" + "y = 1\n" * 800 + "<|fim_suffix|><|fim_middle|>"})
        assert r.status == 413 and "maxBodyBytes" in (await r.json())["error"]["message"]
        long_prompt = "<|fim_prefix|>" + "z" * 2000 + "<|fim_suffix|><|fim_middle|>"  # < 4 KB, > 64 tokens
        r = await client.post("/v1/completions", json={"prompt": long_prompt})
        assert r.status == 413 and "maxPromptTokens" in (await r.json())["error"]["message"]
        assert eng.calls == []


async def test_full_queue_is_503_with_retry_after_and_disconnect_cancels() -> None:
    from edit_server.core.settings import Http

    eng = FakeEngine()
    eng.gate = threading.Event()
    async with TestClient(TestServer(app(eng, http=Http(max_queue=1)), handler_cancellation=True)) as client:
        first = asyncio.ensure_future(client.post("/v1/completions", json={"prompt": QWEN}))
        assert await asyncio.to_thread(eng.started.wait, 5)
        r = await client.post("/v1/completions", json={"prompt": ZETA2})
        assert r.status == 503 and r.headers["Retry-After"] == "1"
        first.cancel()  # the client goes away: its generation is aborted between steps
        for _ in range(100):
            if eng.calls[0][2]["abort"].aborted:
                break
            await asyncio.sleep(0.02)
        assert eng.calls[0][2]["abort"].aborted
        eng.gate.set()
