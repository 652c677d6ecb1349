"""KTO on the server side: feedback store v2 (prompt + output of shown suggestions, migration), records
from the store and eval reports split by group, the reward gate (uses r when an aligned adapter is
loaded, else the confidence gate), versioned adapters + rollback, and the `align` CLI end to end."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from edit_server.cli import align_data, main
from edit_server.cli.align_common import AlignOutcome, fit, save
from edit_server.selectivity import gate, kto_gate
from edit_server.selectivity.feedback import SCHEMA_VERSION, FeedbackStore
from edit_server.serving import loader
from engine.engine import Engine
from engine.reward import Reward
from engine.specs import random_checkpoint
from engine.templates import EditPrompt, FimPrompt, Section
from engine.train.kto.records import assign_splits, prompt_from_dict, read_set
from tests.conftest import HUMANEVAL_DIR
from tests.test_kto import synthetic_set, write_stacked

FIM = FimPrompt("def f(x):\n    return ", "\n", path="a.py", history=("--- a/a.py\n+++ b/a.py\n",),
                sections=(Section("definition", "b.py", "def g(): pass"),))
EDIT = EditPrompt("import os\n", "x = 1\ny = x\n", "print(y)\n", 3, path="b.py")


def test_feedback_store_keeps_text_of_shown_suggestions_and_migrates_v1(tmp_path: Path) -> None:
    db = tmp_path / "fb.sqlite3"
    con = sqlite3.connect(db)  # a v1 store written by an older server
    con.executescript("CREATE TABLE events (ts REAL NOT NULL, suggestion TEXT NOT NULL, kind TEXT NOT NULL, "
                      "event TEXT NOT NULL, score REAL, uri TEXT, extra TEXT);"
                      "INSERT INTO events VALUES (1.0, 'old', 'fim', 'accepted', 0.9, 'file:///o.py', NULL);")
    con.commit()
    con.close()
    fb = FeedbackStore(db)
    assert fb._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert fb.events("old") == ["accepted"]  # old rows kept
    fb.offered("a", "fim", "file:///a.py", 0.8, prompt=FIM, completion="x + 1", shown_text="x + 1")
    fb.offered("b", "edit", "file:///b.py", 0.3, prompt=EDIT, completion="x = 2\ny = x\n")
    fb.offered("c", "fim", "file:///a.py", 0.5, prompt=FIM, completion="never shown")
    assert fb.text_of("a") is None  # nothing stored before it is shown
    fb.shown("a")
    fb.accepted("a")
    fb.shown("b")
    fb.typed_over("file:///b.py")  # b rejected
    fb.typed_over("file:///a.py")  # c was never shown: forgotten, no text kept
    assert fb.text_of("c") is None and fb.text_of("b") is not None
    assert prompt_from_dict(json.loads(fb.text_of("a")[0])) == FIM
    fb.close()
    recs, stats = align_data.from_feedback(db)
    got = {r.id: r for r in recs}
    assert stats == {"decided": 3, "no_text": 1}  # "old" has an outcome but no text
    assert got["feedback:a"].label and got["feedback:a"].kind == "fim" and got["feedback:a"].completion == "x + 1"
    assert not got["feedback:b"].label and got["feedback:b"].kind == "edit"
    assert prompt_from_dict(got["feedback:b"].prompt) == EDIT
    fb = FeedbackStore(db, keep_text=False)  # opt-out: nothing new stored; purge deletes the rest
    fb.offered("d", "fim", "file:///a.py", 0.8, prompt=FIM, completion="y")
    fb.shown("d")
    assert fb.text_of("d") is None and fb.purge_text() == 2 and fb.text_of("a") is None


def test_eval_reports_become_records_and_heldout_runs_never_train(tmp_path: Path) -> None:
    from evals.cases import Case, Cursor, Edit, write_cases

    text = "def f(x):\n    return x\n\n\nprint(f(2))\n"
    off = text.index("x\n") + 0
    cases = [Case("fim1", "fim", "python", "m.py", {"m.py": text}, Cursor("m.py", off), [Edit("m.py", off, off, "x")],
                  meta={"repo": "r1"}),
             Case("quiet", "edit", "python", "m.py", {"m.py": text}, Cursor("m.py", 3), None, meta={"repo": "r1"}),
             Case("e1", "edit", "python", "n.py", {"n.py": text}, Cursor("n.py", 3),
                  [Edit("n.py", 4, 5, "g")], meta={"repo": "r2"})]
    run = tmp_path / "replay"
    run.mkdir()
    write_cases(run / "cases.jsonl", cases)
    rows = [{"id": "fim1", "kind": "fim", "suggestion": [["m.py", off, off, "x + 1"]], "accepted": False},
            {"id": "quiet", "kind": "edit", "suggestion": [["m.py", 4, 5, "h"]], "accepted": False,
             "quiet_case": True},
            {"id": "e1", "kind": "edit", "suggestion": [["n.py", 4, 5, "g"]], "accepted": True}]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    recs = {r.id: r for r in align_data.from_eval(run)}
    assert recs["eval:replay:fim1"].completion == "x + 1" and not recs["eval:replay:fim1"].label
    assert recs["eval-truth:replay:fim1"].completion == "x" and recs["eval-truth:replay:fim1"].label
    quiet = recs["eval-truth:replay:quiet"]
    assert quiet.kind == "noedit" and quiet.completion == prompt_from_dict(quiet.prompt).region
    e1 = recs["eval:replay:e1"]
    assert e1.label and e1.kind == "edit" and e1.completion.startswith("def g(x)")
    assert "eval-truth:replay:e1" not in recs  # accepted: its truth is already the completion
    assert {r.group for r in recs.values()} == {"repo:r1:m.py", "repo:r2:n.py"}
    held = list(recs.values())
    for r in held:
        r.split = "heldout" if r.group == "repo:r1:m.py" else ""
    assign_splits(held, heldout_fraction=0.0)
    assert all(r.split == "heldout" for r in held if r.group == "repo:r1:m.py")
    assert all(r.split == "train" for r in held if r.group == "repo:r2:n.py")


# ---- the gate ----------------------------------------------------------------------------------
def calibration(adapter: Path) -> None:
    """Reward score ≥ 0 ⇒ accepted (a perfectly informative reward) for both kinds."""
    outs = [AlignOutcome(f"{k}{i}", k, s, s >= 0) for k in ("fim", "edit") for i, s in enumerate(
        [x / 10 for x in range(-20, 20)])]
    save(fit(outs, 0.9, 10), kto_gate.calibration_path(adapter), 0.9)


def test_gate_uses_the_reward_when_an_aligned_adapter_is_loaded(tmp_path: Path) -> None:
    adapter = write_stacked(tmp_path)
    calibration(adapter)
    eng = Engine.from_checkpoint(random_checkpoint("tiny"), device="cpu")
    aligned, scorer = loader.aligned_engine(eng, adapter)
    assert scorer is not None and aligned.info["aligned"]["adapter"] == str(adapter)
    prompt = FimPrompt("x = ", "\n", path="a.py")
    res = aligned.infill(prompt, max_tokens=8, cache_key="k")
    rw = scorer.score_fim(prompt, res, cache_key="k")
    assert rw.adapter == str(adapter) and rw.cached
    d = kto_gate.decide("fim", "abc", [0.99] * 3, rw, enabled=True, threshold=0.5)
    assert d.show == (rw.score >= kto_gate.calibration_for(adapter).thresholds["fim"])
    # confident but low reward: hidden; unsure but high reward: shown — the reward decides
    low = Reward(-5.0, 0.0, 5, 0.0, 0.0, 1.0, True, str(adapter))
    high = Reward(5.0, 0.0, 5, 0.0, 0.0, 1.0, True, str(adapter))
    d = kto_gate.decide("fim", "abc", [0.99] * 3, low, enabled=True, threshold=0.5)
    assert not d.show and d.reason == "low reward" and d.score == pytest.approx(0.0)
    d = kto_gate.decide("edit", "abc", [0.01] * 3, high, enabled=True, threshold=0.5)
    assert d.show and d.score == pytest.approx(1.0)
    assert not kto_gate.decide("fim", "  ", [0.99], high, enabled=True, threshold=0.5).show  # rule checks stay
    assert kto_gate.decide("fim", "abc", [0.01], low, enabled=False, threshold=0.5).show  # gate off
    # no aligned adapter / no reward / no calibration: the confidence gate, unchanged
    for reward in (None, Reward(-5.0, 0.0, 5, 0.0, 0.0, 1.0, True, str(tmp_path / "uncalibrated"))):
        d = kto_gate.decide("fim", "abc", [0.99] * 3, reward, enabled=True, threshold=0.5)
        assert d == gate.decide("abc", [0.99] * 3, True, 0.5)
    plain = Engine.from_checkpoint(random_checkpoint("tiny"), device="cpu")
    assert loader.aligned_engine(plain, "off") == (plain, None)
    assert loader.aligned_engine(plain, tmp_path / "missing") == (plain, None)  # logged, not raised
    plain.model.fast_cpu = "int8"  # the fused int8 CPU layout cannot take a stacked LoRA: refused, logged
    assert loader.aligned_engine(plain, adapter) == (plain, None)
    eng2, sc2 = loader.load_engine("tiny-random", "cpu", kto=adapter)  # the serving loader: fp32 + adapter
    assert sc2 is not None and eng2.info["aligned"]["adapter"] == str(adapter)
    eng3, sc3 = loader.load_engine("tiny-random", "cpu", kto="off")
    assert sc3 is None and "aligned" not in eng3.info


def test_serving_with_an_aligned_adapter_never_imports_training_code() -> None:
    """ARCHITECTURE: serving never imports engine/train/ nor the offline align*.py modules."""
    import subprocess
    import sys

    code = ("import sys\n"
            "import edit_server.lsp.server, edit_server.http.app, edit_server.serving.pipeline, edit_server.serving.worker\n"
            "import edit_server.selectivity.kto_gate, engine.reward, engine.loading.stacked\n"
            "print(sorted(m for m in sys.modules if m.startswith('engine.train') or '.align' in m))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parent.parent)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_versions_current_and_rollback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "adapters"
    d.mkdir()
    for v in (1, 2, 3):
        (d / f"kto-v{v}.safetensors").write_bytes(b"x")
    assert kto_gate.versions(d) == [1, 2, 3] and kto_gate.current_adapter(d) is None
    kto_gate.set_current(d, "kto-v3")
    assert kto_gate.current_adapter(d) == d / "kto-v3"
    assert main(["align", "rollback", "--adapters-dir", str(d)]) == 0
    assert kto_gate.current_adapter(d) == d / "kto-v2"
    assert main(["align", "rollback", "--adapters-dir", str(d), "--to", "none"]) == 0
    assert kto_gate.current_adapter(d) is None
    assert main(["align", "rollback", "--adapters-dir", str(d), "--to", "v9"]) == 1
    assert main(["align", "rollback", "--adapters-dir", str(d), "--to", "v1"]) == 0
    main(["align", "rollback", "--adapters-dir", str(d), "--list"])
    assert "* kto-v1" in capsys.readouterr().out


# ---- CLI end to end ----------------------------------------------------------------------------
TINY = ["--model", "tiny-random", "--device", "cpu", "--threads", "1", "--rank", "4", "--alpha", "8",
        "--lr", "2e-2", "--beta", "1", "--max-prompt", "64", "--max-canvas", "16", "--no-progress",
        "--min-count", "3"]


def test_align_kto_cli_trains_calibrates_and_the_local_loop_versions(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    data = synthetic_set(tmp_path / "data", n=60)
    out = tmp_path / "run" / "kto"
    assert main(["align", "kto", "--data", str(data), "--out", str(out), "--steps", "20", "--top-layers", "1",
                 "--z0-pairs", "2", *TINY]) == 0
    text = capsys.readouterr().out
    assert "reward margin" in text and Path(f"{out}.safetensors").is_file()
    from safetensors.torch import load_file

    assert {k.split(".")[2] for k in load_file(f"{out}.safetensors")} == {"1"}  # the top layer only
    cal = json.loads(kto_gate.calibration_path(out).read_text())
    assert "fim" in cal["kinds"] and len(read_set(data, "heldout")) == 10
    kto_gate.calibration_path(out).unlink()  # re-fit the calibration of the trained adapter, no training
    mtime = Path(f"{out}.safetensors").stat().st_mtime_ns
    assert main(["align", "kto", "--data", str(data), "--out", str(out), "--calibrate-only", *TINY]) == 0
    assert json.loads(kto_gate.calibration_path(out).read_text()) == cal
    assert Path(f"{out}.safetensors").stat().st_mtime_ns == mtime and "gate fim" in capsys.readouterr().out
    # local loop: a feedback store with stored prompts → kto-v1, made current
    db = tmp_path / "fb.sqlite3"
    fb = FeedbackStore(db)
    for i in range(30):
        good = i % 3 == 0
        p = FimPrompt(f"def f{i}():\n    x = ", "\n", path=f"m{i}.py")
        fb.offered(f"s{i}", "fim", f"file:///m{i}.py", 0.5, prompt=p, completion=str(i % 10) if good else '"no"')
        fb.shown(f"s{i}")
        fb.accepted(f"s{i}") if good else fb.typed_over(f"file:///m{i}.py")
    fb.close()
    ad = tmp_path / "adapters"
    args = ["align", "kto", "--feedback", str(db), "--adapters-dir", str(ad), "--steps", "4", *TINY]
    assert main([*args, "--min-records", "100"]) == 1  # too little feedback: nothing written
    assert kto_gate.versions(ad) == []
    assert main([*args, "--min-records", "10"]) == 0
    assert kto_gate.versions(ad) == [1] and kto_gate.current_adapter(ad) == ad / "kto-v1"
    assert (ad / "kto-v1.data" / "train.jsonl").is_file()


def test_align_data_cli_reports_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "fb.sqlite3"
    fb = FeedbackStore(db)
    for i, end in enumerate(["accepted", "rejected", "partial"]):
        fb.offered(f"s{i}", "edit", f"file:///f{i}.py", 0.5, prompt=EDIT, completion=f"x = {i + 10}\ny = x\n")
        fb.shown(f"s{i}")
        if end == "accepted":
            fb.accepted(f"s{i}")
        elif end == "partial":
            fb.partial(f"s{i}", 2)
        else:
            fb.typed_over(f"file:///f{i}.py")
    fb.close()
    out = tmp_path / "data"
    assert main(["align", "data", "--feedback", str(db), "--out", str(out), "--heldout-fraction", "0"]) == 0
    text = capsys.readouterr().out
    assert "train    edit             2            1" in text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"]["train"]["edit"] == {"desirable": 2, "undesirable": 1}
    assert main(["align", "data", "--out", str(tmp_path / "empty")]) == 1


def test_measure_metrics_compare_gates_at_equal_coverage() -> None:
    from edit_server.cli.align_common import problem_of
    from edit_server.cli.align_measure import at_coverage, auroc, gate_rows

    scores, labels = [0.9, 0.8, 0.3, 0.2], [True, False, True, False]
    assert at_coverage(scores, labels, 0.5) == 0.5 and at_coverage(scores, labels, 0.25) == 1.0
    assert at_coverage(scores, labels, 0.0) is None
    assert auroc(scores, labels) == pytest.approx(0.75) and auroc(scores, [True] * 4) is None
    items = [{"ok": y, "confidence": s, "reward": -s} for s, y in zip(scores, labels, strict=True)]
    conf, rew = gate_rows("x", items, [0.5], {"confidence": 0.5, "reward": None})
    assert conf["shown@threshold"] == 0.5 and conf["precision@threshold"] == 0.5
    assert rew["auroc"] == pytest.approx(0.25) and rew["shown@threshold"] is None
    assert problem_of("SingleLineInfilling/HumanEval/12/L3") == "HumanEval/12"


def test_gates_at_equal_coverage_count_precision_acceptance_and_no_edit_silence() -> None:
    from edit_server.cli.align_measure import coverage_rows, shown_metrics

    # 5 cases: 2 right, 1 half right, 2 no-edit (one with a suggestion, one silent)
    items = [{"kind": "fim", "has": True, "ok": True, "share": 1.0, "confidence": 0.9, "reward": 0.1},
             {"kind": "edit", "has": True, "ok": False, "share": 0.5, "confidence": 0.8, "reward": 0.5},
             {"kind": "fim", "has": True, "ok": True, "share": 1.0, "confidence": 0.3, "reward": 0.9},
             {"kind": "edit", "has": True, "ok": False, "share": 0.0, "quiet": True, "confidence": 0.95,
              "reward": -1.0},
             {"kind": "edit", "has": False, "ok": False, "share": 0.0, "quiet": True, "confidence": 0.0,
              "reward": float("-inf")}]
    m = shown_metrics(items, {0, 3})
    assert m == {"coverage": 0.4, "precision": 0.5, "accepted/shown": 0.5, "no-edit correct": 0.5}
    rows = {(r["gate"], r["at"]): r for r in coverage_rows(
        "s", items, [0.4, 1.0], {"confidence": 0.5, "reward": {"fim": 0.5}})}
    assert rows["confidence", "coverage 40%"] == {**rows["confidence", "coverage 40%"], "precision": 0.5,
                                                  "no-edit correct": 0.5}  # top 2: the quiet case + case 0
    assert rows["KTO reward", "coverage 40%"]["precision"] == 0.5  # cases 2 and 1
    assert rows["KTO reward", "coverage 40%"]["accepted/shown"] == 0.75
    assert rows["KTO reward", "coverage 40%"]["no-edit correct"] == 1.0
    assert rows["KTO reward", "coverage 100%"]["coverage"] == 0.8  # the silent case is never shown
    # deployed: confidence ≥ 0.5 → cases 0, 1, 3; reward ≥ 0.5 for fim (case 2), no edit calibration →
    # the confidence rule for edits (cases 1, 3)
    assert rows["confidence", "deployed rule"]["coverage"] == pytest.approx(0.6)
    assert rows["KTO reward", "deployed rule"]["coverage"] == pytest.approx(0.6)
    assert rows["KTO reward", "deployed rule"]["precision"] == pytest.approx(1 / 3)


def test_align_measure_runs_held_out_cases_before_and_after(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from engine.train.kto.records import Record, prompt_to_dict, write_set

    fixtures = Path(__file__).parent / "fixtures" / "evals" / "cases.jsonl"
    adapter = write_stacked(tmp_path)
    calibration(adapter)
    data = tmp_path / "data"  # paths.py of the fixtures' repository was trained on: its 2 cases are skipped
    p = prompt_to_dict(FimPrompt("x = ", "\n", path="paths.py"))
    write_set(data, [Record("t", "eval", "fim", True, "repo:evals:paths.py", p, "1", split="train"),
                     Record("u", "eval", "fim", False, "repo:evals:paths.py", p, "2", split="train")])
    out = tmp_path / "m"
    assert main(["align", "measure", "--adapter", str(adapter), "--data", str(data), "--model", "tiny-random",
                 "--device", "cpu", "--threads", "1", "--limit", "0", "--cases", str(fixtures),
                 "--max-tokens", "8", "--no-progress", "--out", str(out)]) == 0
    res = json.loads((out / "measure.json").read_text())
    assert res["cases"] == ["fim-perimeter", "next-call-site"] and res["cases_skipped"] == 2
    assert len(res["case_items"]) == 4 and res["tasks"] == []
    sets = {r["set"] for r in res["quality"]}
    assert sets == {"cases, before (reference)", "cases, after (KTO)"}
    at = {(r["set"], r["gate"], r["at"]) for r in res["at_coverage"]}
    for outputs in ("reference", "aligned"):
        for g in ("confidence", "KTO reward"):
            for where in ("coverage 50%", "coverage 25%", "deployed rule"):
                assert (f"cases, {outputs} outputs", g, where) in at
    after = [x for x in res["case_items"][2:] if x["has"]]
    assert res["cost"]["n"] == len(after) and res["cost"]["cached"] == len(after)
    assert "accepted/shown" in capsys.readouterr().out
    from edit_server.cli.align_measure import read_heldout_cases

    assert read_heldout_cases([fixtures], set(), language="markdown") == ([], 0)
    assert len(read_heldout_cases([fixtures], set(), limit=3, language="python")[0]) == 3


@pytest.mark.skipif(not HUMANEVAL_DIR.is_dir(), reason="no HumanEval-infilling data")
def test_humaneval_reports_become_records_grouped_by_problem(tmp_path: Path) -> None:
    from evals.datasets import load_humaneval

    a, b = load_humaneval("single-line")[:2]
    run = tmp_path / "he"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"kind": "humaneval-infill", "split": "single-line"}))
    rows = [{"id": a.task_id, "middle": a.canonical_solution, "passed": True, "exact": True, "mean_confidence": 0.9},
            {"id": b.task_id, "middle": "    return None\n", "passed": False, "exact": False},
            {"id": "x", "middle": "", "error": "boom"}]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    recs = {r.id: r for r in align_data.from_eval(run)}
    assert set(recs) == {f"humaneval:{a.task_id}", f"humaneval:{b.task_id}", f"humaneval-truth:{b.task_id}"}
    ra, rb, tb = recs[f"humaneval:{a.task_id}"], recs[f"humaneval:{b.task_id}"], recs[f"humaneval-truth:{b.task_id}"]
    assert ra.label and not rb.label and tb.label and tb.completion == b.canonical_solution.rstrip("\n")
    assert rb.completion == "    return None"  # the harness's line end is not part of the completion
    assert ra.group == "humaneval:HumanEval/" + a.task_id.split("/")[2] and tb.group == rb.group
    assert prompt_from_dict(rb.prompt) == FimPrompt(b.prompt, b.suffix, path=f"{b.entry_point}.py")


def test_the_server_worker_scores_with_the_aligned_adapter(tmp_path: Path) -> None:
    """Settings gate.kto → the worker loads the aligned engine, every outcome carries the implicit
    reward, and the pipeline's show/hide decision is the reward's."""
    from edit_server.core.messages import Job
    from edit_server.core.requests import FimRequest
    from edit_server.core.settings import Gate, Settings
    from edit_server.selectivity.select import fim_result
    from edit_server.serving.worker import EngineWorker

    adapter = write_stacked(tmp_path)
    calibration(adapter)
    states: list[tuple[str, str]] = []
    w = EngineWorker(lambda s, m: states.append((s, m)))
    try:
        settings = Settings(model="tiny-random", device="cpu", gate=Gate(kto=str(adapter)), max_tokens=8)
        w.load("tiny-random", "cpu", settings)
        assert w.ready.wait(60), states
        assert w.scorer is not None
        text = "def add(a, b):\n    return \n"
        req = FimRequest("u", "/w/a.py", text, 1, len(text) - 1)
        out = w.submit(Job("u", req, settings)).result(60)
        assert out is not None and out.reward is not None and out.reward.adapter == str(adapter)
        sug = fim_result(req, "a + b", [0.01] * 5, settings, out.reward)  # unsure tokens, the reward decides
        cal = kto_gate.calibration_for(adapter)
        assert sug is not None and sug.show == (out.reward.score >= cal.thresholds["fim"])
        assert sug.score == pytest.approx(cal.probability("fim", out.reward.score))
        off = Settings(model="tiny-random", device="cpu", gate=Gate(kto="off"))
        w.load("tiny-random", "cpu", off)  # clears `ready` at once; set again once reloaded
        assert w.ready.wait(60) and w.scorer is None
    finally:
        w.stop()
        w.join(5)
