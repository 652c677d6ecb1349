"""Hardening of the context builder: git never runs repository-configured programs, bad workspace
roots fail closed, exclusions change at run time, huge lines and documents stay cheap and clean."""

from __future__ import annotations

import dataclasses
import subprocess
import time
from pathlib import Path

import git
import pytest

from edit_server.context import ContextBuilder, open_builder
from edit_server.context.safegit import SafeGit
from edit_server.context.syntax import Document
from engine.tokenizer import Tokenizer
from tests.context_util import options

TOK = Tokenizer.byte_level()


# ---- git runs nothing the repository names --------------------------------------------------------

@pytest.fixture
def hostile(tmp_path: Path) -> tuple[Path, Path]:
    root, marker = tmp_path / "repo", tmp_path / "MARKER"
    root.mkdir()
    evil = tmp_path / "evil.sh"
    evil.write_text(f'#!/bin/sh\necho "ran: $0 $*" >> "{marker}"\n'
                    'if [ $# -ge 1 ] && [ -f "$1" ]; then cat "$1"; else cat; fi\n')
    evil.chmod(0o755)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for h in ("post-index-change", "post-checkout", "pre-commit", "fsmonitor-watchman", "reference-transaction"):
        (hooks / h).write_text(evil.read_text())
        (hooks / h).chmod(0o755)
    r = git.Repo.init(root)
    with r.config_writer() as cw:
        cw.set_value("user", "name", "t")
        cw.set_value("user", "email", "t@example.com")
    (root / "a.py").write_text("def a():\n    return 1\n")
    (root / "b.py").write_text("def b():\n    return 2\n")
    r.index.add(["a.py", "b.py"])
    r.index.commit("init")
    (root / ".gitattributes").write_text("* filter=evil diff=evil\n")
    cfg = {("core", "fsmonitor"): evil, ("core", "pager"): evil, ("core", "hooksPath"): hooks,
           ("core", "sshCommand"): evil, ("core", "askPass"): evil, ("core", "editor"): evil,
           ("diff", "external"): evil, ("pager", "diff"): evil, ("pager", "log"): evil,
           ('filter "evil"', "clean"): evil, ('filter "evil"', "smudge"): evil, ('filter "evil"', "process"): evil,
           ('filter "evil"', "required"): "true", ('diff "evil"', "textconv"): evil,
           ('diff "evil"', "command"): evil, ("log", "showSignature"): "true", ("gpg", "program"): evil}
    with r.config_writer() as cw:
        for (sec, key), val in cfg.items():
            cw.set_value(sec, key, str(val))
    (root / "a.py").write_text("def a():\n    return 11  # changed\n")  # dirty: diff HEAD hashes it
    (root / "c.py").write_text("def c():\n    return 3\n")  # untracked: ls-files --others
    return root, marker


def test_git_never_runs_repository_configured_programs(hostile) -> None:
    root, marker = hostile
    b = ContextBuilder([root], TOK, options())
    path = str(root / "a.py")
    text = (root / "a.py").read_text()
    b.update_document(path, text, 1)
    assert b.wait_idle(60)
    fim = b.build_fim(path, text, 10, [])
    b.exclusions.reason(root / "b.py")  # check-ignore
    b.exclusions.workspace_files(root)  # ls-files
    ctx = b.git_for(root / "a.py")
    assert ctx is not None
    ctx.refresh(root / "a.py", force=True)  # diff HEAD, log, diff --name-only
    assert b.wait_idle(60)
    b.close()
    assert not marker.exists(), marker.read_text()
    assert "changed" in (ctx.diff(root / "a.py") or "")  # git did run: the diff is real
    assert any(s.kind == "git_diff" for s in fim.prompt.sections) or not fim.report.git_ready
    # control: plain git in this repository does run the hostile programs
    subprocess.run(["git", "diff", "HEAD"], cwd=root, capture_output=True, timeout=30)
    assert marker.exists()


def test_git_timeout_is_an_error_not_a_hang(tmp_path: Path) -> None:
    git.Repo.init(tmp_path)
    sg = SafeGit(tmp_path, timeout=0.0001)
    with pytest.raises(Exception, match="timed out|failed|exited"):
        sg.run("log")


# ---- fail closed ----------------------------------------------------------------------------------

