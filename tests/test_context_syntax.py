"""Context builder, syntax side: editable regions and window boundaries per language, and
incremental reparsing equal to a full parse. Fixtures mark the cursor ``<|>`` and the expected
editable region ``«...»``."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from edit_server.context.budget import TokenCounter
from edit_server.context.languages import LANGUAGES, spec_for
from edit_server.context.syntax import Document
from edit_server.context.window import LineCosts, fim_window, region_lines, region_text
from engine.tokenizer import Tokenizer

FIXTURES = Path(__file__).parent / "fixtures" / "context"
CURSOR, START, END = "<|>", "«", "»"
REGION_FILES = sorted(p.name for p in FIXTURES.glob("region*"))


def parse_markers(marked: str) -> tuple[str, int, int | None, int | None]:
    """(text, cursor offset, region start, region end) from a marked source."""
    text, marks, i = "", {}, 0
    while i < len(marked):
        for m in (CURSOR, START, END):
            if marked.startswith(m, i):
                marks[m] = len(text)
                i += len(m)
                break
        else:
            text += marked[i]
            i += 1
    return text, marks[CURSOR], marks.get(START), marks.get(END)


def check(path: str, marked: str) -> Document:
    """The editable region around the cursor must be exactly the «marked» span."""
    text, cursor, start, end = parse_markers(marked)
    doc = Document.open(path, text, 1)
    lo, hi = region_lines(doc, cursor)
    region = region_text(doc, cursor, lo, hi)
    got = text[: region.start] + START + text[region.start:cursor] + CURSOR + text[cursor:region.end] + \
        END + text[region.end:]
    assert got == marked
    assert region.text[: region.cursor] + CURSOR + region.text[region.cursor:] == \
        marked[marked.index(START) + 1: marked.index(END)]
    return doc


def test_every_language_has_a_fixture() -> None:
    exts = {Path(f).suffix for f in REGION_FILES}
    for spec in LANGUAGES:
        assert exts & set(spec.exts), f"no region fixture for {spec.name}"


@pytest.mark.parametrize("name", REGION_FILES)
def test_editable_region(name: str) -> None:
    doc = check(name, (FIXTURES / name).read_text())
    if spec_for(name) is None:
        assert doc.tree is None  # line-based fallback
    else:
        assert doc.tree is not None and not doc.tree.root_node.has_error


@pytest.mark.parametrize("name", REGION_FILES)
def test_region_bounds(name: str) -> None:
    text, cursor, _, _ = parse_markers((FIXTURES / name).read_text())
    doc = Document.open(name, text, 1)
    for off in range(0, len(text), 7):
        lo, hi = region_lines(doc, off, min_lines=4, max_lines=20)
        assert lo <= doc.line_of(off) < hi
        assert hi - lo <= 20
        assert hi - lo >= min(4, len(text.splitlines()))


@pytest.mark.parametrize("name", [n for n in REGION_FILES if spec_for(n)])
def test_window_cuts_at_syntax_boundaries(name: str) -> None:
    """With a budget too small for the file, the prefix starts at a unit start and the suffix ends
    at a unit end (of the units around the cursor), and never exceeds the budget."""
    text, cursor, _, _ = parse_markers((FIXTURES / name).read_text())
    doc = Document.open(name, text, 1)
    counter = TokenCounter(Tokenizer.byte_level())
    costs = LineCosts(doc, counter, {})
    starts, ends = doc.unit_rows(cursor)
    full = counter.count(text)
    for budget in range(10, full, 13):
        w = fim_window(doc, cursor, budget, counter, costs)
        assert text.endswith(w.after) or text[cursor:].startswith(w.after)
        assert w.before + w.after in text
        assert counter.count(w.before) + counter.count(w.after) == w.tokens <= budget
        line = doc.line_of(cursor)
        if w.start_line < line:
            assert w.start_line in starts or w.start_line == 0
        if line + 1 < w.end_line < len(doc.lines):
            assert w.end_line - 1 in ends


def test_python_window_keeps_whole_functions() -> None:
    text, cursor, _, _ = parse_markers((FIXTURES / "region.py").read_text())
    doc = Document.open("a.py", text, 1)
    counter = TokenCounter(Tokenizer.byte_level())
    need = counter.count(text[text.index("def target"):cursor])
    w = fim_window(doc, cursor, need + 20, counter, LineCosts(doc, counter, {}))
    assert w.before.startswith("def target(x):\n")  # not mid-way into `small`
    assert w.after.endswith("return -y\n") or w.after.endswith("\n\n")


def _random_edit(rng: random.Random, text: str) -> tuple[int, str, str]:
    start = rng.randrange(0, len(text) + 1)
    old = text[start:start + rng.choice([0, 0, 1, 3, 12])]
    new = rng.choice(["", "x", "(", ")", "\n", "    ", "foo(bar)", "{\n}", '"', "é", "\n\n  z = 1\n"])
    return start, old, new


@pytest.mark.parametrize("name", [n for n in REGION_FILES if spec_for(n)])
def test_incremental_parse_equals_full_parse(name: str) -> None:
    text, _, _, _ = parse_markers((FIXTURES / name).read_text())
    rng = random.Random(name)
    doc = Document.open(name, text, 1)
    for version in range(2, 40):
        edits, cur = [], doc.text
        for _ in range(rng.choice([1, 1, 2])):  # sometimes two contentChanges in one didChange
            e = _random_edit(rng, cur)
            cur = cur[: e[0]] + e[2] + cur[e[0] + len(e[1]):]
            edits.append(e)
        doc.apply(cur, version, edits)
        if version % 3:  # sometimes several updates before the tree is read (lazy reparse)
            continue
        fresh = Document.open(name, cur, version)
        assert doc.sexp() == fresh.sexp()
        assert doc.lines == fresh.lines and doc.line_starts == fresh.line_starts
    assert doc.reparsed_fully == 0


def test_byte_edits_and_bad_edits() -> None:
    doc = Document.open("a.py", "x = 1\n", 1)
    # tree-sitter form: replace "1" (bytes 4..5) by "23"
    doc.apply("x = 23\n", 2, [(4, 5, 6, (0, 4), (0, 5), (0, 6))])
    assert doc.sexp() == Document.open("a.py", "x = 23\n", 2).sexp() and doc.reparsed_fully == 0
    # edits that do not describe the change fall back to a full parse, never a wrong tree
    doc.apply("def f():\n    pass\n", 3, [(0, "x", "y")])
    assert doc.sexp() == Document.open("a.py", "def f():\n    pass\n", 3).sexp()
    assert doc.reparsed_fully == 1


def test_unknown_language_is_line_based() -> None:
    doc = Document.open("notes.unknownext", "a\nb\n\nc\n", 1)
    assert doc.tree is None and doc.node_at(0) is None
    doc.apply("a\nbb\n\nc\n", 2, [(2, "b", "bb")])
    assert doc.lines == ["a\n", "bb\n", "\n", "c\n", ""]


def test_builder_infers_edits_when_none_are_given(tmp_path) -> None:
    from edit_server.context import ContextBuilder
    from tests.context_util import options

    text, _, _, _ = parse_markers((FIXTURES / "region.py").read_text())
    b = ContextBuilder([tmp_path], None, options(git=False, index_workspace=False))
    path = str(tmp_path / "a.py")
    b.update_document(path, text, 1)
    new = text.replace("y = x * 2", "y = x * 3 + 1")
    b.update_document(path, new, 2)  # full text only, like a didChange with full sync
    b.update_document(path, new, 3)  # same text again: nothing to do
    doc = b.docs[path]
    assert doc.sexp() == Document.open(path, new, 3).sexp()
    assert doc.reparsed_fully == 0 and doc.version == 3
    b.close()


def test_line_region_is_the_trained_window_clipped_at_the_file_ends() -> None:
    from edit_server.context.window import line_region
    from engine.templates import EDIT_REGION_ABOVE, EDIT_REGION_BELOW

    text = "".join(f"x{i} = {i}\n" for i in range(40))
    doc = Document.open("m.py", text, 1)
    at = text.index("x20 =")
    assert line_region(doc, at) == (20 - EDIT_REGION_ABOVE, 20 + EDIT_REGION_BELOW + 1) == (14, 29)
    assert line_region(doc, 0) == (0, 9)  # the first line: nothing above
    assert line_region(doc, text.index("x38")) == (32, 40)  # the last lines: the empty "line" after "\n" is not one
    assert line_region(doc, len(text)) == (34, 41)  # unless the cursor is on it


def test_the_builder_takes_the_region_the_settings_name(tmp_path: Path) -> None:
    from edit_server.context import ContextBuilder
    from tests.context_util import TOK, options

    body = "".join(f"    y{i} = helper({i})\n" for i in range(12))
    text = "import os\n\n\ndef run():\n" + body + "    return y0\n\n\ndef other():\n    return 1\n"
    (tmp_path / "main.py").write_text(text)
    cur = text.index("y6 =")
    lines = ContextBuilder([tmp_path], TOK, options(git=False)).build_edit(str(tmp_path / "main.py"), text, cur, [])
    # y6 is line 10: lines 4 (y0) to 18 (the second blank line after the function)
    assert text[lines.region_start:lines.region_end] == body + "    return y0\n\n\n" == lines.prompt.region
    syntax = ContextBuilder([tmp_path], TOK, options(git=False, edit_region="syntax")).build_edit(
        str(tmp_path / "main.py"), text, cur, [])
    assert text[syntax.region_start:syntax.region_end] == "def run():\n" + body + "    return y0\n"
    # a didChangeConfiguration of nextEdit.region reaches a running builder (SETTINGS_FIELDS)
    from edit_server.core.settings import NextEdit, Settings
    from edit_server.serving.contexts import BuilderContext

    b = ContextBuilder([tmp_path], TOK, options(git=False))
    ctx = BuilderContext(b, Settings(), b.options.budget, 3)
    ctx.configure(Settings(next_edit=NextEdit(region="syntax")), None)
    again = b.build_edit(str(tmp_path / "main.py"), text, cur, [])
    assert (again.region_start, again.region_end) == (syntax.region_start, syntax.region_end)
