"""Edit history: coalescing (near lines, pauses), undo, ring bound, diff size limit, open flag."""

from __future__ import annotations

from edit_server.core.documents import DocumentStore
from edit_server.core.history import EditHistory

DOC = "".join(f"line {i}\n" for i in range(40))


def setup() -> tuple[DocumentStore, EditHistory]:
    docs = DocumentStore()
    docs.open("file:///w/a.py", "/w/a.py", DOC, 1)
    docs.open("file:///w/b.py", "/w/b.py", DOC, 1)
    return docs, EditHistory(capacity=4)


def type_at(docs: DocumentStore, h: EditHistory, uri: str, line: int, text: str, t: float) -> None:
    doc = docs.get(uri)
    assert doc is not None
    off = sum(len(x) + 1 for x in doc.text.split("\n")[:line]) + 4
    for i, ch in enumerate(text):
        h.record(docs.apply(uri, off + i, off + i, ch, now=t + i * 0.1))


def test_typing_coalesces_into_one_hunk_rendered_as_unified_diff() -> None:
    docs, h = setup()
    type_at(docs, h, "file:///w/a.py", 3, "abc", 0.0)
    type_at(docs, h, "file:///w/a.py", 6, "xy", 0.5)  # 3 lines away, no pause: same hunk
    [hunk] = h.recent(6)
    assert hunk.path == "/w/a.py" and hunk.open
    assert "-line 3\n+lineabc 3\n" in hunk.diff and "+linexy 6\n" in hunk.diff
    assert hunk.diff.startswith("--- a//w/a.py\n+++ b//w/a.py\n")


def test_pause_far_edit_and_other_file_split_hunks() -> None:
    docs, h = setup()
    type_at(docs, h, "file:///w/a.py", 3, "a", 0.0)
    type_at(docs, h, "file:///w/a.py", 4, "b", 5.0)  # after a pause
    type_at(docs, h, "file:///w/a.py", 30, "c", 5.2)  # far away
    type_at(docs, h, "file:///w/b.py", 30, "d", 5.3)  # another file
    hunks = h.recent(6)
    assert [x.path for x in hunks] == ["/w/a.py"] * 3 + ["/w/b.py"]
    assert [x.open for x in hunks] == [False, False, False, True]
    assert "+lineb 4" in hunks[1].diff and "+linea 3" not in hunks[1].diff
    assert [x.diff for x in h.recent(2)] == [hunks[2].diff, hunks[3].diff]  # newest n, oldest first


def test_undo_cancels_hunk() -> None:
    docs, h = setup()
    type_at(docs, h, "file:///w/a.py", 3, "ab", 0.0)
    doc = docs.get("file:///w/a.py")
    assert doc is not None
    off = doc.text.index("lineab 3") + 4
    h.record(docs.apply("file:///w/a.py", off, off + 2, "", now=0.5))  # deleted again while typing
    assert h.recent(6) == []
    type_at(docs, h, "file:///w/a.py", 10, "zz", 1.0)
    assert len(h.recent(6)) == 1
    off = docs.get("file:///w/a.py").text.index("linezz 10") + 4  # type: ignore[union-attr]
    h.record(docs.apply("file:///w/a.py", off, off + 2, "", now=9.0))  # undo after a pause
    assert h.recent(6) == []


def test_ring_bound_and_large_diffs_dropped() -> None:
    docs, h = setup()
    for i in range(6):
        type_at(docs, h, "file:///w/a.py", i * 6, "q", i * 10.0)
    assert len(h) == 4
    h.record(docs.apply("file:///w/b.py", 0, 0, "x" * 7000 + "\n", now=100.0))
    assert all(len(x.diff) < 6144 for x in h.recent(10)) and len(h.recent(10)) == 3


def test_full_sync_records_minimal_span() -> None:
    docs, h = setup()
    ev = docs.replace_all("file:///w/a.py", DOC.replace("line 7\n", "line 7!\n"), now=0.0)
    assert (ev.old, ev.new) == ("", "!")
    h.record(ev)
    assert "+line 7!" in h.recent(1)[0].diff


