"""Post-processing filters and the show/hide decision."""

from __future__ import annotations

import pytest

from edit_server.selectivity import gate


def check(text: str, prefix: str, suffix: str, expect: str, single: bool = False) -> None:
    assert gate.clean_fim(text, prefix, suffix, single) == expect


def test_filters() -> None:
    check("   \n\t", "x = ", "", "")  # whitespace only
    check(")", "foo(", ")\n", "")  # repeats the text after the cursor
    check("a, b)", "foo(", ")\n", "a, b")  # the suffix already closes the bracket
    check("g(a))", "foo(", ")\n", "g(a)")  # only the closer the completion did not open is trimmed
    check("a, b\nc = 2", "foo(", ")\n", "a, b", single=True)  # single-line mode
    check("    return x\n    return x", "def f():\n    ", "\n    return x\n", "")  # rewrites next line
    check("y = 1\nz = 2\nw = 3", "x = 0\n", "\nz = 2\nw = 3\n", "y = 1")  # trailing lines repeat the suffix
    check("ab" * 10, "x = '", "", "ab")  # repetition loop
    check("a + b", "def add(a, b):\n    return a + b", "\n", "")  # echoes the end of the line
    check(" + c", "def add(a, b):\n    return a + b", "\n", " + c")  # continues it
    check("b", "    return a + b", "\n", "b")  # too short to call an echo
    check("pass\npass\npass\npass", "def f():\n", "", "pass")  # a line loop: one occurrence is kept
    check("\tif x:\n\t\treturn 1", "def f():\n    y = 1\n    ", "", "if x:\n        return 1")  # indentation


def test_repetition_in_code_is_not_a_loop() -> None:
    """Separators, runs of one character, number lists and repetitions the document holds are code:
    the old rule cut them ("# ----------------" -> "# -", "[0, 0, 0, 0, 0]" -> "[0, ")."""
    check("# ----------------\n    return 1", "def f():\n    ", "", "# ----------------\n    return 1")
    check("[0, 0, 0, 0, 0, 0, 0, 0]", "x = ", "\n", "[0, 0, 0, 0, 0, 0, 0, 0]")
    check('"aaaaaaaaaaaaaaaaaaaa"', "s = ", "\n", '"aaaaaaaaaaaaaaaaaaaa"')
    check("=" * 30, "# ", "\n", "=" * 30)
    rows = "    row(1)\n" * 3
    done = "x = 0\n" + rows + "    end()"
    check(done, "def f():\n" + rows + "    ", "", done)  # the prefix holds it
    check(done, "def f():\n    ", "", "x = 0\n    row(1)")  # invented: cut after one
    check("f(x, x, x, x, x, x, x, x)", "y = ", "\n", "f(x, x, x, x, x, x, x, x)")  # one word character
    check("go(self.self.self.self.self.x)", "x = ", "\n", "go(self.")


def test_a_rewrite_that_loops_is_no_edit() -> None:
    old = "def f(a, b):\n    # ----------------\n    return a\n"
    assert gate.clean_edit(old, old.replace("a\n", "a + b\n")) == old.replace("a\n", "a + b\n")
    looped = "def f(a, b):\n" + "    total = compute(a, b)\n" * 5
    assert gate.clean_edit(old, looped) == old  # cut, the rest of the region would be deleted
    doc = "x = 1\n" + "    total = compute(a, b)\n" * 5
    assert gate.clean_edit(old, looped, doc) == looped  # the document repeats that line itself


def test_multi_line_completion_stays_in_its_block() -> None:
    body = "def perimeter(w, h):\n    return 2"
    # the block ends where a line is indented less than the cursor line
    check(" * (w + h)\n\ndef area(w, h):\n    return w * h", body, "\n", " * (w + h)")
    check("x = 1\n        y = 2\n    z = 3\nq = 4", "def f():\n    ", "", "x = 1\n        y = 2\n    z = 3")
    # at top level: two blank lines start a new unit
    check("import os\nimport re\n\n\ndef g():\n    pass", "", "", "import os\nimport re")
    check("a = 1\n\nb = 2", "", "", "a = 1\n\nb = 2")  # one blank line is fine


@pytest.mark.parametrize(("left", "right", "ok"), [
    ("x = ", "", True), ("foo(", ")", True), ("x = ", "a.b.c.d.e", False),  # > 8 non-space chars
    ("fo", "o = 1", False),  # mid-word
    ("foo", " = 1", True),
])
def test_auto_trigger(left: str, right: str, ok: bool) -> None:
    assert gate.should_auto_trigger(left, right) is ok


def test_single_line_mode() -> None:
    assert gate.single_line_mode("x + y") and not gate.single_line_mode(")") and not gate.single_line_mode("")


def test_decide() -> None:
    assert gate.score([0.5, 0.5]) == pytest.approx(0.5)
    assert gate.decide("x", [0.9], True, 0.5).show
    d = gate.decide("x", [0.1, 0.2], True, 0.5)
    assert not d.show and d.reason == "low score" and 0 < d.score < 0.5
    assert gate.decide("x", [0.1], False, 0.5).show  # gate off: every non-empty suggestion is shown
    assert not gate.decide("  ", [0.9], False, 0.5).show


def test_clean_edit() -> None:
    assert gate.clean_edit("a\r\nb\r\n", "a\nc") == "a\r\nc\r\n"
    assert gate.clean_edit("a\n", "") == "a\n"