def test_garbage_workspace_root_keeps_exclusions_and_reports_degraded(tmp_path: Path) -> None:
    (tmp_path / "secret.py").write_text('API_TOKEN = "tok_live_Zx81Qm2LpV7"\n')
    (tmp_path / ".env").write_text("DB_PASSWORD=hunter2hunter2\n")
    roots = [Path(str(tmp_path) + "\x00evil"), Path("relative/dir")]
    b = open_builder(roots, TOK, options(git=False))
    assert b.degraded and "control characters" in b.degraded and "current document" in b.degraded
    assert b.current_only and b.roots == []
    main = str(tmp_path / "main.py")
    text = 'import secret\n\nx = secret.API_TOKEN\npassword = "p4ssw0rd-xyz"\n'
    b.update_document(str(tmp_path / ".env"), "DB_PASSWORD=hunter2hunter2\n", 1)
    b.update_document(str(tmp_path / "secret.py"), 'API_TOKEN = "tok_live_Zx81Qm2LpV7"\n', 1)
    r = b.build_fim(main, text, len(text), [])
    seen = r.prompt.prefix + r.prompt.suffix + "".join(s.text for s in r.prompt.sections)
    assert not r.prompt.sections and r.report.degraded == b.degraded
    assert "p4ssw0rd-xyz" not in seen and "hunter2" not in seen and "tok_live" not in seen
    assert "x = secret.API_TOKEN" in seen  # the current document still gives context
    assert b.build_fim(str(tmp_path / ".env"), "DB_PASSWORD=hunter2hunter2\n", 3, []).report.blocked
    # one good root among bad ones: that root, degraded, full context
    b2 = ContextBuilder([tmp_path, Path("\x00")], TOK, options(git=False, index_workspace=False))
    assert b2.roots == [tmp_path.resolve()] and b2.degraded and not b2.current_only
    assert b2.exclusions.reason(tmp_path / ".env")
    b.close()
    b2.close()


def test_paths_with_nul_are_excluded_not_crashing(tmp_path: Path) -> None:
    b = ContextBuilder([tmp_path], TOK, options(git=False, index_workspace=False))
    bad = str(tmp_path / "x\x00.py")
    assert b.exclusions.reason(bad, text="a = 1\n")  # excluded (outside the roots: it cannot resolve)
    assert ContextBuilder([], TOK, options(git=False)).exclusions.reason(bad).startswith("unusable path")
    b.update_document(bad, "SECRET_MARK = 1\n", 1)  # an open document with a broken URI
    main = str(tmp_path / "m.py")
    r = b.build_fim(main, "y = 2\n", 5, [])
    assert "SECRET_MARK" not in "".join(s.text for s in r.prompt.sections)
    b.close()


def test_fallback_builder_sends_only_the_current_document_redacted(tmp_path: Path) -> None:
    b = ContextBuilder.fallback(TOK, options(), "context builder failed (ValueError)")
    assert b.degraded.startswith("context builder failed") and b.current_only
    text = 'KEY = "AKIAABCDEFGHIJKLMNOP"\nx = 1\n'
    r = b.build_fim(str(tmp_path / "a.py"), text, len(text), [])
    assert "AKIA" not in r.prompt.prefix and "x = 1" in r.prompt.prefix and not r.prompt.sections


def test_other_files_off_reads_only_the_current_document(tmp_path: Path) -> None:
    """Settings ``otherFiles`` false: no other file's text (definitions, imports, open documents, their history)
    reaches a prompt; turned on and off at run time (didChangeConfiguration), with no build from before
    reused."""
    from edit_server.context.options import ContextOptions
    from edit_server.core.settings import MAX_CONTEXT_BUDGET, Settings

    (tmp_path / "helpers.py").write_text("def scale_MARK(x):\n    return x * 3\n")
    main = str(tmp_path / "main.py")
    text = "from helpers import scale_MARK\n\ny = scale_MARK(2)\nz = "

    def seen(b: ContextBuilder) -> str:
        b.settle(main, text)
        r = b.build_fim(main, text, len(text), [])
        return "".join(s.text for s in r.prompt.sections)

    on = ContextOptions.from_settings(Settings(), MAX_CONTEXT_BUDGET)
    off = ContextOptions.from_settings(Settings(other_files=False), MAX_CONTEXT_BUDGET)
    assert not on.current_only and off.current_only
    b = ContextBuilder([tmp_path], TOK, dataclasses.replace(off, git=False))
    b.update_document(str(tmp_path / "open.py"), "OPEN_MARK = 1\n", 1)
    assert seen(b) == ""
    b.update_options(current_only=False)
    assert "return x * 3" in seen(b) and "OPEN_MARK" in seen(b)
    b.update_options(current_only=True)
    assert seen(b) == ""  # the sticky build with those sections is not reused
    r = b.build_edit(main, text, len(text), [])
    assert not r.prompt.sections
    b.close()


