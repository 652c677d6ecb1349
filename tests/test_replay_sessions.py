"""The held-out replay: session cases (next-edit / elsewhere / done), line F1, the gate's view, and the
candidate filter the server applies to next edits."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from edit_server.core.history import Hunk
from edit_server.selectivity.candidates import diff_lines, reject_reason
from engine.git_history import extract_sessions, git_env, states_of
from engine.textdiff import unified_diff
from evals.cases import Edit, apply_to_files, history_states, judge
from evals.metrics import gate_view, summarize_cases
from evals.replay_sessions import SessionReplayOptions, session_case, session_cases

NAMES = ("m.py", "n.py", "o.py", "p.py", "q.py", "r.py")
V1 = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(30))


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@e", "-c",
                    "core.hooksPath=/dev/null", "-c", "commit.gpgsign=false", *args], check=True,
                   capture_output=True, env=git_env())


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    r = tmp_path_factory.mktemp("held")
    _git(r, "init", "-q", "-b", "main")
    for name in NAMES:
        (r / name).write_text(V1)
    _git(r, "add", "-A")
    _git(r, "commit", "-q", "-m", "one")
    # hunks at f2, f3 (near each other) and f25 (far away)
    v2 = V1.replace("x + 2\n", "x * 2\n").replace("x + 3\n", "x * 3\n").replace("x + 25\n", "x * 25\n")
    for name in NAMES:
        (r / name).write_text(v2)
    _git(r, "commit", "-q", "-am", "two")
    return r


def test_session_cases_have_the_pending_truths(repo: Path) -> None:
    (s,) = [x for x in extract_sessions(repo, trim=False) if x.path == "m.py"]
    states = states_of(s)
    opts = SessionReplayOptions()
    cats = {k: session_case(s, k, states, opts) for k in (1, 2, 3)}
    assert [c.meta["category"] for c in cats.values()] == ["next-edit", "elsewhere", "done"]
    nxt = cats[1]  # after f2's hunk: f3's is 4 lines below, f25's far away
    assert nxt.meta["k"] == 1 and nxt.expected is not None
    after = apply_to_files(nxt.files, nxt.expected)["m.py"]
    assert "x * 3\n" in after and "x + 25\n" in after  # only what is near the cursor
    text = nxt.files["m.py"]
    assert text[: nxt.cursor.offset].endswith("return x * 2")
    assert history_states(nxt)["m.py"][0] == V1  # the history replays from the commit's parent
    assert cats[2].expected is None and cats[3].expected is None
    cases = session_cases(repo, SessionReplayOptions(cases=4, seed=0, shares=(0.5, 0.25, 0.25)))
    assert len(cases) == 4 and len({c.path for c in cases}) == 4  # one case per session
    assert sorted(c.meta["category"] for c in cases) == ["done", "elsewhere", "next-edit", "next-edit"]
    again = session_cases(repo, SessionReplayOptions(cases=4, seed=0, shares=(0.5, 0.25, 0.25)))
    assert [c.id for c in again] == [c.id for c in cases]


def test_line_f1_and_the_gate_view(repo: Path) -> None:
    (s,) = [x for x in extract_sessions(repo, trim=False) if x.path == "m.py"]
    case = session_case(s, 1, states_of(s), SessionReplayOptions())
    text = case.files["m.py"]
    e = case.expected[0]
    assert judge(case, [e]).accepted and judge(case, [e]).line_f1 == 1.0
    half = Edit("m.py", e.start, e.end, e.text.replace("x * 3", "x * 4"))
    j = judge(case, [half])
    assert not j.accepted and j.line_f1 == pytest.approx(0.5)  # 1 of 2 changed lines right each way
    assert judge(case, [Edit("m.py", 0, 0, "# hi\n")]).line_f1 == 0.0
    assert text[e.start:e.end] != e.text
    recs = [{"quiet_case": False, "shown": True, "accepted": True, "partial": 1.0, "line_f1": 1.0,
             "correct": True, "score": 0.9, "syntax_error": False},
            {"quiet_case": False, "shown": True, "accepted": True, "partial": 1.0, "line_f1": 1.0,
             "correct": True, "score": 0.9, "syntax_error": True},
            {"quiet_case": True, "shown": True, "accepted": False, "partial": 0.0, "line_f1": 0.0,
             "correct": False, "score": 0.3, "syntax_error": False}]
    s = summarize_cases(gate_view(recs, 0.5))
    assert s["accept_rate"] == 0.5 and s["no_edit_correct"] == 1.0 and s["shown_rate"] == pytest.approx(1 / 3)
    assert summarize_cases(recs)["accept_rate"] == 1.0 and summarize_cases(recs)["no_edit_correct"] == 0.0


def _hunk(old: str, new: str) -> Hunk:
    return Hunk("m.py", unified_diff("m.py", old, new), 0.0, False)


def test_candidate_filter_reasons() -> None:
    before = "a = 1\nb = 2\nc = 3\nd = 4\n"
    now = "a = 1\nb = 20\nc = 3\nd = 4\n"  # the user changed b, cursor at the end of that line
    hist = [_hunk(before, now)]
    cur = now.index("b = 20") + len("b = 20")
    rem, add, rows = diff_lines(hist[0].diff)
    assert rem == {"b = 2": 1} and add == {"b = 20": 1} and rows == {1}
    region = now

    def why(new_region: str, cursor: int = cur) -> str | None:
        return reject_reason(now, cursor, "m.py", 0, region, new_region, hist)

    assert why(now.replace("c = 3\n", "c = 3  \n")) == "retype"
    assert why(before) == "undo"
    assert why(now.replace("d = 4", "d = 40")) is None  # a new edit on another line: shown
    nxt = now.index("d = 4")  # the cursor moved on: rewriting b's line again is not shown
    assert why(now.replace("b = 20", "b = 200"), cursor=nxt) == "just-left"
    assert why(now.replace("b = 20", "b = 200")) is None  # still on that line: it may be finishing it
    assert reject_reason(now, cur, "m.py", 0, region, before, []) is None  # no history: no undo


def test_candidate_view_replays_the_server_history(repo: Path) -> None:
    """The eval's view of the filter: the case's history through the server's EditHistory."""
    from edit_server.cli.serving_view import candidate_reason

    (s,) = [x for x in extract_sessions(repo, trim=False) if x.path == "m.py"]
    states = states_of(s)
    case = session_case(s, 1, states, SessionReplayOptions())
    text = case.files["m.py"]
    assert candidate_reason(case, list(case.expected)) is None  # the truth passes
    undo = text.index("x * 2")
    assert candidate_reason(case, [Edit("m.py", undo, undo + 5, "x + 2")]) == "undo"
    assert candidate_reason(case, [Edit("m.py", undo, undo + 5, "x * 2 ")]) == "retype"
    later = session_case(s, 2, states, SessionReplayOptions())
    t2 = later.files["m.py"]
    f2 = t2.index("x * 2")
    # the runner's history: one hunk per replayed edit (historyPauseMs 0): f2's is not the last one
    assert candidate_reason(later, [Edit("m.py", f2, f2 + 5, "x * 7")]) is None
    # f2 and f3 typed back to back within the pause: one hunk, and the cursor has left f2's line
    assert candidate_reason(later, [Edit("m.py", f2, f2 + 5, "x * 7")], pause_s=1.0) == "just-left"


