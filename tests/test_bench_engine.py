"""`edit-server bench engine` on tiny-random: both decoding modes, ratio, prefix reuse."""

from __future__ import annotations

import json

import pytest

from edit_server.cli import build_parser

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_bench_engine_json(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDIT_SERVER_INT4", "line")  # the levers set for a run are in its report
    monkeypatch.setenv("EDIT_SERVER_HTTP_TOKEN", "secret")  # ... and nothing else of the environment
    args = build_parser().parse_args(
        ["bench", "engine", "--model", "tiny-random", "--device", "cpu", "--prompt", "64",
         "--tokens", "16", "--threshold", "0.9,0.0", "--contexts", "128,512", "--json"])
    assert args.func(args) == 0
    r = json.loads(capsys.readouterr().out)
    dec = r["decoding"]
    assert dec["ar"]["tokens"] == 16 and dec["ar"]["tokens_per_forward"] == 1.0
    rows = {(d["threshold"], d["mode"]): d for d in dec["diffusion"]}
    assert set(rows) == {(0.9, "block"), (0.9, "adaptive"), (0.0, "block"), (0.0, "adaptive")}
    strict, loose = rows[0.9, "block"], rows[0.0, "block"]
    assert all(d["tokens"] == 16 for d in rows.values())
    assert strict["steps"] == 16  # random weights: ~1 token per step at tau 0.9
    assert loose["steps"] == 16 // 8 and loose["tokens_per_step"] == 8.0  # tau 0: a block per step
    assert loose["speedup_vs_ar"] > 0 and strict["tokens_per_s"] > 0
    # the window computes fewer positions than whole blocks when ~1 token is unmasked per step
    assert rows[0.9, "adaptive"]["positions"] < strict["positions"]
    ctx = {p["context"]: p for p in r["prefill"]}
    assert set(ctx) == {128, 512}
    for p in ctx.values():  # a 1-token edit at the end recomputes one token
        assert p["recomputed"] == 1 and p["recomputed_frac"] <= 0.05
    assert r["memory"]["peak_rss_mb"] > 0 and r["machine"]["cpu_count"] >= 1
    assert r["machine"]["overrides"] == {"EDIT_SERVER_INT4": "line"}


def test_bench_engine_table(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDIT_SERVER_INT8_SMALL", "4")
    args = build_parser().parse_args(
        ["bench", "engine", "--model", "tiny-random", "--device", "cpu", "--prompt", "32",
         "--tokens", "8", "--contexts", "64"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "autoregressive" in out and "diffusion tau=0.9" in out and "vs AR" in out
    assert "cold ms" in out and "random weights" in out
    assert "; EDIT_SERVER_INT8_SMALL=4" in out.splitlines()[1]  # the header names the levers set