def test_workspace_folders_follow_the_editor(tmp_path: Path) -> None:
    """``set_roots`` (LSP didChangeWorkspaceFolders): an added folder's definitions reach prompts once
    indexed; a removed folder's files — indexed definitions, open documents, their edit history, the
    document's sticky build — never do again; a folder that is no directory is reported, not read."""
    from edit_server.context.options import changed_roots
    from tests.context_util import Hunk

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "alpha.py").write_text("def shared_name(x):\n    return 'ALPHA_MARK'\n")
    (b / "beta.py").write_text("def shared_name(x):\n    return 'BETA_MARK'\n")
    text = "from mod import shared_name\n\ny = shared_name(2)\nz = "
    builder = ContextBuilder([a], TOK, options(git=False))
    open_a = str(a / "notes.py")
    builder.update_document(open_a, "OPEN_A_MARK = 1\n", 1)
    hist = [Hunk(open_a, "--- a/notes.py\n+++ b/notes.py\n@@ -0,0 +1 @@\n+OPEN_A_MARK = 1\n", 1.0)]

    def seen(root: Path) -> str:
        main = str(root / "main.py")
        builder.settle(main, text)
        r = builder.build_fim(main, text, len(text), hist)
        return "".join(s.text for s in r.prompt.sections) + "".join(r.prompt.history)

    assert builder.wait_idle(30)
    before = seen(a)
    assert "ALPHA_MARK" in before and "OPEN_A_MARK" in before and "BETA_MARK" not in before
    builder.set_roots(changed_roots([a], added=[str(b)], removed=[str(a)]), removed=[a])
    assert builder.roots == [b.resolve()] and builder.degraded is None
    after = seen(b)
    assert "BETA_MARK" in after and "ALPHA_MARK" not in after and "OPEN_A_MARK" not in after
    assert "_MARK" not in seen(a)  # a document of the removed folder: nothing but itself
    builder.set_roots([b, tmp_path / "missing"])
    assert builder.roots == [b.resolve()] and "not a directory" in (builder.degraded or "")
    builder.set_roots([], removed=[b])  # no folder left: documents anywhere give context, but not those
    assert builder.roots == [] and "_MARK" not in seen(b) and "_MARK" not in seen(a)
    builder.set_roots([a])  # added again: read again
    assert "ALPHA_MARK" in seen(a) and "BETA_MARK" not in seen(a)
    builder.close()
    # removal matches the folder as given or resolved; additions are not doubled
    link = tmp_path / "link"
    link.symlink_to(a, target_is_directory=True)
    assert changed_roots([a, b], added=[str(b), ""], removed=[str(link)]) == [b]
    assert changed_roots([], added=[str(a), str(a)], removed=[]) == [a]


def test_files_changed_on_disk_renew_the_index_and_ignore_rules(tmp_path: Path) -> None:
    """``files_changed`` (LSP didChangeWatchedFiles): a rewritten file's definitions are the new ones, a
    deleted folder's are gone, and a file that a changed .gitignore now ignores is not read again."""
    git.Repo.init(tmp_path)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "mod.py").write_text("def shared_name(x):\n    return 'OLD_MARK'\n")
    (tmp_path / "pkg" / "inner.py").write_text("def inner_name(x):\n    return 'INNER_MARK'\n")
    (tmp_path / "notes.py").write_text("def private_name(x):\n    return 'PRIVATE_MARK'\n")
    b = ContextBuilder([tmp_path], TOK, options(git=False))
    main = str(tmp_path / "main.py")
    text = "y = shared_name(2) + inner_name(3) + private_name(4)\nz = "

    def seen() -> str:
        b.settle(main, text)
        return "".join(s.text for s in b.build_fim(main, text, len(text), []).prompt.sections)

    assert b.wait_idle(30)
    first = seen()
    assert all(m in first for m in ("OLD_MARK", "INNER_MARK", "PRIVATE_MARK"))
    (tmp_path / "mod.py").write_text("def shared_name(x):\n    return 'NEW_MARK'\n")
    for f in (tmp_path / "pkg").iterdir():
        f.unlink()
    (tmp_path / "pkg").rmdir()
    b.files_changed([(str(tmp_path / "mod.py"), False), (str(tmp_path / "pkg"), True)])
    second = seen()
    assert "NEW_MARK" in second and "OLD_MARK" not in second and "INNER_MARK" not in second
    (tmp_path / ".gitignore").write_text("notes.py\n")
    b.files_changed([(str(tmp_path / ".gitignore"), False)])
    third = seen()
    assert "PRIVATE_MARK" not in third and "NEW_MARK" in third
    index = b.index
    b.files_changed([(str(tmp_path / ".git" / "index"), False)])  # `git status` rewrote git's index
    assert b.index is index  # nothing to re-read: no rebuild
    (tmp_path / ".gitignore").unlink()
    (tmp_path / ".git" / "info").mkdir(exist_ok=True)
    (tmp_path / ".git" / "info" / "exclude").write_text("notes.py\n")
    b.files_changed([(str(tmp_path / ".gitignore"), True), (str(tmp_path / ".git" / "info" / "exclude"), False)])
    assert b.index is not index and "PRIVATE_MARK" not in seen()
    b.close()


