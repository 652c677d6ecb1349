"""`edit-server http` as a team server: bearer keys (list, file, env), per-user rate limits, requests from
many users batched into one engine call without superseding each other, /metrics and /health."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from edit_server.core.settings import Http, Settings, resolve
from edit_server.http.app import make_app
from edit_server.http.auth import KeyRing, RateLimiter, parse_entries, retry_after
from edit_server.http.metrics import parse_text
from engine.api import Call
from engine.types import GenerateResult
from tests.test_http import QWEN, ZETA2, FakeEngine

ALICE, BOB = {"Authorization": "Bearer ka"}, {"Authorization": "Bearer kb"}


class BatchRecorder(FakeEngine):
    """Records how many calls each ``complete`` got (the batch the worker formed)."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def complete(self, calls: Sequence[Call]) -> list[GenerateResult]:
        self.batches.append(len(calls))
        return super().complete(calls)


def team_app(eng: Any, **http: Any) -> Any:
    return make_app(Settings(feedback_db=":memory:", http=Http(**http)), engine=eng)


# ---- keys ----------------------------------------------------------------------------------------------
def test_key_entries_and_settings() -> None:
    assert parse_entries(["alice:s3cret", "", "# note", "t0k"]) == {"s3cret": "alice", "t0k": "key2"}
    s, bad = resolve({"http": {"apiKeys": ["a:b"], "rateLimitPerMinute": 30, "apiKeyFile": "/k"}})
    assert not bad and s.http.api_keys == ["a:b"] and s.http.rate_limit_per_minute == 30
    _, bad = resolve({"http": {"rateLimitPerMinute": -1}})
    assert bad and "rateLimitPerMinute" in bad[0]


def test_key_file_is_reread_when_it_changes(tmp_path: Path) -> None:
    f = tmp_path / "keys"
    f.write_text("carol:kc\n# a comment\n")
    ring = KeyRing(key_file=str(f))
    assert ring.required and ring.user("Bearer kc") == "carol" and ring.user("Bearer nope") is None
    f.write_text("dave:kd\n")
    os.utime(f, (1e9, 1e9))  # a different mtime, whatever the clock resolution
    ring._checked = 0.0  # (it stats the file at most once a second)
    assert ring.user("Bearer kd") == "dave" and ring.user("Bearer kc") is None
    missing = KeyRing(key_file=str(tmp_path / "absent"))
    assert missing.required and missing.user("Bearer ") is None  # fails closed
    assert not KeyRing().required and KeyRing(token="t").user("bearer t") == "token"


async def test_keys_guard_every_route_but_health() -> None:
    async with TestClient(TestServer(team_app(FakeEngine(), api_keys=["alice:ka", "kb"]))) as client:
        assert (await client.post("/v1/completions", json={"prompt": QWEN})).status == 401
        assert (await client.post("/v1/fim/completions", json={"prompt": "x"}, headers={"Authorization": "Bearer x"})).status == 401
        assert (await client.post("/v1/completions", json={"prompt": QWEN}, headers=ALICE)).status == 200
        assert (await client.post("/v1/fim/completions", json={"prompt": "x"}, headers=BOB)).status == 200
        health = await (await client.get("/health")).json()
        assert health["auth"] is True and health["ready"] is True
        assert (await client.get("/metrics")).status == 401
        text = await (await client.get("/metrics", headers=ALICE)).text()
        m = parse_text(text)
        assert m['edit_server_http_user_requests_total{user="alice"}'] == 1
        assert m['edit_server_http_user_requests_total{user="key2"}'] == 1
        assert m['edit_server_http_requests_total{route="/v1/completions",status="401"}'] == 1
        assert "ka" not in text.replace("ka\"", "")  # key names, never keys
    async with TestClient(TestServer(team_app(FakeEngine(), api_keys=["ka"], metrics_auth=False))) as client:
        assert (await client.get("/metrics")).status == 200


# ---- rate limits ----------------------------------------------------------------------------------------
def test_token_bucket() -> None:
    rl = RateLimiter(per_minute=60, burst=2)
    assert rl.take("a", now=0.0) == 0.0 and rl.take("a", now=0.0) == 0.0
    wait = rl.take("a", now=0.0)
    assert wait == pytest.approx(1.0) and retry_after(wait) == "1" and retry_after(0.01) == "1"
    assert rl.take("b", now=0.0) == 0.0  # per user
    assert rl.take("a", now=1.0) == 0.0  # refilled one a second
    assert RateLimiter().take("a") == 0.0  # off


async def test_rate_limit_is_per_user_with_retry_after() -> None:
    eng = FakeEngine()
    async with TestClient(TestServer(team_app(eng, api_keys=["alice:ka", "bob:kb"], rate_limit_per_minute=2))) as client:
        for _ in range(2):
            assert (await client.post("/v1/completions", json={"prompt": QWEN}, headers=ALICE)).status == 200
        r = await client.post("/v1/completions", json={"prompt": QWEN}, headers=ALICE)
        assert r.status == 429 and int(r.headers["Retry-After"]) >= 1
        assert "rateLimitPerMinute" in (await r.json())["error"]["message"]
        assert (await client.post("/v1/completions", json={"prompt": QWEN}, headers=BOB)).status == 200
        m = parse_text(await (await client.get("/metrics", headers=BOB)).text())
        assert m['edit_server_http_rate_limited_total{user="alice"}'] == 1
        assert m['edit_server_http_requests_total{route="/v1/completions",status="429"}'] == 1
        assert len(eng.calls) == 3


