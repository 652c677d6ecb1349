"""Echo / prose / region / budget stop rules (engine.decoding.echo), the decoder stopping there, and where a
multi-line completion is expected (gate.block_expected)."""

from __future__ import annotations

import time

import pytest

from edit_server.core.requests import FimRequest
from edit_server.selectivity.gate import block_expected, clean_fim
from edit_server.selectivity.select import is_single_line
from engine.decoding.echo import budget_cut, echo_cut, echo_for_edit, echo_for_fim, in_string
from engine.decoding.stops import scope_rule, text_stop

PREFIX = (
    "import math\n\n\n"
    "def area(r):\n"
    '    """Area of a circle of radius r."""\n'
    "    if r < 0:\n"
    "        raise ValueError(r)\n"
)
SUFFIX = "\n    return result\n\n\ndef other():\n    pass\n"


def fim_echo(single: bool = False, prefix: str = PREFIX, suffix: str = SUFFIX, path: str = "a.py"):
    return echo_for_fim(prefix + "    ", suffix, path, single)


def test_a_middle_that_reaches_the_suffix_is_cut_before_it() -> None:
    text = "result = math.pi * r * r\n    return result\n    # more"
    cut = echo_cut(text, fim_echo())
    assert cut == (len("result = math.pi * r * r\n"), "suffix")
    # the line being written is not judged until it is complete
    assert echo_cut("result = math.pi * r * r\n    return resu", fim_echo()) is None


def test_the_functions_own_header_and_copied_lines_are_repeats() -> None:
    text = "result = 1\ndef area(r):\n    x = 2\n"
    assert echo_cut(text, fim_echo()) == (len("result = 1\n"), "repeat")
    copied = "x = 1\n    if r < 0:\n        raise ValueError(r)\n"
    assert echo_cut(copied, fim_echo()) == (len("x = 1\n"), "repeat")
    # one copied line alone is code (``return None`` appears everywhere)
    assert echo_cut("x = 1\n    if r < 0:\n        y = 2\n", fim_echo()) is None


def test_fences_and_prose_are_cut_but_docstrings_and_comments_are_code() -> None:
    assert echo_cut("result = r * r\n```\n", fim_echo()) == (len("result = r * r\n"), "prose")
    prose = "result = r * r\nThis implementation uses the formula for the area.\n"
    assert echo_cut(prose, fim_echo()) == (len("result = r * r\n"), "prose")
    doc = '"""\n    This implementation uses the formula for the area.\n    """\n'
    assert echo_cut(doc, fim_echo()) is None
    assert echo_cut("# This implementation uses the formula for the area.\n", fim_echo()) is None
    inside = echo_for_fim('def f():\n    """Compute\n    ', '\n    """\n', "a.py", False)
    assert inside.in_string and echo_cut("This is the value of the thing.\n", inside) is None
    # prose is what a markdown file holds
    md = echo_for_fim("# Title\n\n", "\n", "README.md", False)
    assert echo_cut("This project does many useful things.\n", md) is None
    assert in_string('x = """abc\n') and not in_string('x = """abc"""\n')


def test_a_single_line_stops_where_it_types_out_the_rest_of_its_line() -> None:
    echo = echo_for_fim("    total = compute(a", ", b)\n    return total\n", "a.py", True)
    assert echo_cut("x, y, b)", echo) == (len("x, y"), "suffix")
    assert echo_cut("x, y", echo) is None


def test_a_rewrite_stops_once_it_has_written_the_regions_end() -> None:
    region = "def f(a_2):\n    x = a + 1\n    y = x * 2\n    return y\n"
    echo = echo_for_edit(region, "\n\ndef g():\n    pass\n", "a.py")
    new = "def f(a_2):\n    x = a_2 + 1\n    y = x * 2\n    return y\n\n\ndef g():\n"
    cut = echo_cut(new, echo)
    assert cut is not None and cut[1] == "region" and new[:cut[0]] == new[:new.index("    return y\n") + 13]
    # the same two lines earlier in a longer region do not end it (too few lines yet)
    region2 = "    y = x * 2\n    return y\n" + "    z = 1\n" * 5 + "    y = x * 2\n    return y\n"
    echo2 = echo_for_edit(region2, "", "a.py")
    assert echo_cut("    y = x * 2\n    return y\n    z = 1\n", echo2) is None
    # running into the text after the region (that the region does not hold)
    runs_on = "def f(a_2):\n    return a_2\n\ndef g():\n"
    assert echo_cut(runs_on, echo)[1] == "region"