def test_open_is_the_hunk_under_the_cursor() -> None:
    docs, h = setup()
    type_at(docs, h, "file:///w/a.py", 3, "a", 0.0)
    type_at(docs, h, "file:///w/a.py", 30, "b", 0.2)
    assert [x.open for x in h.recent(6, cursor=("/w/a.py", 3))] == [True, False]
    assert [x.open for x in h.recent(6, cursor=("/w/a.py", 30))] == [False, True]
    assert [x.open for x in h.recent(6, cursor=("/w/b.py", 3))] == [False, False]


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from engine.textdiff import unified_diff  # noqa: E402

_LINES = st.lists(st.sampled_from(["a\n", "b\n", "def f():\n", "    return 1\n", "\n", "x = [\n", "]\n"]),
                  min_size=0, max_size=60)
_EDIT = st.tuples(st.floats(0, 1), st.floats(0, 1), st.sampled_from(["", "z", "q\n", "\n", "    ", "a\nb\n"]))


@settings(max_examples=150, deadline=None)
@given(_LINES, st.lists(_EDIT, min_size=1, max_size=6), st.booleans())
def test_windowed_hunk_diff_is_an_exact_patch(lines: list[str], edits: list, final_nl: bool) -> None:
    """A hunk diffs only its changed span plus context lines; the diff is exact: applied to the
    document before the hunk it gives the document after, hunk headers numbered for the whole file."""
    text = "".join(lines) + ("" if final_nl else "tail")
    docs, h = DocumentStore(), EditHistory(near_lines=10_000, pause_s=1e9)
    docs.open("u", "/w/a.py", text, 1)
    for i, (fa, fb, new) in enumerate(edits):
        cur = docs.get("u").text  # type: ignore[union-attr]
        a, b = sorted((int(fa * len(cur)), int(fb * len(cur))))
        h.record(docs.apply("u", a, b, new, now=float(i)))
    final = docs.get("u").text  # type: ignore[union-attr]
    hunks = h.recent(100)
    if final == text:  # typed and undone: no hunk, or an empty one
        assert all(not x.diff for x in hunks)
        return
    assert len(hunks) == 1
    assert _apply(text, hunks[0].diff) == final
    assert unified_diff("/w/a.py", text, final).splitlines()[:2] == hunks[0].diff.splitlines()[:2]


def _apply(old: str, diff: str) -> str:
    """Apply a unified diff (our renderer's output, with git's no-newline marker) to ``old``."""
    src = old.splitlines(keepends=True)
    out: list[str] = []
    pos = 0
    lines = diff.splitlines(keepends=True)[2:]
    i = 0
    while i < len(lines):
        head = lines[i]
        assert head.startswith("@@ -"), head
        start = int(head.split()[1][1:].split(",")[0])
        count = int(head.split()[1].split(",")[1]) if "," in head.split()[1] else 1
        start = start - 1 if count else start
        out += src[pos:start]
        pos = start
        i += 1
        while i < len(lines) and not lines[i].startswith("@@ "):
            tag, body = lines[i][0], lines[i][1:]
            if i + 1 < len(lines) and lines[i + 1].startswith("\\ No newline"):
                body = body[:-1]
                i += 1
            if tag in " -":
                assert src[pos] == body, (src[pos], body)
                pos += 1
            if tag in " +":
                out.append(body)
            i += 1
    return "".join(out + src[pos:])


def test_big_document_diff_looks_only_at_the_changed_lines() -> None:
    big = "".join(f"row {i}\n" for i in range(200_000))  # ~2 MB
    docs, h = DocumentStore(), EditHistory()
    docs.open("u", "/w/big.py", big, 1)
    off = big.index("row 150000\n")
    h.record(docs.apply("u", off, off + 3, "ROW", now=0.0))
    [hunk] = h.recent(6)
    assert hunk.diff.splitlines()[2] == "@@ -149998,7 +149998,7 @@"
    assert "-row 150000" in hunk.diff and "+ROW 150000" in hunk.diff and len(hunk.diff) < 300
