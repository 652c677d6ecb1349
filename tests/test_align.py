"""`edit-server align gate`: isotonic calibration of the show/hide threshold from logged outcomes."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from edit_server.cli import align, align_common, main
from edit_server.core.settings import Settings
from edit_server.selectivity import thresholds
from edit_server.selectivity.feedback import FeedbackStore


def test_isotonic_is_monotone_and_pools_violators() -> None:
    pts = align_common.isotonic([0.1, 0.2, 0.3, 0.4, 0.5], [0, 1, 0, 1, 1])
    assert [p for _, p in pts] == sorted(p for _, p in pts)
    assert pts == [(0.1, 0.0), (0.2, 0.5), (0.4, 1.0)]  # (0.2, 0.3) pooled; x = lowest score of a step


def synthetic(n: int, kind: str = "fim", seed: int = 0) -> list[align_common.AlignOutcome]:
    """P(accepted) = score: a perfectly calibrated score."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        s = rng.random()
        out.append(align_common.AlignOutcome(f"{kind}{i}", kind, s, rng.random() < s))
    return out


def test_threshold_reaches_the_target_precision_on_held_out_data() -> None:
    data = synthetic(4000)
    cal = align_common.fit(data, target_precision=0.8)["fim"]
    assert cal.precision >= 0.8 and 0.45 < cal.threshold < 0.75  # P=s: mean over [t,1] ≥ .8 ⇒ t ≈ .6
    looser = align_common.fit(data, target_precision=0.6)["fim"]
    assert looser.threshold < cal.threshold and looser.coverage > cal.coverage
    # unreachable target: show nothing
    assert align_common.fit(data, target_precision=1.01)["fim"].coverage == 0.0
    assert align_common.fit(synthetic(5), 0.8) == {}  # too few outcomes to fit


def test_outcomes_from_the_feedback_store_and_eval_reports(tmp_path: Path) -> None:
    db = tmp_path / "fb.sqlite3"
    fb = FeedbackStore(db)
    for sid, score, end in [("a", 0.9, "accepted"), ("b", 0.2, "rejected"), ("c", 0.5, "expired"),
                            ("d", 0.7, "partial"), ("e", 0.4, None)]:
        fb.offered(sid, "edit", "file:///x.py", score)
        fb.shown(sid)
        if end == "accepted":
            fb.accepted(sid)
        elif end == "partial":
            fb.partial(sid, 3)
        elif end == "rejected":
            fb.typed_over("file:///x.py", keep={"a", "c", "d", "e"})
        elif end == "expired":
            fb.expire(now=1e12)
    fb.close()
    got = {o.id: (o.kind, o.score, o.accepted) for o in align.from_feedback(db)}
    assert got["a"] == ("edit", 0.9, True) and got["b"][2] is False and got["d"][2] is True
    assert "e" not in got or got["e"][2] is False  # undecided suggestions are left out (or expired)
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"id": "1", "kind": "fim", "score": 0.8, "suggestion": [{"text": "x"}], "accepted": True},
            {"id": "2", "kind": "fim", "score": 0.3, "suggestion": [{"text": "y"}], "accepted": False},
            {"id": "3", "kind": "fim", "score": 0.9, "suggestion": [{"text": "z"}], "accepted": True,
             "quiet_case": True},  # a suggestion where silence was right is never "accepted"
            {"id": "4", "kind": "edit", "score": None, "suggestion": [], "accepted": False}]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [(o.id, o.accepted) for o in align.from_eval(run)] == [("1", True), ("2", False), ("3", False)]