def test_replay_takes_several_repositories_round_robin(repo: Path, tmp_path: Path) -> None:
    import argparse
    import shutil

    from evals.cli_cases import replay_cases

    other = tmp_path / "other"
    shutil.copytree(repo, other)
    ns = argparse.Namespace(repo=[repo, other], mode="sessions", cases_per_repo=2, seed=0)
    cases = replay_cases(ns)
    assert [c.id.split(":")[0] for c in cases] == [repo.name, "other", repo.name, "other"]
    with pytest.raises(FileNotFoundError, match="nope: no such repository or bundle"):
        replay_cases(argparse.Namespace(repo=[tmp_path / "nope"], mode="sessions", cases_per_repo=2, seed=0))


def test_edit_result_drops_a_filtered_candidate() -> None:
    """The serving call site: an undo of the user's last edit never becomes a suggestion, a new edit does."""
    from edit_server.core.requests import EditBuilt, EditRequest
    from edit_server.core.settings import Settings
    from edit_server.selectivity.select import edit_result
    from engine.templates import EditPrompt

    before = "a = 1\nb = 2\nc = 3\nd = 4\n"
    now = "a = 1\nb = 20\nc = 3\nd = 4\n"
    cur = now.index("b = 20") + 6
    req = EditRequest("file:///w/m.py", "m.py", now, 2, cur, [_hunk(before, now)])
    built = EditBuilt(EditPrompt("", now, "", cur, path="m.py"), 0, len(now))
    s = Settings()
    assert edit_result(req, built, before, [0.99] * 4, s) == (None, [])
    sug, edits = edit_result(req, built, now.replace("d = 4", "d = 40"), [0.99] * 4, s)
    assert sug is not None and edits


def test_a_removed_line_that_starts_with_two_dashes_is_diff_body_not_a_header() -> None:
    from edit_server.nextedit.repeat_edit import hunk_substitution
    from edit_server.selectivity.echo_edit import history_changes

    old = "x = 1\n-- keep this\ny = 2\n"
    new = "x = 1\ny = 2\n"
    diff = unified_diff("q.sql", old, new)
    assert "\n--- keep this\n" in diff  # the removed line reads like a file header
    rem, add, rows = diff_lines(diff)
    assert rem == {"-- keep this": 1} and not add and not rows
    assert history_changes([Hunk("q.sql", diff, 0.0, False)]) == ({"-", "keep", "this"}, set())
    plus = unified_diff("q.sql", "++ a\nb\n", "++ c\nb\n")  # an added "++ c" line reads "+++ c"
    assert hunk_substitution(plus) is None  # "a" is one letter: too short to repeat, but parsed as a pair
    assert diff_lines(plus)[:2] == ({"++ a": 1}, {"++ c": 1})