# ---- many users, one worker ---------------------------------------------------------------------------
async def test_concurrent_users_are_batched_and_never_supersede_each_other() -> None:
    eng = BatchRecorder()
    eng.gate = threading.Event()
    keys = [f"user{i}:k{i}" for i in range(4)]
    async with TestClient(TestServer(team_app(eng, api_keys=keys))) as client:
        def post(i: int) -> Any:  # every user edits a file with the same path (their own checkout)
            return asyncio.ensure_future(client.post("/v1/completions", json={"prompt": ZETA2},
                                                     headers={"Authorization": f"Bearer k{i}"}))

        first = post(0)
        assert await asyncio.to_thread(eng.started.wait, 5)  # user0's request is in the engine
        rest = [post(i) for i in (1, 2, 3)]
        for _ in range(200):  # wait until all three are queued behind it
            m = parse_text(await (await client.get("/metrics", headers={"Authorization": "Bearer k0"})).text())
            if m["edit_server_http_inflight_requests"] == 4:
                break
            await asyncio.sleep(0.02)
        assert m["edit_server_engine_queue_depth"] == 3
        await asyncio.sleep(0.1)
        eng.gate.set()
        replies = [await (await r).json() for r in (first, *rest)]
        assert all(r["choices"][0]["text"].startswith("def mul(a, b):\n    return a * b") for r in replies)
        assert eng.batches == [1, 3]  # the three queued requests ran as one batched engine call
        assert not any(c[2]["abort"].aborted for c in eng.calls)  # same path, other users: no supersede
        m = parse_text(await (await client.get("/metrics", headers={"Authorization": "Bearer k1"})).text())
        assert m["edit_server_engine_batch_size_count"] == 2 and m["edit_server_engine_batch_size_sum"] == 4
        assert m['edit_server_engine_batch_size_bucket{le="2"}'] == 1
        assert m['edit_server_engine_batch_size_bucket{le="4"}'] == 2


async def test_same_user_same_file_still_supersedes() -> None:
    eng = BatchRecorder()
    eng.gate = threading.Event()
    async with TestClient(TestServer(team_app(eng, api_keys=["alice:ka"]))) as client:
        first = asyncio.ensure_future(client.post("/v1/completions", json={"prompt": ZETA2}, headers=ALICE))
        assert await asyncio.to_thread(eng.started.wait, 5)
        second = asyncio.ensure_future(client.post("/v1/completions", json={"prompt": ZETA2}, headers=ALICE))
        await asyncio.sleep(0.2)
        eng.gate.set()
        await first, await second
        assert [c[2]["abort"].aborted for c in eng.calls] == [True, False]


# ---- /metrics and /health ----------------------------------------------------------------------------------
async def test_metrics_text_format_and_health(tiny: Any) -> None:
    async with TestClient(TestServer(team_app(tiny))) as client:
        await client.post("/v1/completions", json={"prompt": QWEN, "max_tokens": 8})
        await client.post("/v1/fim/completions", json={"prompt": "x = ", "max_tokens": 8})
        await client.post("/v1/completions", data="{oops", headers={"Content-Type": "application/json"})
        await client.get("/nowhere")
        r = await client.get("/metrics")
        assert r.status == 200 and r.content_type == "text/plain"
        text = await r.text()
        for line in text.splitlines():  # exposition format: comments or `name{labels} value`
            assert line.startswith("# HELP ") or line.startswith("# TYPE ") or len(line.rsplit(" ", 1)) == 2
        m = parse_text(text)
        assert m['edit_server_http_requests_total{route="/v1/completions",status="200"}'] == 1
        assert m['edit_server_http_requests_total{route="/v1/completions",status="400"}'] == 1
        assert m['edit_server_http_requests_total{route="/v1/fim/completions",status="200"}'] == 1
        assert m['edit_server_http_requests_total{route="other",status="404"}'] == 1  # no raw paths
        buckets = [v for k, v in m.items() if k.startswith('edit_server_http_request_duration_seconds_bucket{route="/v1/completions"')]
        assert buckets == sorted(buckets) and buckets[-1] == 2  # cumulative, +Inf = count
        assert m["edit_server_engine_batch_size_count"] == 2 and m["edit_server_engine_forwards_total"] > 0
        assert m["edit_server_engine_tokens_per_forward_count"] == 2 and m["edit_server_model_ready"] == 1
        assert "# TYPE edit_server_engine_tokens_per_forward histogram" in text
        health = await (await client.get("/health")).json()
        assert health["status"] == "ok" and health["ready"] and health["model"]["model"] == "tiny-random"
        assert health["queue"] == {"inflight": 0, "max": 16} and health["auth"] is False
        assert health["version"] and health["uptime_s"] >= 0 and health["error"] is None


@pytest.fixture(scope="module")
def tiny() -> Any:
    from engine import Engine

    return Engine.load("tiny-random", device="cpu")