def test_outcomes_from_a_humaneval_run_through_the_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``eval humaneval-infill --via-lsp`` rows: shown completions with a score, accepted = tests pass;
    a missing report or feedback store is named, not a traceback."""
    run = tmp_path / "he"
    run.mkdir()
    rows = [{"id": "a", "middle": "x", "shown": True, "score": 0.9, "passed": True},
            {"id": "b", "middle": "y", "shown": True, "score": 0.4, "passed": False},
            {"id": "c", "middle": "\n", "shown": False, "score": None, "passed": False}]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [(o.id, o.kind, o.accepted) for o in align.from_eval(run)] == [("a", "fim", True), ("b", "fim", False)]
    with pytest.raises(SystemExit, match="no such eval report"):
        align.from_eval(tmp_path / "nowhere")
    assert main(["align", "gate", "--feedback", str(tmp_path / "none.db"), "--dry-run"]) == 2
    assert "none.db: no such feedback store" in capsys.readouterr().err


def test_the_models_own_thresholds_apply_unless_the_user_calibrated(tmp_path: Path) -> None:
    """The model's shipped show thresholds (engine info ``show_thresholds``) replace ``gate.threshold``
    for their kinds; the user's calibration file wins; "off" means the setting alone."""
    from engine.types import EngineInfo

    model = thresholds.model_thresholds(EngineInfo(show_thresholds={"fim": {"threshold": 0.86, "precision": 0.7}}))
    assert model == {"fim": 0.86}
    assert thresholds.model_thresholds(EngineInfo(show_thresholds={"fim": 3})) == {}
    assert thresholds.model_thresholds(EngineInfo()) == {} == thresholds.model_thresholds(None)
    s = Settings()
    assert thresholds.gate_threshold(s, "fim", model) == 0.86
    assert thresholds.gate_threshold(s, "edit", model) == s.gate.threshold  # no shipped value for that kind
    mine = tmp_path / "gate.json"
    mine.write_text(json.dumps({"kinds": {"fim": {"threshold": 0.3}}}))
    s.gate.calibration = str(mine)
    assert thresholds.gate_threshold(s, "fim", model) == 0.3
    s.gate.calibration = "off"
    assert thresholds.gate_threshold(s, "fim", model) == s.gate.threshold
    # the selection stage holds each suggestion against it, and says which threshold hid it
    from edit_server.core.requests import FimRequest
    from edit_server.lsp.features import hidden_reason
    from edit_server.selectivity.select import fim_result

    doc = "def f(a, b):\n    return \n"
    req = FimRequest("file:///a.py", "/w/a.py", doc, 1, doc.index("return ") + 7)
    s = Settings()
    s.gate.kto = "off"
    shown = fim_result(req, "a + b", [0.9] * 3, s, model=model)
    hidden = fim_result(req, "a + b", [0.8] * 3, s, model=model)
    assert shown is not None and shown.show and shown.threshold == 0.86
    assert hidden is not None and not hidden.show and hidden.threshold == 0.86
    assert hidden_reason(hidden, s) == "fim hidden by the gate: score 0.80 < 0.86"
    assert fim_result(req, "a + b", [0.8] * 3, s).show  # without the model's: gate.threshold 0.5


def test_cli_writes_a_calibration_the_pipeline_uses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"id": o.id, "kind": o.kind, "score": o.score, "suggestion": [{}], "accepted": o.accepted}
            for o in synthetic(400, "edit", seed=3)]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "gate.json"
    assert main(["align", "gate", "--eval", str(run), "--target-precision", "0.75", "--out", str(out)]) == 0
    assert "edit" in capsys.readouterr().out
    t = thresholds.load_thresholds(out)["edit"]
    s = Settings()
    s.gate.calibration = str(out)
    assert thresholds.gate_threshold(s, "edit") == t != s.gate.threshold
    assert thresholds.gate_threshold(s, "fim") == s.gate.threshold  # no calibration for that kind
    s.gate.calibration = "off"
    assert thresholds.gate_threshold(s, "edit") == s.gate.threshold
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match="bad.json"):
        thresholds.load_thresholds(bad)
    s.gate.calibration = str(bad)
    assert thresholds.gate_threshold(s, "edit") == s.gate.threshold  # a broken file is ignored, logged
