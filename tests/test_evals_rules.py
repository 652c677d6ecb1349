"""`edit-server eval rules`: the model-free next-edit candidates judged offline, per rule and as the server
would serve them (`edit_server/cli/eval_rules.py`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from edit_server.cli import eval_rules as rules
from engine.textdiff import unified_diff
from tests.test_evals_minimal_image import ROOT

OLD = ("def load(path):\n    return open(path).read()\n\n\n"
       "def main():\n    data = load('a.txt')\n    more = load('b.txt')\n    print(data, more)\n")
# the user renamed the definition; the two calls below still use the old name
NOW = OLD.replace("def load(", "def read_text(")
RENAMED = NOW.replace("load(", "read_text(")
HIST = [unified_diff("m.py", OLD, NOW)]


def _case(cid: str, category: str, text: str, cursor: int, expected: list[dict[str, Any]] | None,
          history: list[str]) -> dict[str, Any]:
    return {"id": cid, "kind": "edit", "language": "python", "path": "m.py", "files": {"m.py": text},
            "cursor": {"path": "m.py", "offset": cursor}, "expected": expected, "history": history,
            "meta": {"repo": "r", "category": category}}


def _whole(text: str, new: str) -> list[dict[str, Any]]:
    return [{"path": "m.py", "start": 0, "end": len(text), "text": new}]


AT = NOW.index("read_text(") + len("read_text")
CASES = [
    # the rename carried to the calls: the repeated edit is right
    _case("right", "next-edit", NOW, AT, _whole(NOW, RENAMED), HIST),
    # the truth is something else: the same candidate is wrong
    _case("wrong", "next-edit", NOW, AT, _whole(NOW, NOW.replace("print(data, more)", "return data")), HIST),
    # the user moves on elsewhere: the candidate shown in a quiet case
    _case("quiet", "elsewhere", NOW, AT, None, HIST),
    # nothing to repeat (no history): silence, right
    _case("silent", "done", OLD, 3, None, []),
]


def test_served_and_per_rule(tmp_path: Path) -> None:
    rep = rules.run(CASES, rules.settings_for(locator="off"), tmp_path)
    s = rep["summary"]
    assert s["counts"] == {"next-edit": 2, "elsewhere": 1, "done": 1}
    assert s["next_edit_exact"] == 0.5 and s["next_edit_shown"] == 1.0
    assert s["no_edit_correct"] == {"elsewhere": 0.0, "done": 1.0, "all": 0.5}
    assert abs(s["precision_when_shown"] - 1 / 3) < 1e-9
    assert rep["served_rules"] == ["repeat", "analog", "move", "import"]  # the settings' defaults
    assert rep["shown_by_origin"] == {"repeat": 3} and rep["right_by_origin"] == {"repeat": 1}
    assert rep["rules"]["repeat"] == {"right": 1, "wrong": 1, "quiet_shown": 1, "none": 1}
    assert rep["rules"]["move"] == {"none": 4} and rep["rules"]["import"] == {"none": 4}
    recs = {r["id"]: r for r in map(json.loads, (tmp_path / "results.jsonl").read_text().splitlines())}
    assert recs["right"]["exact"] and recs["right"]["origin"] == "repeat" and recs["right"]["score"] > 0.5
    assert "+    data = read_text('a.txt')" in recs["right"]["diff"]
    assert "+    return data" in recs["wrong"]["want"]
    assert not recs["silent"]["shown"] and recs["silent"]["right"] and recs["silent"]["origin"] is None
    text = rules.format_report(rep, "t")
    assert "next-edit exact 50.0 % (1 of 2)" in text and "| repeat | yes | 1 | 1 | 1 | 0 | 0 |" in text


def test_rules_off_serve_nothing_and_the_gate_threshold_holds(tmp_path: Path) -> None:
    none = rules.run(CASES, rules.settings_for([], locator="off"), tmp_path / "none")
    assert none["served_rules"] == [] and none["summary"]["shown_rate"] == 0.0
    assert none["rules"]["repeat"]["right"] == 1  # each rule is still judged on its own
    strict = rules.settings_for(["repeat"], locator="off")
    strict.gate.threshold = 0.99  # above the repeated edit's built-in score: hidden by the gate
    rep = rules.run(CASES, strict, tmp_path / "strict")
    assert rep["summary"]["shown_rate"] == 0.0 and rep["rules"]["repeat"]["hidden"] == 3


def test_a_diff_of_another_file_is_not_this_documents_last_edit(tmp_path: Path) -> None:
    other = unified_diff("other.py", "x = 1\n", "x = 2\n")
    # the rename, then an edit of another file: the rename is still m.py's last edit
    case = {**CASES[0], "history": [*HIST, other]}
    req, _ = rules.request_of(case)
    assert [h.path for h in req.history] == ["m.py", "other.py"]
    headless, _ = rules.request_of({**CASES[0], "history": ["@@ -1 +1 @@\n-a\n+b\n"]})
    assert [h.path for h in headless.history] == ["m.py"]  # a diff naming no file: the case's own
    assert rules.run([case], rules.settings_for(locator="off"), tmp_path)["summary"]["next_edit_exact"] == 1.0


def test_the_models_rewrites_join_as_served_and_their_threshold_is_swept(tmp_path: Path) -> None:
    region = rules.request_of(CASES[1])[0].text  # the whole file is the region here (8 lines)
    want = region.replace("print(data, more)", "return data")
    run_dir = tmp_path / "next-edit"
    run_dir.mkdir()
    recs = [{"id": "wrong", "shown": True, "new": want, "score": 0.97},  # right, and above the rule's 0.95
            {"id": "silent", "shown": True, "new": OLD.replace("main", "run"), "score": 0.6},  # wrong: a quiet case
            {"id": "quiet", "shown": False, "score": 0.99}]  # nothing changed: no rewrite
    (run_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    rewrites = rules.read_rewrites(run_dir)
    assert set(rewrites) == {"wrong", "silent"} and rewrites["wrong"] == (want, 0.97)
    shipped = rules.run(CASES, rules.settings_for(locator="off"), tmp_path / "inf", rewrites=rewrites)
    assert shipped["summary"]["next_edit_exact"] == 0.5 and shipped["shown_by_origin"] == {"repeat": 3}
    at = {r["threshold"]: r for r in shipped["sweep"]}
    assert (at[float("inf")]["next_edit_exact"], at[float("inf")]["model_shown"]) == (0.5, 0)
    assert at[0.99] == {**at[float("inf")], "threshold": 0.99}
    # at 0.95 the model's right rewrite outranks the rule's wrong candidate; at 0.5 its quiet-case one shows too
    assert (at[0.95]["next_edit_exact"], at[0.95]["model_shown"], at[0.95]["model_right"]) == (1.0, 1, 1)
    assert abs(at[0.95]["precision"] - 2 / 3) < 1e-9 and at[0.95]["no_edit_correct"] == 0.5
    assert (at[0.5]["shown"], at[0.5]["model_shown"], at[0.5]["no_edit_correct"]) == (4, 2, 0.0)
    served = rules.run(CASES, rules.settings_for(locator="off"), tmp_path / "0.9", rewrites=rewrites, edit_threshold=0.9)
    assert served["summary"]["next_edit_exact"] == 1.0 and served["shown_by_origin"] == {"repeat": 2, "model": 1}
    assert "| 0.95 | 100.0 % | 50.0 % | 66.7 % | 3 | 1 / 1 |" in rules.format_report(served, "t")


def test_unknown_rule_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown rule nope"):
        rules.settings_for(["repeat", "nope"])


def test_cli(tmp_path: Path) -> None:
    src = tmp_path / "cases.jsonl"
    src.write_text("".join(json.dumps(c) + "\n" for c in CASES))
    p = subprocess.run([sys.executable, "-m", "edit_server", "eval", "rules", str(src), "--rule", "repeat",
                        "--rule", "analog", "--out", str(tmp_path / "out"), "--no-progress"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "served (repeat+analog)" in p.stdout and "| analog | yes |" in p.stdout
    assert json.loads((tmp_path / "out" / "report.json").read_text())["served_rules"] == ["repeat", "analog"]
    bad = subprocess.run([sys.executable, "-m", "edit_server", "eval", "rules", str(src), "--rule", "nope",
                          "--out", str(tmp_path / "bad"), "--no-progress"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "unknown rule nope" in bad.stderr
