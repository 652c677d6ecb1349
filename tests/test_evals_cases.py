"""JSONL case format, diffs, judging and metrics."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.textdiff import unified_diff
from evals.cases import (
    Case,
    Cursor,
    Edit,
    apply_diff,
    apply_edits,
    history_states,
    judge,
    read_cases,
    write_cases,
)
from evals.lsp_client import offset_of, utf16_position
from evals.metrics import gate_sweep, percentile, summarize_cases
from evals.runners import change_event

FIXTURE = Path(__file__).parent / "fixtures" / "evals" / "cases.jsonl"


def _case(expected: list[Edit] | None, kind: str = "fim") -> Case:
    text = "def f(x):\n    return x + 1\n"
    return Case(id="c1", kind=kind, language="python", path="a.py", files={"a.py": text},
                cursor=Cursor("a.py", 26), expected=expected)


def test_jsonl_round_trip(tmp_path: Path) -> None:
    cases = read_cases(FIXTURE)
    assert {c.kind for c in cases} == {"fim", "edit"} and any(c.expected is None for c in cases)
    out = tmp_path / "c.jsonl"
    assert write_cases(out, cases) == len(cases)
    assert read_cases(out) == cases
    assert out.read_text() == FIXTURE.read_text()


def test_bad_case_names_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(FIXTURE.read_text().splitlines()[0] + "\n" + '{"id": "x", "kind": "fim"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: .*language"):
        read_cases(bad)
    bad.write_text('{"id":"x","kind":"fim","language":"python","path":"a.py","files":{"a.py":"ab"},'
                   '"cursor":{"path":"a.py","offset":9},"expected":null}\n')
    with pytest.raises(ValueError, match="cursor.offset 9 outside"):
        read_cases(bad)
    for evil in ("../x.py", "/etc/passwd", "a/../../x.py"):
        bad.write_text('{"id":"x","kind":"fim","language":"python","path":"a.py","files":{"a.py":"",'
                       f'"{evil}":""}},"cursor":{{"path":"a.py","offset":0}},"expected":null}}\n')
        with pytest.raises(ValueError, match="must be relative"):
            read_cases(bad)


def test_judge_accept_partial_quiet() -> None:
    case = _case([Edit("a.py", 26, 26, " * 2")])
    assert judge(case, [Edit("a.py", 26, 26, " * 2  ")]).accepted  # whitespace-normalised
    j = judge(case, [Edit("a.py", 26, 26, " * 3")])
    assert j.shown and not j.accepted and j.partial == pytest.approx(3 / 4)
    assert judge(case, []).shown is False
    # the same change expressed as a larger replacement is accepted too
    assert judge(case, [Edit("a.py", 14, 27, "return x + 1 * 2\n")]).accepted
    quiet = _case(None, kind="edit")
    assert judge(quiet, []).correct and not judge(quiet, [Edit("a.py", 0, 0, "#")]).correct
    assert judge(quiet, [Edit("a.py", 0, 3, "def")]).correct  # a no-op edit is not shown


def test_apply_edits_rejects_overlaps() -> None:
    assert apply_edits("abcdef", [Edit("p", 4, 6, "X"), Edit("p", 0, 1, "Y")]) == "YbcdX"
    with pytest.raises(ValueError):
        apply_edits("abcdef", [Edit("p", 0, 3, ""), Edit("p", 2, 4, "")])


lines = st.lists(st.sampled_from(["a\n", "b\n", "cc\n", "\n", "dd"]), max_size=10).map("".join)


@settings(max_examples=150, deadline=None)
@given(lines, lines)
def test_diff_apply_and_unapply(old: str, new: str) -> None:
    d = unified_diff("p.py", old, new)
    if d:
        assert apply_diff(old, d) == new
        assert apply_diff(new, d, reverse=True) == old


def test_history_states_replays_oldest_first() -> None:
    v0, v1, v2 = "x = 1\n", "x = 1\ny = 2\n", "x = 1\ny = 2\nz = 3\n"
    case = Case(id="h", kind="edit", language="python", path="a.py", files={"a.py": v2},
                cursor=Cursor("a.py", len(v2)), expected=None,
                history=[unified_diff("a.py", v0, v1), unified_diff("a.py", v1, v2)])
    assert history_states(case) == {"a.py": [v0, v1, v2]}


def test_change_event_and_utf16() -> None:
    old, new = "héllo 😀 world\n", "héllo 😀 brave world\n"
    ev = change_event(old, new)
    assert ev["text"] == "brave " and ev["range"]["start"] == {"line": 0, "character": 9}
    assert offset_of(old, utf16_position(old, 8)) == 8
    assert utf16_position("a\nbc", 4) == {"line": 1, "character": 2}


def test_metrics_and_gate_sweep() -> None:
    recs = [
        {"quiet_case": False, "shown": True, "accepted": True, "partial": 1.0, "correct": True,
         "score": 0.9, "latency_ms": 10.0},
        {"quiet_case": False, "shown": True, "accepted": False, "partial": 0.5, "correct": False,
         "score": 0.4, "latency_ms": 20.0},
        {"quiet_case": True, "shown": True, "accepted": False, "partial": 0.0, "correct": False,
         "score": 0.6, "latency_ms": 30.0},
        {"quiet_case": True, "shown": False, "accepted": False, "partial": 0.0, "correct": True,
         "score": None, "latency_ms": 40.0},
    ]
    s = summarize_cases(recs)
    assert s["shown_rate"] == 0.75 and s["accept_rate"] == 0.5 and s["no_edit_correct"] == 0.5
    assert s["precision_when_shown"] == pytest.approx(1 / 3) and s["partial_mean"] == 0.75
    assert s["latency_ms_p50"] == 25.0 and percentile([1.0, 2.0, 3.0], 95) == pytest.approx(2.9)
    sweep = gate_sweep(recs)
    assert [(p["threshold"], p["coverage"], p["precision"]) for p in sweep] == [
        (0.4, 0.75, pytest.approx(1 / 3)), (0.6, 0.5, 0.5), (0.9, 0.25, 1.0)]


def test_parse_lsp_suggestions() -> None:
    from evals.runners import parse_suggestion

    fim = _case([Edit("a.py", 26, 26, " * 2")])
    cmd = {"title": "t", "command": "editServer.accept",
           "arguments": [{"id": "1", "kind": "fim", "score": 0.75, "uri": "file:///w/a.py", "version": 1}]}
    # an item whose range re-types the start of the line (range on one line, ending at the cursor)
    item = {"insertText": "    return x + 1 * 2", "command": cmd,
            "range": {"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 16}}}
    edits, score = parse_suggestion(fim, {"items": [item]}, {})
    assert edits == [Edit("a.py", 10, 26, "    return x + 1 * 2")] and score == 0.75
    assert judge(fim, edits).accepted
    assert parse_suggestion(fim, [], {}) == ([], None)
    assert parse_suggestion(fim, None, {}) == ([], None)
    edit = _case([Edit("b.py", 0, 0, "import a\n")], kind="edit")
    edit.files["b.py"] = "print(a.f(1))\n"
    res = {"edits": [{"text": "import a\n", "textDocument": {"uri": "file:///w/b.py", "version": 1},
                      "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
                      "command": cmd}]}
    edits, score = parse_suggestion(edit, res, {"file:///w/b.py": "b.py", "file:///w/a.py": "a.py"})
    assert edits == [Edit("b.py", 0, 0, "import a\n")] and score == 0.75
    assert judge(edit, edits).accepted


def test_server_env_makes_relative_paths_absolute_for_a_server_started_elsewhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`EDIT_SERVER_ADAPTER=runs/x/default edit-server eval replay …` started each server in its case's workspace,
    where the relative path named nothing ("adapter file not found")."""
    from evals.lsp_client import server_env

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EDIT_SERVER_ADAPTER", "runs/qwen-adapter/default")
    monkeypatch.setenv("EDIT_SERVER_SHARED", "/abs/shared")
    env = server_env({"EDIT_SERVER_BASE_WHEEL": "wheels/base.whl"}, tmp_path / "case")
    assert env["EDIT_SERVER_ADAPTER"] == str(tmp_path / "runs/qwen-adapter/default")
    assert env["EDIT_SERVER_BASE_WHEEL"] == str(tmp_path / "wheels/base.whl")
    assert env["EDIT_SERVER_SHARED"] == "/abs/shared"
    assert server_env(None, None)["EDIT_SERVER_ADAPTER"] == "runs/qwen-adapter/default"  # same directory: as given