def test_the_budget_keeps_finished_lines() -> None:
    past = time.monotonic() - 1
    assert budget_cut("a = 1\nb = 2\nc = ", past) == (len("a = 1\nb = 2\n"), "budget")
    assert budget_cut("a = 1", past) == (0, "budget")
    assert budget_cut("a = 1", past, grace=60) is None  # no line finished: the first one may still finish
    assert budget_cut("\n    a = 1", past, grace=60) is None  # an empty line is no line of code
    assert budget_cut("a = 1\nb", past, grace=60) == (len("a = 1\n"), "budget")  # it did: that line
    assert budget_cut("a = 1", past - 61, grace=60) == (0, "budget")  # the grace is spent too: nothing
    assert budget_cut("a = 1\n", time.monotonic() + 60) is None and budget_cut("a\n", None) is None
    assert text_stop("a = 1\nb = ", None, None, deadline=past) == (len("a = 1\n"), "budget")


def test_a_decode_budget_starts_at_the_first_token_and_leaves_a_single_line_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    """``decode_budget_s`` counts from the rule's first call (the first decoded token, not the request:
    a cold prefill is not counted); past it a single line keeps nothing, a multi-line text its finished
    lines; with a request ``deadline`` too, the earlier one rules."""
    import engine.decoding.stops as stops

    clock = [100.0]
    monkeypatch.setattr(stops.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr("engine.decoding.echo.time.monotonic", lambda: clock[0])
    words = ["a", " =", " 1", "\n", "b", " =", " 2"]

    def decode(ids: list[int]) -> str:
        return "".join(words[i] for i in ids)

    clock[0] = 100.0
    rule = scope_rule(decode, None, decode_budget_s=0.5)
    assert rule is not None
    clock[0] = 105.0  # the prefill took 5 s: the budget starts now
    assert rule([0, 1]) is None
    clock[0] = 105.4
    assert rule([0, 1, 2]) is None
    clock[0] = 105.6
    assert rule([0, 1, 2]) == (0, "budget", 0)  # a single line: nothing
    assert rule(list(range(6)))[1:] == ("budget", len("a = 1\n"))  # finished lines kept
    early = scope_rule(decode, None, deadline=105.2, decode_budget_s=10.0)
    clock[0] = 105.0
    assert early is not None and early([0]) is None
    clock[0] = 105.3
    assert early([0, 1]) == (0, "budget", 0)
    # a multi-line middle (a request deadline only) whose prefill ate the budget (its first token came
    # within the grace of the deadline): past it, its first line may still finish for a while
    middle = scope_rule(decode, None, deadline=106.0)
    assert middle is not None
    clock[0] = 106.0 - stops.FIRST_LINE_GRACE_S / 2
    assert middle([0]) is None  # the first decoded token: late
    clock[0] = 106.0 + stops.FIRST_LINE_GRACE_S / 2
    assert middle([0, 1, 2]) is None  # "a = 1" not finished yet: go on
    assert middle(list(range(6)))[1:] == ("budget", len("a = 1\n"))  # finished: that line, nothing more
    clock[0] = 106.0 + stops.FIRST_LINE_GRACE_S + 0.01
    assert middle([0, 1, 2]) == (0, "budget", 0)  # the grace is spent: nothing
    warm = scope_rule(decode, None, deadline=110.0)
    assert warm is not None
    clock[0] = 110.0 - 1.0
    assert warm([0]) is None  # decoding started with a second left: no grace
    clock[0] = 110.0 + stops.FIRST_LINE_GRACE_S / 2
    assert warm([0, 1, 2]) == (0, "budget", 0)
    assert scope_rule(decode, None) is None


def test_the_stop_rule_returns_the_exact_character_cut() -> None:
    words = ["result", " =", " 1", "\n", "    return", " result", "\n", "x"]

    def decode(ids: list[int]) -> str:
        return "".join(words[i] for i in ids)

    rule = scope_rule(decode, None, echo=fim_echo())
    assert rule is not None
    k, kind, chars = rule(list(range(len(words))))
    assert kind == "suffix" and chars == len("result = 1\n") and k == 4
    assert rule(list(range(3))) is None
    # a cut at 0 keeps no token
    rule0 = scope_rule(decode, None, deadline=time.monotonic() - 1)
    assert rule0 is not None and rule0([0, 1]) == (0, "budget", 0)


def test_the_gate_cuts_with_the_same_rules() -> None:
    out = clean_fim("result = r * r\n    return result\n    more()", PREFIX + "    ", SUFFIX, False, "a.py")
    assert out == "result = r * r"
    assert clean_fim("result = r * r\n```\nThis is it.", PREFIX + "    ", SUFFIX, False, "a.py") == "result = r * r"


@pytest.mark.parametrize(("prefix", "suffix", "block"), [
    ("def f(x):", "\n", True),  # end of an opener line
    ("items = [", "]\n", True),
    ("    total = ", "\n    return total\n", False),  # finishing a statement
    ("def f(x):\n    ", "\n\ndef g():\n    pass\n", True),  # the empty body of a new function
    ('def f(x):\n    """Doc\n    more.\n    """\n    ', "\n", True),  # past the docstring
    ("def f(x):\n    # todo\n    ", "\n", True),  # past a comment
    ("def f(x):\n    a = 1\n    ", "\n    return a\n", False),  # between statements
    ("def f(x):\n    ", "\n    return x\n", False),  # the block already has a body
    ("x = 1\n", "\ny = 2\n", False),
])
def test_block_expected(prefix: str, suffix: str, block: bool) -> None:
    assert block_expected(prefix, suffix) is block


def test_automatic_triggers_are_one_line_unless_a_block_is_expected() -> None:
    text = "def f(x):\n    a = 1\n    \n    return a\n"
    off = text.index("    \n") + 4
    auto = FimRequest("u", "a.py", text, 1, off, invoked=False)
    assert is_single_line(auto) is True  # between statements
    assert is_single_line(auto, "always") is False
    assert is_single_line(FimRequest("u", "a.py", text, 1, off, invoked=True)) is False
    empty = "def f(x):\n    \n"
    assert is_single_line(FimRequest("u", "a.py", empty, 1, len("def f(x):\n    "), invoked=False)) is False
    assert is_single_line(FimRequest("u", "a.py", empty, 1, len("def f(x):\n    "), invoked=False), "never") is True


def test_an_invoked_request_finishes_the_typed_line_unless_it_opens_a_block() -> None:
    def single(text: str, invoked: bool = True, multiline: str = "auto") -> bool:
        return is_single_line(FimRequest("u", "a.py", text.replace("|", ""), 1, text.index("|"), invoked=invoked),
                              multiline)

    assert single("def f(x):\n    total = sum(|\n") is False  # an opener: a block or an argument list
    assert single("def f(x):\n    total = x.val|\n    return total\n") is True  # the typed line is finished
    assert single("def f(x):\n    total = x.val|\n", multiline="always") is False
    assert single("def f(x):\n    total = 1\n    |\n") is False  # asked on a blank line: a block may come
    assert single("def f(x):\n    total = 1\n    |\n", invoked=False) is True
    api = "x = |\n"  # a prompt an API client built: its own stops decide
    assert is_single_line(FimRequest("k", "a.py", api.replace("|", ""), 0, api.index("|"), True, from_editor=False)) is False
