"""The remote backend against a real ``edit-server http`` app (in-process, on a loopback port):
``/v1/engine/complete`` gives what the local engine gives, a client that goes away cancels the
server's engine job, the key is checked; and through the Pipeline: the prompt is built locally, so
secrets and excluded files never reach the bytes the remote receives."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from edit_server.core.settings import Settings, build_settings
from edit_server.http.app import make_app
from edit_server.serving.pipeline import Pipeline
from engine.api import OneByOne
from engine.remote import RemoteConfig, RemoteEngine
from engine.templates import EditPrompt, FimPrompt, Section
from engine.types import EngineInfo, GenerateResult
from tests.e2e.fake_engines import printable
from tests.remote_fake import Fake, wait_until
from tests.test_secrets_planted import formats, planted

FIM = FimPrompt(prefix="def add(a, b):\n    return ", suffix="\n\nprint(add(1, 2))\n", path="calc.py",
                history=("--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-def add(a):\n+def add(a, b):\n",),
                sections=(Section("definition", "util.py", "def helper():\n    return 1"),))
EDIT = EditPrompt(before="import math\n", region="def area(w, h):\n    return w * w\n", after="", cursor=4,
                  path="geo.py")


class Hanging(OneByOne):
    """Runs until its abort signal fires (or 20 s): shows whether a disconnect reaches the engine."""

    info = EngineInfo(model="hanging")
    tokenizer = args = None

    def __init__(self) -> None:
        self.started = threading.Event()
        self.aborted = threading.Event()

    def infill(self, prompt: Any, abort: Any = None, **kw: Any) -> GenerateResult:
        self.started.set()
        end = time.monotonic() + 20
        while time.monotonic() < end and not (abort is not None and abort.aborted):
            time.sleep(0.01)
        if abort is not None and abort.aborted:
            self.aborted.set()
        return GenerateResult(text="late", tokens=[1], confidences=[1.0], steps=1, forwards=1, prompt_tokens=1,
                              cached_tokens=0, finish_reason="aborted" if self.aborted.is_set() else "end")

    rewrite = infill


async def _serve(engine: Any, settings: Settings | None = None) -> AsyncIterator[str]:
    # aiohttp's TestServer cancels the handler of a client that disconnects, as `edit-server http`
    # does (app.serve: handler_cancellation=True, checked below)
    server = TestServer(make_app(settings or Settings(), engine=engine), host="127.0.0.1")
    await server.start_server()
    try:
        app = server.app
        assert app is not None
        from edit_server.http.app import PIPELINE

        await asyncio.to_thread(app[PIPELINE].worker.ready.wait, 30)
        yield f"http://127.0.0.1:{server.port}"
    finally:
        await server.close()


async def test_engine_route_gives_what_the_local_engine_gives() -> None:
    local = printable("tiny-random", "cpu")
    want_fim = local.infill(FIM, max_tokens=12)
    want_edit = local.rewrite(EDIT)
    async for url in _serve(printable("tiny-random", "cpu")):
        eng = RemoteEngine(RemoteConfig(url=url))
        try:
            got_fim = await asyncio.to_thread(eng.infill, FIM, 12, False, None, "file:///calc.py")
            got_edit = await asyncio.to_thread(eng.rewrite, EDIT)
        finally:
            eng.close()
    assert got_fim.text == want_fim.text and got_fim.text.strip()
    assert got_fim.confidences == pytest.approx(want_fim.confidences) and got_fim.tokens == want_fim.tokens
    assert got_fim.prompt_tokens == want_fim.prompt_tokens and got_fim.finish_reason == want_fim.finish_reason
    assert got_edit.text == want_edit.text and got_edit.confidences == pytest.approx(want_edit.confidences)
    assert eng.degraded is None and eng.calls["remote"] == 2


async def test_a_client_that_goes_away_cancels_the_servers_engine_job() -> None:
    hanging = Hanging()
    async for url in _serve(hanging):
        from engine.types import AbortSignal

        eng = RemoteEngine(RemoteConfig(url=url, timeout_s=60))
        abort = AbortSignal()
        try:
            call = asyncio.ensure_future(asyncio.to_thread(eng.infill, FIM, 8, False, None, None, abort))
            assert await asyncio.to_thread(hanging.started.wait, 20)
            abort.abort()  # the LSP request was superseded / cancelled
            res = await call
            assert res.aborted
            assert await asyncio.to_thread(hanging.aborted.wait, 20), "the server kept generating"
        finally:
            eng.close()


def test_the_served_app_cancels_handlers_of_clients_that_go_away(monkeypatch: pytest.MonkeyPatch) -> None:
    from edit_server.http import app as app_mod

    seen: dict[str, Any] = {}

    def run_app(app: Any, **kw: Any) -> None:
        seen.update(kw)
        app[app_mod.PIPELINE].stop()

    monkeypatch.setattr(app_mod.web, "run_app", run_app)
    app_mod.serve("127.0.0.1", 0, Settings(model="tiny-random", device="cpu", feedback_db=":memory:"))
    assert seen.get("handler_cancellation") is True


async def test_wrong_key_is_a_named_failure_and_bad_bodies_are_400() -> None:
    settings, _ = build_settings({"http": {"apiKeys": ["team:right-key"]}})
    async for url in _serve(printable("tiny-random", "cpu"), settings):
        eng = RemoteEngine(RemoteConfig(url=url, api_key="wrong-key"))
        ok = RemoteEngine(RemoteConfig(url=url, api_key="right-key"))
        try:
            with pytest.raises(Exception, match="HTTP 401"):
                await asyncio.to_thread(eng.infill, FIM, 4)
            assert (await asyncio.to_thread(ok.infill, FIM, 4)).finish_reason != "aborted"
            bad = await asyncio.to_thread(ok.transport.post_many, [
                __import__("engine.remote.transport", fromlist=["Request"]).Request(
                    "/v1/engine/complete", {"kind": "rewrite", "prompt": {"before": 1}})])
            assert "HTTP 400" in str(bad[0])
        finally:
            eng.close()
            ok.close()


def test_prompts_are_built_locally_secrets_and_excluded_files_never_sent(tmp_path: Path) -> None:
    fmts = formats(random.Random(5))
    root = tmp_path / "ws"
    root.mkdir()
    (root / ".env").write_text("DATABASE_PASSWORD=env-only-hunter2-value\n")
    (root / "util.py").write_text(planted("py", fmts, "neighbour"))
    doc = "from util import helper_neighbour\n" + planted("py", fmts, "open") + "\n\ndef total(a, b):\n    return \n"
    (root / "main.py").write_text(doc)
    fake = Fake()
    statuses: list[tuple[str, str]] = []
    settings, bad = build_settings({"remote": {"url": fake.url, "kind": "openai", "fallback": "none"},
                                    "feedbackDb": ":memory:", "gate": {"enabled": False}})
    assert bad == []
    p = Pipeline(settings, lambda s, m: statuses.append((s, m)), roots=[root])
    try:
        assert p.worker.ready.wait(30)
        env_uri, uri = (root / ".env").as_uri(), (root / "main.py").as_uri()
        p.open_document(env_uri, str(root / ".env"), (root / ".env").read_text(), 1)
        p.open_document(uri, str(root / "main.py"), doc, 1)

        async def ask() -> Any:
            return await p.inline_completion(uri, len(doc) - 1)

        ans = asyncio.run(ask())
    finally:
        p.stop()
        fake.close()
    assert ans is not None and ans.suggestion.text == "a + b"  # the remote's answer, through the local gate
    sent = b"".join(r["raw"] for r in fake.requests)
    assert b"def total(a, b)" in sent and b"helper_open" in sent  # the prompt did go out
    assert sent.count(b"[REDACTED]") >= len(fmts)  # the secrets were there, and redacted here
    leaks = [(fmt, part) for fmt, _n, _v, parts in fmts for part in parts if part.encode() in sent]
    assert leaks == []
    assert b"hunter2" not in sent and b"DATABASE_PASSWORD" not in sent
    assert wait_until(lambda: any(s == "ready" for s, _ in statuses))
