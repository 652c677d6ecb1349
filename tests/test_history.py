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
