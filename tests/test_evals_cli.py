"""CI smoke evals: the `edit-server eval ...` commands end to end (tiny-random model, a few cases)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import git
import pytest

from tests.conftest import HUMANEVAL_DIR, ROOT

FIXTURE = Path(__file__).parent / "fixtures" / "evals" / "cases.jsonl"
needs_data = pytest.mark.skipif(not HUMANEVAL_DIR.is_dir(), reason="no shared HumanEval data")


def _eval(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "edit_server.cli", "eval", *args, "--no-progress"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


@needs_data
def test_humaneval_oracle_passes_everything(tmp_path: Path) -> None:
    _eval("humaneval-infill", "--oracle", "--split", "multi-line", "--limit", "4", "--data",
          str(HUMANEVAL_DIR), "--out", str(tmp_path))
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["summary"]["n"] == 4 and rep["summary"]["pass@1"] == 1.0
    assert rep["summary"]["exact_match"] == 1.0


@needs_data
def test_humaneval_tiny_random_smoke_and_resume(tmp_path: Path) -> None:
    args = ("humaneval-infill", "--model", "tiny-random", "--device", "cpu", "--limit", "3",
            "--max-tokens", "8", "--data", str(HUMANEVAL_DIR), "--out", str(tmp_path))
    out = _eval(*args).stdout
    assert "pass@1" in out
    rep = json.loads((tmp_path / "report.json").read_text())
    cases = rep["cases"]
    assert [c["id"] for c in cases] == ["SingleLineInfilling/HumanEval/0/L0",
                                        "SingleLineInfilling/HumanEval/0/L1",
                                        "SingleLineInfilling/HumanEval/0/L2"]
    for c in cases:
        assert 0 < c["tokens"] <= 8 and c["steps"] >= 1 and c["latency_ms"] > 0
        assert c["tokens_per_forward"] == pytest.approx(c["tokens"] / c["steps"])
        assert c["middle"].endswith("\n") and c["status"] in {"passed", "failed", "timeout"}
    assert rep["summary"]["pass@1"] == sum(c["passed"] for c in cases) / 3
    assert (tmp_path / "summary.md").is_file() and (tmp_path / "latency.png").stat().st_size > 1000
    # resumable: a second run finds every case cached and regenerates nothing
    lines = (tmp_path / "results.jsonl").read_text()
    _eval(*args)
    assert (tmp_path / "results.jsonl").read_text() == lines
    # another configuration is refused on the same --out
    bad = subprocess.run([sys.executable, "-m", "edit_server.cli", "eval", *args[:-2], "--out",
                          str(tmp_path), "--steps-mode", "one-per-step", "--limit", "1", "--no-progress"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert bad.returncode != 0 and "another configuration" in bad.stderr


def test_replay_build_only_writes_the_case_format(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    r = git.Repo.init(repo)
    who = git.Actor("t", "t@example.invalid")
    for i, text in enumerate(["x = 1\n", "x = 1\ny = x + 41\n"]):
        (repo / "m.py").write_text(text)
        r.index.add(["m.py"])
        r.index.commit(f"c{i}", author=who, committer=who)
    out = tmp_path / "out"
    res = _eval("replay", str(repo), "--mode", "commits", "--build-only", "--out", str(out), "--seed", "1")
    assert "cases from" in res.stdout
    from evals.cases import read_cases

    cases = read_cases(out / "cases.jsonl")
    assert [c.meta["category"] for c in cases] == ["fim"]
    (e,) = cases[0].expected or []
    text = cases[0].files["m.py"]
    assert text[: e.start] + e.text + text[e.end:] == "x = 1\ny = x + 41\n"


@pytest.mark.e2e
def test_eval_cases_through_the_real_server(tmp_path: Path) -> None:
    _eval("cases", str(FIXTURE), "--model", "tiny-random", "--device", "cpu", "--no-gate",
          "--max-tokens", "8", "--context-budget", "256", "--timeout", "120", "--out", str(tmp_path),
          "--restart-every", "2", timeout=280)
    rep = json.loads((tmp_path / "report.json").read_text())
    recs = {r["id"]: r for r in rep["cases"]}
    assert set(recs) == {"fim-perimeter", "next-call-site", "quiet-home", "quiet-fim"}
    for r in recs.values():
        assert r["error"] is None and r["latency_ms"] > 0
        if r["shown"]:  # gate off: scores still come back in the accept command
            assert r["score"] is not None and 0.0 <= r["score"] <= 1.0
        if r["quiet_case"]:
            assert r["correct"] == (not r["shown"])
    s = rep["summary"]
    assert s["n"] == 4 and s["quiet_cases"] == 2 and s["errors"] == 0
    assert set(rep["by_category"]) == {"fim", "next-edit", "no-edit"}
    assert (tmp_path / "precision_coverage.png").is_file() and (tmp_path / "summary.md").is_file()
    assert rep["config"]["gate"] is False


@pytest.mark.e2e
@needs_data
def test_humaneval_via_lsp(tmp_path: Path) -> None:
    _eval("humaneval-infill", "--via-lsp", "--model", "tiny-random", "--device", "cpu", "--limit", "2",
          "--max-tokens", "8", "--timeout", "120", "--data", str(HUMANEVAL_DIR), "--out", str(tmp_path),
          timeout=280)
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["summary"]["n"] == 2 and rep["summary"]["errors"] == 0
    for c in rep["cases"]:
        assert c["latency_ms"] > 0 and c["middle"].endswith("\n") and not c["edited_outside_hole"]
        assert c["score"] is None or 0.0 <= c["score"] <= 1.0


@pytest.mark.e2e
def test_server_that_cannot_load_its_model_is_a_clear_error(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "edit_server.cli", "eval", "cases", str(FIXTURE), "--model",
           str(tmp_path / "missing.gguf"), "--device", "cpu", "--limit", "1", "--timeout", "60",
           "--out", str(tmp_path / "out"), "--no-progress"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 1 and "missing.gguf" in res.stderr and "Traceback" not in res.stderr


def test_missing_inputs_are_clear_errors(tmp_path: Path) -> None:
    for args in (["cases", str(tmp_path / "none.jsonl")],
                 ["humaneval-infill", "--oracle", "--data", str(tmp_path), "--out", str(tmp_path / "o")]):
        res = subprocess.run([sys.executable, "-m", "edit_server.cli", "eval", *args],
                             capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert res.returncode == 1 and res.stderr.startswith("edit-server eval: error:")


def test_init_options_nest_dotted_keys_and_keep_the_gate_switch(tmp_path: Path) -> None:
    import argparse

    from evals.cli_common import init_options
    from evals.runners import CaseRunner

    ns = argparse.Namespace(max_tokens=None, context_budget=None,
                            init_option=['gate.calibration="/x/gate.json"', "historySize=3", "model=raw text"])
    opts = init_options(ns)
    assert opts == {"feedbackDb": ":memory:", "gate": {"calibration": "/x/gate.json"}, "historySize": 3,
                    "model": "raw text"}
    runner = CaseRunner(model="tiny-random", device="cpu", root=tmp_path, log_path=tmp_path / "log",
                        gate=False, threshold=0.3, timeout=5, init_extra=opts)
    assert runner.init["gate"] == {"calibration": "/x/gate.json", "enabled": False, "threshold": 0.3}
    assert runner.init["historySize"] == 3
    with pytest.raises(SystemExit, match="historySize is not an object"):
        init_options(argparse.Namespace(init_option=["historySize=3", "historySize.x=1"]))
