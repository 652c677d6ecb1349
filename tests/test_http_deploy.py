"""The deployment artefacts agree with the code: the Dockerfile's command parses with the real CLI and
probes a real route, docs/DEPLOY.md's config and manifests parse, /ready is 503 until the model loads."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from edit_server.cli import build_parser
from edit_server.core.settings import Settings, resolve
from edit_server.http.app import make_app
from edit_server.serving.loader import FACTORY_ENV
from tests.test_http import FakeEngine

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
DEPLOY = (ROOT / "docs" / "DEPLOY.md").read_text()


def _instruction(name: str) -> str:
    lines = [ln for ln in DOCKERFILE.replace("\\\n", " ").splitlines() if ln.startswith(name + " ")]
    assert len(lines) == 1, name
    return lines[0][len(name) + 1:].strip()


def test_dockerfile_command_is_the_real_cli() -> None:
    argv = json.loads(_instruction("ENTRYPOINT")) + json.loads(_instruction("CMD"))
    assert argv[0] == "edit-server"
    args = build_parser().parse_args(argv[1:])
    assert args.func.__name__ == "run_http" and args.host == "0.0.0.0" and args.model == "default"
    assert str(args.port) == _instruction("EXPOSE") == "8765"
    assert args.config == "/etc/edit-server/config.json" and "/etc/edit-server/config.json" in DOCKERFILE
    for src in re.findall(r"^COPY (\S+)", DOCKERFILE, flags=re.M):  # what it copies exists
        assert (ROOT / src).exists(), src
    torch = re.search(r"ARG TORCH_VERSION=(\S+)", DOCKERFILE)
    assert torch and f"torch=={torch.group(1)}" in (ROOT / ".ci" / "run").read_text()  # the CI's torch
    assert "from engine.loading.base import fetch_base" in DOCKERFILE
    from engine.loading.base import fetch_base  # noqa: F401  (the build step imports it)

    probe = re.search(r"http://127\.0\.0\.1:8765(/\w+)", _instruction("HEALTHCHECK"))
    app = make_app(Settings(feedback_db=":memory:"), engine=FakeEngine())
    gets = {r.resource.canonical for r in app.router.routes() if r.method == "GET"}
    assert probe and probe.group(1) in gets and {"/health", "/ready", "/metrics"} <= gets


def test_deploy_doc_config_and_manifests_parse() -> None:
    blocks = re.findall(r"```(\w+)\n(.*?)```", DEPLOY, flags=re.S)
    configs = [json.loads(b) for lang, b in blocks if lang == "json"]
    assert configs
    for c in configs:
        settings, bad = resolve(c)
        assert not bad, bad
    assert settings.http.rate_limit_per_minute == 120 and settings.http.api_key_file
    yaml = pytest.importorskip("yaml")
    docs = [d for lang, b in blocks if lang == "yaml" for d in yaml.safe_load_all(b) if d]
    kinds = {d.get("kind") for d in docs}
    assert {"Deployment", "Service", "Ingress", "Secret", "ConfigMap"} <= kinds
    dep = next(d for d in docs if d.get("kind") == "Deployment")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["readinessProbe"]["httpGet"]["path"] == "/ready" and c["ports"][0]["containerPort"] == 8765
    assert build_parser().parse_args(["http", *c["args"]]).device == "cuda"
    cm = next(d for d in docs if d.get("kind") == "ConfigMap")
    assert not resolve(json.loads(cm["data"]["config.json"]))[1]


GATE = threading.Event()


def slow_engine(spec: str, device: str) -> Any:
    """EDIT_SERVER_ENGINE_FACTORY target: a model that loads when the test says so."""
    GATE.wait(10)
    return FakeEngine()


async def test_ready_is_503_until_the_model_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FACTORY_ENV, f"{__name__}:slow_engine")
    GATE.clear()
    async with TestClient(TestServer(make_app(Settings(feedback_db=":memory:"), token="k"))) as client:
        r = await client.get("/ready")  # no key needed, like /health
        assert r.status == 503 and (await r.json())["ready"] is False
        assert (await (await client.get("/health")).json())["state"] == "loading"
        GATE.set()
        for _ in range(200):
            r = await client.get("/ready")
            if r.status == 200:
                break
            await asyncio.sleep(0.02)
        assert r.status == 200 and (await r.json())["ready"] is True
