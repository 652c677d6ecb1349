"""Replay: cases built from a small repository with known commits have exactly the expected truths."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from evals.cases import Case, apply_edits, apply_to_files, dumps, history_states, loads
from evals.replay import ReplayOptions, build_cases

A0 = "def add(x, y):\n    return x + y\n"
A1 = "def add(x, y):\n    total = x + y\n    return total\n"
B0, B1 = "VALUE = 1\n", "VALUE = 2\n"
NOTES = "notes about the project\n"
D = "print('hello world')\n"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    r = git.Repo.init(root)
    who = git.Actor("Eval Test", "eval@example.invalid")

    def commit(files: dict[str, str], msg: str) -> None:
        for p, t in files.items():
            (root / p).write_text(t)
        r.index.add(list(files))
        r.index.commit(msg, author=who, committer=who)

    commit({"a.py": A0, "b.py": B0, "c.md": NOTES}, "initial")
    commit({"a.py": A1, "b.py": B1}, "two files")
    commit({"d.py": D}, "new file")
    return root


def _by_cat(cases: list[Case], cat: str) -> list[Case]:
    return [c for c in cases if c.meta["category"] == cat]


def test_round_trip_and_determinism(repo: Path) -> None:
    opts = ReplayOptions(commits=5, seed=3, fim_per_commit=10)
    cases = build_cases(repo, opts)
    assert cases == build_cases(repo, opts)
    assert [loads(dumps(c)) for c in cases] == cases
    # the root commit has no parent: only the two later commits are replayed
    assert {c.meta["commit"] for c in cases} == {c.hexsha for c in git.Repo(repo).iter_commits()
                                                 if c.parents}


def test_fim_truths_are_the_rest_of_the_commit_line(repo: Path) -> None:
    cases = build_cases(repo, ReplayOptions(commits=5, seed=3, fim_per_commit=10))
    fims = _by_cat(cases, "fim")
    # every added line with >= 4 non-blank chars: 2 in a.py, 1 in b.py, 1 in d.py
    want = {("a.py", "    total = x + y"): "def add(x, y):\n    total = x + y\n",
            ("a.py", "    return total"): A1,
            ("b.py", "VALUE = 2"): B1,
            ("d.py", "print('hello world')"): D}
    got = {}
    for c in fims:
        (e,) = c.expected or []
        text = c.files[c.path]
        assert c.kind == "fim" and e.start == e.end == c.cursor.offset and "\n" not in e.text
        done = apply_edits(text, [e])
        line_start = done.rfind("\n", 0, c.cursor.offset) + 1
        line = done[line_start: done.index("\n", c.cursor.offset)]
        typed = text[line_start: c.cursor.offset]
        assert typed.strip() and len(e.text) >= 2 and typed + e.text == line
        got[(c.path, line)] = done
        # the history is the typing so far, and replaying it ends in the case's file
        states = history_states(c)[c.path]
        assert states[-1] == text and states[0] == {"a.py": A0, "b.py": B0, "d.py": ""}[c.path]
    assert got == want


def test_next_edit_truth_is_the_next_hunk_in_another_file(repo: Path) -> None:
    cases = build_cases(repo, ReplayOptions(commits=5, seed=0))
    (nxt,) = _by_cat(cases, "next-edit")
    assert nxt.kind == "edit" and nxt.path == "a.py"
    assert nxt.files == {"a.py": A1, "b.py": B0}
    assert nxt.cursor.offset == A1.index("return total") + len("return total")
    assert nxt.expected is not None and [(e.path, e.start, e.end, e.text) for e in nxt.expected] == [
        ("b.py", 0, len(B0), B1)]
    assert apply_to_files(nxt.files, nxt.expected) == {"a.py": A1, "b.py": B1}
    assert history_states(nxt) == {"a.py": [A0, A1]}


def test_no_edit_cases_sit_in_untouched_files(repo: Path) -> None:
    cases = build_cases(repo, ReplayOptions(commits=1, seed=0, quiet_per_commit=1))
    assert {c.meta["commit"] for c in cases} == {git.Repo(repo).head.commit.hexsha}
    (quiet,) = _by_cat(cases, "no-edit")
    assert quiet.expected is None and quiet.path in {"a.py", "b.py", "c.md"}
    old = {"a.py": A1, "b.py": B1, "c.md": NOTES}[quiet.path]
    assert quiet.files == {quiet.path: old}
    assert old[quiet.cursor.offset] == "\n" and old[quiet.cursor.offset - 1] != "\n"
