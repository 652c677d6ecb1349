"""`--model ORG/NAME` through the real LSP server: the download (from a local fake hub) is reported as
LSP work-done progress while the editor waits, and the ready status names the pinned revision."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from evals.lsp_client import LspClient, server_command
from tests.conftest import ROOT
from tests.test_hub import COMMIT, REPO, FakeHub, model_files  # noqa: F401 (the fixture)

pytestmark = pytest.mark.e2e


def test_hub_model_download_reports_progress(model_files: dict[str, bytes], tmp_path: Path) -> None:  # noqa: F811
    async def run() -> LspClient:
        with FakeHub(model_files) as hub:
            env = {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(tmp_path / "cache"), "HF_HUB_DISABLE_XET": "1",
                   "HF_HUB_DISABLE_PROGRESS_BARS": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
                   "TOKENIZERS_PARALLELISM": "false"}
            env = {**{k: v for k, v in os.environ.items() if not k.startswith("HF_")}, **env}
            client = LspClient(server_command(REPO, "cpu"), env=env, stderr_path=tmp_path / "stderr.log")
            await client.start(tmp_path, {"feedbackDb": ":memory:"})
            try:
                assert await client.wait_ready(120) == "ready"
            finally:
                await client.stop()
            return client

    client = asyncio.run(run())
    kinds = [p["value"]["kind"] for m, p in client.notifications if m == "$/progress"]
    assert [m for m, _ in client.notifications].count("window/workDoneProgress/create") == 1
    assert kinds[0] == "begin" and kinds[-1] == "end" and set(kinds) <= {"begin", "report", "end"}
    loading = [p["message"] for m, p in client.notifications if m == "$/editServer/status" and p["state"] == "loading"]
    assert any(msg.endswith("(100%)") for msg in loading)
    ready = [p["message"] for m, p in client.notifications if m == "$/editServer/status" and p["state"] == "ready"]
    assert ready and f"{REPO}@{COMMIT[:12]}" in ready[0]
