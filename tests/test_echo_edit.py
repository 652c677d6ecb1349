"""The model's next-edit rewrites that echo the user's recent edits (issue 25): told apart from its free
rewrites, gated against their own threshold (``edit:echo``), else the model's rewrites' (fail closed)."""

from __future__ import annotations

from edit_server.core.history import Hunk
from edit_server.core.requests import EditBuilt, EditRequest
from edit_server.core.settings import Gate, Settings
from edit_server.nextedit.rules import rule_candidate
from edit_server.selectivity import echo_edit
from edit_server.selectivity.select import Candidate, edit_results
from edit_server.selectivity.thresholds import gate_kind, gate_threshold
from engine.templates import EditPrompt
from engine.textdiff import unified_diff

BEFORE = ("const a = createServer({parser: false});\n"
          "const b = createServer({parser: true});\n"
          "const c = createServer({parser: true});\n")
AFTER_ONE = BEFORE.replace("createServer({parser: false})", "createServer(t, {parser: false})")
ECHO = AFTER_ONE.replace("b = createServer({", "b = createServer(t, {")  # the same argument added again
FREE = AFTER_ONE.replace("b = createServer({parser: true})", "b = createServer({parser: true, port: 1})")


def _hunk(old: str, new: str, path: str = "s.ts") -> Hunk:
    return Hunk(path, unified_diff(path, old, new), 0.0, False)


def _req(history: list[Hunk], text: str = AFTER_ONE) -> tuple[EditRequest, EditBuilt]:
    cur = text.index("\n") + 1
    return (EditRequest("file:///w/s.ts", "s.ts", text, 3, cur, history),
            EditBuilt(EditPrompt("", text, "", cur, path="s.ts"), 0, len(text)))


def test_a_rewrite_echoes_when_every_change_is_one_the_history_made() -> None:
    hist = [_hunk(BEFORE, AFTER_ONE)]
    assert echo_edit.history_changes(hist) == (set(), {"t", ","})
    assert echo_edit.echoes(AFTER_ONE, ECHO, hist)
    assert not echo_edit.echoes(AFTER_ONE, FREE, hist)  # "port", ":", "1" were never typed
    assert not echo_edit.echoes(AFTER_ONE, AFTER_ONE, hist)  # no change
    assert not echo_edit.echoes(AFTER_ONE, AFTER_ONE.replace("\n", "\n\n", 1), hist)  # whitespace only
    assert not echo_edit.echoes(AFTER_ONE, ECHO, [])  # nothing to echo


def test_removals_echo_only_what_the_history_removed_and_any_file_counts() -> None:
    old = "x = f(a, debug=True)\ny = g(b, debug=True)\nz = 1\n"
    hist = [_hunk("h(debug=True)\n", "h()\n", "other.py")]  # another file's edit
    assert echo_edit.history_changes(hist) == ({"debug", "=", "True"}, set())
    assert echo_edit.echoes(old, old.replace("y = g(b, debug=True)", "y = g(b, )"), hist)
    assert not echo_edit.echoes(old, old.replace("z = 1\n", ""), hist)  # "z", "1" were not removed
    # each hunk is diffed on its own: two edits that cancel out still made their changes
    two = [_hunk("v = 1\n", "v = 2\n"), _hunk("v = 2\n", "v = 1\n")]
    assert echo_edit.history_changes(two) == ({"1", "2"}, {"1", "2"})


def test_echoing_rewrites_are_gated_apart_and_fail_closed_without_their_own_threshold() -> None:
    req, built = _req([_hunk(BEFORE, AFTER_ONE)])
    echo, free = Candidate(ECHO, [0.8] * 3), Candidate(FREE, [0.8] * 3)
    shipped = {"edit": float("inf"), "edit:echo": 0.7}  # free rewrites never right, echoes calibrated
    i, sug, edits = edit_results(req, built, [echo], Settings(), shipped)
    assert i == 0 and sug is not None and sug.show and sug.origin == "echo" and sug.threshold == 0.7
    assert [e.text for e in edits] == ["t, "]
    _, sug, _ = edit_results(req, built, [free], Settings(), shipped)
    assert sug is not None and not sug.show and sug.origin == "model" and sug.threshold == float("inf")
    # a sampled alternative that echoes is an echo too; the pick prefers the shown one
    i, sug, _ = edit_results(req, built, [free, Candidate(ECHO, [0.75] * 3, origin="sampled")], Settings(), shipped)
    assert i == 1 and sug is not None and sug.show and sug.origin == "echo"
    # a model that ships no echo threshold: its rewrites' threshold holds (never gate.threshold's 0.5)
    _, sug, _ = edit_results(req, built, [echo], Settings(), {"edit": float("inf")})
    assert sug is not None and not sug.show and sug.threshold == float("inf")
    assert gate_threshold(Settings(), "edit:echo", {"edit": 0.9}) == 0.9
    assert gate_threshold(Settings(), "edit:echo", {}) == 0.5
    assert gate_threshold(Settings(gate=Gate(calibration="off")), "edit:echo", shipped) == 0.5
    assert gate_kind("edit", "echo") == "edit:echo"


def test_a_users_calibration_file_decides_echoes_before_the_models_thresholds(tmp_path) -> None:
    import json

    cal = tmp_path / "gate.json"
    cal.write_text(json.dumps({"kinds": {"edit": {"threshold": 0.95}}}))
    s = Settings(gate=Gate(calibration=str(cal)))
    assert gate_threshold(s, "edit:echo", {"edit:echo": 0.7}) == 0.95  # the user's "edit" over the model's
    cal.write_text(json.dumps({"kinds": {"edit": {"threshold": 0.95}, "edit:echo": {"threshold": 0.6}}}))
    assert gate_threshold(s, "edit:echo", {"edit:echo": 0.7}) == 0.6


def test_a_rules_candidate_keeps_its_own_kind_even_when_it_echoes() -> None:
    renamed = "def f(n):\n    return count\n"
    req = EditRequest("file:///w/m.py", "m.py", renamed, 2, 8,
                      [_hunk("def f(count):\n    return count\n", renamed, "m.py")])
    built = EditBuilt(EditPrompt("", renamed, "", 8, path="m.py"), 0, len(renamed))
    rep = rule_candidate("repeat", req, built)
    assert rep is not None and rep.new == "def f(n):\n    return n\n"
    assert echo_edit.echoes(renamed, rep.new, req.history)
    _, sug, _ = edit_results(req, built, [rep], Settings(), {"edit": float("inf"), "edit:echo": 0.99})
    assert sug is not None and sug.origin == "repeat" and sug.show and sug.threshold == 0.5