# ---- options at run time --------------------------------------------------------------------------

def test_update_options_changes_exclusions_at_run_time(tmp_path: Path) -> None:
    (tmp_path / "vendor").mkdir()
    (tmp_path / "vendor" / "lib.py").write_text("def vendored_helper(x):\n    return 'VENDOR_MARK'\n")
    text = "from vendor.lib import vendored_helper\n\nvendored_helper(1)\n"
    b = ContextBuilder([tmp_path], TOK, options(git=False))
    assert b.wait_idle(30)
    main = str(tmp_path / "main.py")

    def seen() -> str:
        r = b.build_fim(main, text, len(text), [])
        return "".join(s.text for s in r.prompt.sections)

    assert "VENDOR_MARK" in seen()
    b.update_options(exclude=("vendor/*",))
    assert "VENDOR_MARK" not in seen() and b.options.exclude == ("vendor/*",)
    b.update_options(exclude=())
    assert b.wait_idle(30) and "VENDOR_MARK" in seen()
    b.update_options(options(git=False, max_definitions=0, max_line_chars=50))
    assert b.options.max_line_chars == 50
    b.close()


# ---- huge lines and documents ---------------------------------------------------------------------

LONG = "x = '" + "ab" * 450_000 + "'\n"  # a 900K-character line


def test_a_900k_character_line_is_cut_cleanly(tmp_path: Path) -> None:
    b = ContextBuilder([tmp_path], TOK, options(git=False, index_workspace=False, max_line_chars=1000))
    head = "def f():\n    return 1\n"
    text = head + LONG + "def g():\n    return 2\n"
    p = str(tmp_path / "m.py")
    t0 = time.perf_counter()
    fim = b.build_fim(p, text, 5, [], budget=4096)  # the window now reaches past the long line
    assert "def g():" in fim.prompt.suffix
    assert max(len(x) for x in fim.prompt.suffix.splitlines()) <= 1001
    on_long = b.build_fim(p, text, len(head) + 450_000, [], budget=4096)
    assert len(on_long.prompt.prefix.splitlines()[-1]) <= 501 and len(on_long.prompt.suffix.splitlines()[0]) <= 501
    edit = b.build_edit(p, text, len(head) + 100, [], budget=4096)  # no exception: blocked with a reason
    assert edit.report.blocked and "longer than 1000" in edit.report.blocked
    edit2 = b.build_edit(p, text, 5, [], budget=4096)  # the region stops before the long line
    assert not edit2.report.blocked and "ab" * 100 not in edit2.prompt.region and edit2.region_end <= len(head)
    assert time.perf_counter() - t0 < 10
    b.close()


def test_oversized_documents_are_never_parsed(tmp_path: Path, monkeypatch) -> None:
    parsed = []
    real = Document.tree.fget

    def spy(self):
        if self._dirty:
            parsed.append(len(self.text))
        return real(self)

    monkeypatch.setattr(Document, "tree", property(spy))
    b = ContextBuilder([tmp_path], TOK, options(git=False, index_workspace=False, max_doc_chars=10_000))
    big = "x = 1\n" * 5_000
    p = str(tmp_path / "big.py")
    b.update_document(p, big, 1)
    assert b.docs[p]._tree is None  # the size was checked before parsing
    r = b.build_fim(p, big, 10, [])
    assert r.report.blocked.startswith("document larger than") and r.prompt.prefix == ""
    b.update_document(p, big + "y = 2\n", 2)
    assert b.docs[p]._tree is None and not any(n > 10_000 for n in parsed)
    b.update_document(p, "y = 2\n", 3)  # fits again: parsed from scratch
    assert b.docs[p].tree is not None
    b.close()
