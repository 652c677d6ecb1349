"""Git context on repositories made here with gitpython: uncommitted diff, recent files, co-change."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from edit_server.context import ContextBuilder
from edit_server.context.gitctx import GitContext
from engine.templates import render_fim
from engine.tokenizer import Tokenizer
from tests.context_util import options

TOK = Tokenizer.byte_level()


def _commit(repo: git.Repo, root: Path, files: dict[str, str], msg: str) -> None:
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    repo.index.add(list(files))
    repo.index.commit(msg)


@pytest.fixture
def repo(tmp_path: Path) -> tuple[git.Repo, Path]:
    repo = git.Repo.init(tmp_path)
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "t")
        cw.set_value("user", "email", "t@example.com")
    _commit(repo, tmp_path, {"a.py": "def a():\n    return 1\n", "b.py": "def b_partner():\n    return 2\n",
                             "c.py": "def c_loner():\n    return 3\n", "d.py": "def d():\n    return 4\n"}, "init")
    for i in range(3):  # a and b change together three times
        _commit(repo, tmp_path, {"a.py": f"def a():\n    return {i}\n",
                                 "b.py": f"def b_partner():\n    return {i}\n"}, f"ab {i}")
    _commit(repo, tmp_path, {"a.py": "def a():\n    return 9\n", "d.py": "def d():\n    return 9\n"}, "ad")
    _commit(repo, tmp_path, {"c.py": "def c_loner():\n    return 7\n"}, "c")
    big = {f"mass/f{i}.py": f"x = {i}\n" for i in range(40)}  # a mass commit: ignored for co-change
    _commit(repo, tmp_path, {**big, "a.py": "def a():\n    return 10\n"}, "mass")
    return repo, tmp_path


def test_cochange_recent_and_diff(repo) -> None:
    r, root = repo
    (root / "a.py").write_text("def a():\n    return 11  # UNCOMMITTED\n")
    ctx = GitContext(r, max_commit_files=30)
    assert ctx.diff(root / "a.py") is None and not ctx.ready  # nothing until refreshed
    ctx.refresh(root / "a.py", force=True)
    co = ctx.cochanged(root / "a.py", 3)
    assert [p.name for p, _ in co][:2] == ["b.py", "d.py"]
    assert dict((p.name, n) for p, n in co)["b.py"] == 4  # init + 3 joint commits
    assert all(not p.name.startswith("f") for p, _ in co)  # the mass commit was skipped
    assert "+    return 11  # UNCOMMITTED" in ctx.diff(root / "a.py")
    recent = [p.name for p in ctx.recent_files(5)]
    assert recent[0] == "a.py"  # dirty first
    assert "c.py" in recent
    ctx.refresh(root / "c.py")
    assert ctx.diff(root / "c.py") == ""


def test_git_sections_in_prompt(repo) -> None:
    r, root = repo
    text = "def a():\n    return 11  # UNCOMMITTED\n"
    (root / "a.py").write_text(text)
    b = ContextBuilder([root], TOK, options(index_workspace=False))
    path = str(root / "a.py")
    b.update_document(path, text, 1)  # schedules the git refresh in the background
    assert b.wait_idle(30)
    fim = b.build_fim(path, text, 12, [])
    kinds = {(s.kind, s.path) for s in fim.prompt.sections}
    assert ("git_diff", "a.py") in kinds and ("cochange", "b.py") in kinds
    diff = next(s.text for s in fim.prompt.sections if s.kind == "git_diff")
    assert "UNCOMMITTED" in diff and diff.startswith("diff --git")
    assert fim.report.git_ready
    assert len(render_fim(TOK, fim.prompt).ids) == fim.report.total
    # after a save the diff is refreshed in the background once it is older than the TTL
    (root / "a.py").write_text(text + "# SAVED_LATER\n")
    ctx = b.git_for(root / "a.py")
    ctx.diff_ttl_s = 0.0
    b.build_fim(path, text, 12, [])  # schedules the refresh
    assert b.wait_idle(30)
    fim = b.build_fim(path, text, 12, [])
    assert "SAVED_LATER" in next(s.text for s in fim.prompt.sections if s.kind == "git_diff")
    b.close()


def test_no_repository_and_no_commits(tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text("x = 1\n")
    b = ContextBuilder([tmp_path], TOK, options(index_workspace=False))
    assert b.git_for(tmp_path / "x.py") is None
    assert b.build_fim(str(tmp_path / "x.py"), "x = 1\n", 2, []).prompt.prefix == "x ="[:2]
    b.close()
    r = git.Repo.init(tmp_path / "empty")
    (tmp_path / "empty" / "y.py").write_text("y = 2\n")
    ctx = GitContext(r)
    ctx.refresh(tmp_path / "empty" / "y.py", force=True)  # no HEAD: empty, no exception
    assert ctx.diff(tmp_path / "empty" / "y.py") == "" and ctx.cochanged(tmp_path / "empty" / "y.py") == []
