"""The "same change on a similar line" next-edit candidate (issue 25, item 5): the last edit's token-level
changes carried over to the region's look-alike lines, no model."""

from __future__ import annotations

from edit_server.core.history import Hunk
from edit_server.core.requests import EditBuilt, EditRequest
from edit_server.core.settings import NextEdit, Settings
from edit_server.nextedit import analog_edit
from edit_server.nextedit.analog_edit import changed_pairs, transfer
from edit_server.nextedit.rules import rule_candidate
from edit_server.selectivity.select import edit_results
from edit_server.selectivity.thresholds import gate_kind
from engine.templates import EditPrompt
from engine.textdiff import unified_diff


def _req(before: str, now: str, cur: int, path: str = "m.py") -> tuple[EditRequest, EditBuilt]:
    hunk = Hunk(path, unified_diff(path, before, now), 0.0, False)
    req = EditRequest(f"file:///w/{path}", path, now, 2, cur, [hunk])
    return req, EditBuilt(EditPrompt("", now, "", cur, path=path), 0, len(now))


def test_changes_carry_over_to_a_look_alike_line() -> None:
    # an extension (no substring swap can repeat it), a punctuation change, a call rewritten around
    # arguments that differ, an attribute inserted mid-expression, a wrapper dropped after another name
    assert transfer("@pytest.mark.asyncio", "@pytest.mark.asyncio()", "    @pytest.mark.asyncio") == \
        "    @pytest.mark.asyncio()"
    assert transfer("@attr.s(slots=True)", "@attr.s(slots=True, x)", "@attr.s(frozen=True)") == "@attr.s(frozen=True, x)"
    assert transfer(">> is_prime(37)", ">>> is_prime(37)", ">> is_prime(3 * 13)") == ">>> is_prime(3 * 13)"
    assert transfer('buf.WriteString(fmt.Sprintf("a %s", x.Use()))', 'fmt.Fprintf(buf, "a %s", x.Use())',
                    'buf.WriteString(fmt.Sprintf("b %s", y.Name()))') == 'fmt.Fprintf(buf, "b %s", y.Name())'
    assert transfer('assert "v" in p.__ann__', 'assert "v" in p.conv.__ann__', "assert p.__ann__ == {}") == \
        "assert p.conv.__ann__ == {}"
    assert transfer("class C(object):", "class C:", "class TestSplit(object):") == "class TestSplit:"
    assert transfer("    t = take(5, xrange(10))", "    t = take(5, range(10))", "    t = take(0, xrange(3))") == \
        "    t = take(0, range(3))"


def test_a_change_without_its_place_in_the_target_is_not_carried() -> None:
    assert transfer("if data is None:", "if not data:", "if files is not None:") is None  # `data` is not there
    assert transfer("x = f(a)", "x = f(a)", "x = f(a)") is None  # nothing changes
    # an insertion goes between the same two neighbours: `True` is not there
    assert transfer("@attr.s(slots=True)", "@attr.s(slots=True, x)", "@attr.s(slots=False)") is None
    assert transfer("x = f(a)", "x = f(b)", "x = f(b)") is None  # already done
    # an insertion longer than MAX_INSERT non-space tokens is new code, not a pattern
    long = 'long=read("R.rst") + "\\n" + read("C.rst"),'
    assert transfer('long=read("R.rst"),', long, 'short=meta("d"),') is None
    assert transfer("@attr.s(slots=True)", "@attr.s(slots=True, hash=True)", "@attr.s(slots=True)") is None
    # an insertion placed by a space alone: `| bool` -> `| str | bool` has no `|` to stand by in the target
    assert transfer("v: ssl.Ctx | bool = True,", "v: ssl.Ctx | str | bool = True,", "r: bool = False,") is None


def test_changed_pairs_come_from_even_runs_of_changed_lines_only() -> None:
    before = "a = f(1)\nb = g(2)\n\nc = h(3)\n"
    now = "a = f(1, k)\nb = g(2, k)\n\nc = h(3)\n"
    assert changed_pairs(unified_diff("m.py", before, now)) == [("a = f(1)", "a = f(1, k)"),
                                                                ("b = g(2)", "b = g(2, k)")]
    # a run of one removed line and two added ones is a rewrite: no pair
    assert changed_pairs(unified_diff("m.py", before, before.replace("c = h(3)\n", "c = h(\n    3, k)\n"))) == []
    # blank lines aside, the run is even
    assert changed_pairs(unified_diff("m.py", "x = a\ny = 1\n", "\nx = a.b\ny = 1\n")) == [("x = a", "x = a.b")]
    # a line replaced by one that shares little with it is not a change to carry
    assert changed_pairs(unified_diff("m.py", 'flag "github.com/x/pflag"\n', '"time"\n')) == []


DOC = '''def is_prime(n):
    """
    >> is_prime(37)
    True
    >> is_prime(3 * 13)
    False
    >> is_prime(2)
    True
    """
'''


def test_candidate_rewrites_each_look_alike_line_of_the_region_and_nothing_else() -> None:
    now = DOC.replace(">> is_prime(37)", ">>> is_prime(37)")
    req, built = _req(DOC, now, now.index(">>> is_prime(37)") + 16)
    cand = rule_candidate("analog", req, built)
    assert cand is not None and cand.origin == "analog" and cand.confidences == [analog_edit.SCORE]
    assert cand.new == DOC.replace(">> ", ">>> ")
    # outside the region nothing changes: the region ends before the last example
    end = now.index("    >> is_prime(2)")
    got = analog_edit.candidate(now, 0, end, "m.py", req.history)
    assert got == now[:end].replace("    >> is_prime(3", "    >>> is_prime(3")


def test_no_candidate_without_a_look_alike_line_or_a_last_edit_of_the_file() -> None:
    before = "x = compute(a, b)\nreturn x\n"
    now = "x = compute(a, b, c)\nreturn x\n"
    req, built = _req(before, now, now.index("c)"))
    assert rule_candidate("analog", req, built) is None  # `return x` looks nothing like the call
    other = EditRequest("file:///w/m.py", "m.py", now, 2, 0, [Hunk("o.py", unified_diff("o.py", before, now), 0, False)])
    assert rule_candidate("analog", other, built) is None  # the last edit was in another file
    # the line the edit wrote is never a target, even if it still looks like the old line
    same = "y = compute(a, b)\n"
    req2, built2 = _req(before + same, now + same, now.index("c)"))
    cand = rule_candidate("analog", req2, built2)
    assert cand is not None and cand.new == now + "y = compute(a, b, c)\n"


def test_analog_is_a_setting_gated_as_its_own_kind_and_ranked_under_the_repeat() -> None:
    assert NextEdit().rules() == ["repeat", "analog", "move", "import"]  # on: the location model scores it
    assert NextEdit(analog_edit=False).rules() == ["repeat", "move", "import"]
    assert NextEdit(analog_edit=True).rules() == ["repeat", "analog", "move", "import"]
    assert gate_kind("edit", "analog") == "edit:analog"
    assert analog_edit.SCORE < 0.95  # the repeated edit's: a plain repeat wins a tie of shown candidates
    now = DOC.replace(">> is_prime(37)", ">>> is_prime(37)")
    req, built = _req(DOC, now, now.index(">>> is_prime(37)") + 16)
    cand = rule_candidate("analog", req, built)
    assert cand is not None
    i, sug, edits = edit_results(req, built, [cand], Settings(next_edit=NextEdit(analog_edit=True)))
    assert i == 0 and sug is not None and sug.show and sug.origin == "analog" and len(edits) == 2
