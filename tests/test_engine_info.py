"""`engine.types.EngineInfo`: what an engine says about itself, typed — the in-process engine's, the remote backend's,
the aligned engine's (the KTO adapter added), read by attribute by the serving rules and the front ends, as JSON by
``/health`` and the benchmark reports, and still by key for callers written against the mapping it replaced."""

from __future__ import annotations

import asyncio
import json
from dataclasses import FrozenInstanceError, replace

import pytest
from aiohttp.test_utils import TestClient, TestServer

from edit_server.core.settings import Settings
from edit_server.http.app import make_app
from edit_server.serving.contexts import edit_history, on_cpu
from engine import Engine
from engine.api import EngineAPI
from engine.remote import RemoteConfig, RemoteEngine
from engine.types import EngineInfo
from tests.test_http import FakeEngine


@pytest.fixture(scope="module")
def eng() -> Engine:
    return Engine.load("tiny-random", device="cpu")


def test_the_engine_describes_itself_in_typed_fields(eng: Engine) -> None:
    info = eng.info
    assert isinstance(info, EngineInfo) and isinstance(eng, EngineAPI)
    assert (info.model, info.device, info.dtype, info.regime) == ("tiny-random", "cpu", "float32", "block_causal")
    assert info.format == "native" and info.edit_layout and info.edit_history == 3 and info.params > 0
    assert info.remote is None and info.revision is None and info.aligned is None
    with pytest.raises(FrozenInstanceError):
        info.model = "other"  # type: ignore[misc]
    # read by key as the mapping was: a field, a set field's membership, a default for an unset one
    assert info["model"] == "tiny-random" and info.get("device") == "cpu" and info.get("warning", "-") == "-"
    assert "model" in info and "revision" not in info and "nonsense" not in info
    with pytest.raises(KeyError):
        info["nonsense"]
    # its JSON: the fields set, none of a kind the engine is not (remote, revision)
    d = json.loads(json.dumps(info.as_dict()))
    assert d["model"] == "tiny-random" and d["block_size"] == info.block_size and "remote" not in d


def test_a_hub_revision_in_the_loaders_metadata_is_in_the_info(eng: Engine) -> None:
    from engine.specs import random_checkpoint

    ck = random_checkpoint("tiny")
    ck.meta["revision"] = "0123abc"
    other = Engine.from_checkpoint(ck, device="cpu")
    assert other.info.revision == "0123abc" and "revision" in other.info


def test_the_remote_backends_info_names_it_without_its_key() -> None:
    key = "sk-info-test-KEY"
    r = RemoteEngine(RemoteConfig(url="http://gpu.example.com:8377", kind="openai", api_key=key, model="coder"))
    try:
        info = r.info
        assert isinstance(info, EngineInfo) and (info.model, info.device, info.kind) == ("coder", "remote", "openai")
        assert info.remote and info.warning and "unencrypted" in info.warning and info.dtype is None
        assert key not in json.dumps(info.as_dict())
        assert not on_cpu(r)  # a remote backend's GPU counts as one
    finally:
        r.close()


def test_serving_reads_the_fields(eng: Engine) -> None:
    assert on_cpu(eng) and not on_cpu(type("G", (), {"info": EngineInfo(device="cuda:0")})())
    assert edit_history(Settings(), eng) == 3
    assert edit_history(Settings(), type("E", (), {"info": replace(eng.info, edit_history=1)})()) == 1
    assert on_cpu(None) and edit_history(Settings(history_size=2), None) == 2
    # an engine that still gives a dict: its known keys
    assert EngineInfo.of({"model": "m", "edit_history": 2, "extra": 1}) == EngineInfo(model="m", edit_history=2)
    assert EngineInfo.of(None) == EngineInfo()


def test_health_and_the_engine_route_answer_from_the_info() -> None:
    async def run() -> None:
        app = make_app(Settings(feedback_db=":memory:"), engine=FakeEngine())
        async with TestClient(TestServer(app)) as client:
            for _ in range(100):
                health = await (await client.get("/health")).json()
                if health["ready"]:
                    break
                await asyncio.sleep(0.05)
            assert health["model"] == {"model": "fake", "label": "", "device": "cpu"}
            r = await client.post("/v1/engine/complete",
                                  json={"kind": "infill", "prompt": {"prefix": "x = ", "suffix": ""}})
            assert r.status == 200 and (await r.json())["model"] == "fake"  # the info's model, no model asked

    asyncio.run(run())
