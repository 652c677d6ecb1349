"""The hand-written next-edit set (evals/data/next_edit/): built file up to date, readable, balanced, sound."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path

import pytest

from engine.templates import EDIT_REGION_ABOVE, EDIT_REGION_BELOW
from engine.textdiff import line_span
from evals.cases import apply_edits, apply_to_files, diff_path, history_states, read_cases

ROOT = Path(__file__).resolve().parents[1]
CURATED = ROOT / "evals" / "data" / "next_edit" / "curated.jsonl"


def _builder():
    spec = importlib.util.spec_from_file_location("build_curated_next_edit",
                                                  ROOT / "scripts" / "build_curated_next_edit.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


build = _builder()


@pytest.fixture(scope="module")
def cases():
    return read_cases(CURATED)


def test_built_file_is_up_to_date():
    assert CURATED.read_text(encoding="utf-8") == build.render(build.build()), \
        "run python scripts/build_curated_next_edit.py"
    assert build.main(["--check"]) == 0


def test_check_flags_a_stale_file(tmp_path):
    stale = tmp_path / "curated.jsonl"
    stale.write_text(CURATED.read_text(encoding="utf-8")[:-200], encoding="utf-8")
    assert build.main(["--check", "--out", str(stale)]) == 1


def test_sizes_languages_and_categories(cases):
    assert len(cases) >= 60
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids))
    langs = Counter(c.language for c in cases)
    assert sum(n >= 8 for n in langs.values()) >= 5, langs
    cats = Counter(c.meta["category"] for c in cases)
    assert set(cats) == set(build.CATEGORIES), cats
    assert all(n >= 8 for n in cats.values()), cats
    assert cats["no-edit/noise"] >= 14
    for c in cases:
        assert c.kind == "edit" and c.meta["source"] == "curated" and c.meta["note"]
        assert (c.expected is None) == c.meta["category"].startswith("no-edit/")
        assert 1 <= len(c.history) <= 3


def test_history_unapplies_to_the_before_text(cases):
    sources = {s["id"]: s for s in build.source_cases()}
    for c in cases:
        before = sources[c.id]["files_before"]
        assert set(c.files) == set(before), c.id
        for path, chain in history_states(c).items():
            assert chain[0] == before[path], (c.id, path)
        for diff in c.history:
            assert diff_path(diff) in c.files, c.id


def test_every_expected_edit_changes_the_text(cases):
    for c in cases:
        if c.expected is not None:
            assert c.expected, c.id
            assert apply_to_files(c.files, c.expected) != c.files, c.id
            for e in c.expected:
                assert c.files[e.path][e.start:e.end] != e.text, c.id
                apply_edits(c.files[e.path], [x for x in c.expected if x.path == e.path])  # no overlap


def test_truths_follow_the_editable_region(cases):
    """below/above/complete: every expected edit lies in the cursor's editable region (cursor line, 6 above,
    8 below); jump: the one expected edit lies outside it (another file, or beyond those lines)."""
    for c in cases:
        cat = c.meta["category"]
        if c.expected is None:
            continue
        start, end = line_span(c.files[c.path], c.cursor.offset, EDIT_REGION_ABOVE, EDIT_REGION_BELOW)

        def inside(e, start=start, end=end, path=c.path):
            return e.path == path and start <= e.start and e.end <= end

        if cat == "next-edit/jump":
            assert len(c.expected) == 1, c.id
            assert not inside(c.expected[0]), c.id
        else:
            assert cat in ("next-edit/below", "next-edit/above", "next-edit/complete"), (c.id, cat)
            assert all(inside(e) for e in c.expected), c.id


def test_bad_snippets_fail_loudly():
    base = {"id": "x", "category": "next-edit/below", "language": "python",
            "files_before": {"a.py": "a = 1\na = 1\nb = 2\n"},
            "steps": [{"path": "a.py", "old": "b = 2", "new": "b = 3"}],
            "expected": {"path": "a.py", "old": "a = 1", "new": "a = 2", "occurrence": 2}, "note": "n"}
    assert build.build_case(base).expected[0].start == 6
    with pytest.raises(build.CaseError, match="ambiguous"):
        build.build_case({**base, "expected": {"path": "a.py", "old": "a = 1", "new": "a = 2"}})
    with pytest.raises(build.CaseError, match="not found"):
        build.build_case({**base, "steps": [{"path": "a.py", "old": "c = 3", "new": "c = 4"}]})
    with pytest.raises(build.CaseError, match="cursor"):
        build.build_case({**base, "cursor": {"path": "a.py", "after": "zzz"}})


def test_expected_may_be_a_list_of_edits():
    base = {"id": "x", "category": "next-edit/below", "language": "python",
            "files_before": {"a.py": "a = 1\nb = a\nc = a\n"},
            "steps": [{"path": "a.py", "old": "a = 1", "new": "z = 1"}], "note": "n"}
    two = [{"path": "a.py", "old": "c = a", "new": "c = z"}, {"path": "a.py", "old": "b = a", "new": "b = z"}]
    got = build.build_case({**base, "expected": two}).expected
    assert [(e.start, e.end, e.text) for e in got] == [(6, 11, "b = z"), (12, 17, "c = z")]
    with pytest.raises(build.CaseError, match="overlap"):
        build.build_case({**base, "expected": [{"path": "a.py", "old": "b = a", "new": "b = z"},
                                               {"path": "a.py", "old": "a\nc", "new": "z\nc"}]})
    with pytest.raises(build.CaseError, match="changes nothing"):
        build.build_case({**base, "expected": [two[0], {"path": "a.py", "old": "b", "new": "b"}]})
    with pytest.raises(build.CaseError, match="empty list"):
        build.build_case({**base, "expected": []})
