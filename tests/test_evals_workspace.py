"""Replayed cases inside their repository's snapshot (``eval replay --workspace``): the snapshot is the
commit's parent tree written from git's objects (no symlink, no oversized file, bundles too), and through the
real server the prompt then carries what another file of the repository defines — without it, nothing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import git
import pytest
from msgspec.structs import replace

from evals.replay import ReplayOptions, build_cases
from evals.runners import CaseRunner, run_cases
from evals.store import ResultStore
from evals.workspace import MAX_BLOB_BYTES, Snapshots, write_tree
from tests.conftest import ROOT

HELPERS = "def scale_value(x):\n    return 'HELPER_MARK'\n"
MAIN0 = "from helpers import scale_value\n\n"
MAIN1 = MAIN0 + "result_total = scale_value(3) + scale_value(4)\n"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wsrepo")
    r = git.Repo.init(root)
    who = git.Actor("Eval Test", "eval@example.invalid")
    (root / "pkg").mkdir()
    (root / "helpers.py").write_text(HELPERS)
    (root / "main.py").write_text(MAIN0)
    (root / "pkg" / "deep.py").write_text("DEEP = 1\n")
    (root / "big.txt").write_text("x" * (MAX_BLOB_BYTES + 1))
    os.symlink("/etc/passwd", root / "link.txt")
    r.index.add(["helpers.py", "main.py", "pkg/deep.py", "big.txt", "link.txt"])
    r.index.commit("initial", author=who, committer=who)
    (root / "main.py").write_text(MAIN1)
    r.index.add(["main.py"])
    r.index.commit("use the helper", author=who, committer=who)
    return root


def test_unsafe_tree_paths_are_not_written() -> None:
    from evals.workspace import safe_relpath

    assert str(safe_relpath("src/a.py")) == "src/a.py"
    for bad in ("/etc/passwd", "../up.py", "a/../../b", "sub/.git/config", ".GIT/hooks/x", "a\\b", ""):
        assert safe_relpath(bad) is None, bad


def test_snapshot_is_the_parent_tree_without_links_or_big_files(repo: Path, tmp_path: Path) -> None:
    head = git.Repo(repo).head.commit.hexsha
    n = write_tree(repo, f"{head}^", tmp_path / "w")
    assert n == 3 and (tmp_path / "w" / "main.py").read_text() == MAIN0
    assert (tmp_path / "w" / "pkg" / "deep.py").read_text() == "DEEP = 1\n"
    assert not (tmp_path / "w" / "link.txt").exists() and not (tmp_path / "w" / "big.txt").exists()
    bundle = tmp_path / "wsrepo.bundle"
    subprocess.run(["git", "-C", str(repo), "bundle", "create", str(bundle), "--all"], check=True,
                   capture_output=True)
    cases = build_cases(bundle, ReplayOptions(commits=5, fim_per_commit=1, next_per_commit=0, quiet_per_commit=0))
    assert cases and {c.meta["repo"] for c in cases} == {"wsrepo"}  # commits mode reads bundles too
    snaps = Snapshots([bundle], tmp_path / "snaps", keep=1)
    d = snaps.for_case(cases[0])
    assert d is not None and (d / "helpers.py").read_text() == HELPERS
    root_commit = git.Repo(repo).head.commit.parents[0].hexsha
    assert snaps.for_case(replace(cases[0], meta={"repo": "wsrepo", "commit": root_commit})) is None  # no parent
    assert not d.exists()  # keep=1: the older snapshot is gone
    assert snaps.for_case(replace(cases[0], meta={"repo": "elsewhere", "commit": head})) is None  # not given
    snaps.close()
    assert not (tmp_path / "snaps" / ".repos").exists()


@pytest.mark.e2e
def test_workspace_cases_see_the_repository_through_the_server(repo: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDIT_SERVER_ENGINE_FACTORY", "tests.e2e.fake_engines:sections_path")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    cases = [c for c in build_cases(repo, ReplayOptions(commits=5, fim_per_commit=1, next_per_commit=0,
                                                        quiet_per_commit=0)) if c.path == "main.py"]
    assert len(cases) == 1
    texts = {}
    for mode in ("alone", "workspace"):
        snaps = Snapshots([repo], tmp_path / mode / "snapshots") if mode == "workspace" else None
        store = ResultStore(tmp_path / mode / "out", {"mode": mode}, fresh=True)
        runner = CaseRunner(model="tiny-random", device="cpu", root=tmp_path / mode / "cases",
                            log_path=tmp_path / mode / "server.log", gate=False, threshold=None, timeout=120,
                            init_extra={"feedbackDb": ":memory:"}, workspace=snaps)
        run_cases(cases, store, runner)
        rec = store.records[cases[0].id]
        assert rec["error"] is None and rec["shown"]
        texts[mode] = rec["suggestion"][0][3]
        if snaps is not None:
            assert (tmp_path / mode / "snapshots" / f"{repo.name}-{cases[0].meta['commit'][:12]}" / "main.py"
                    ).read_text() == MAIN0  # the case's file was put back
            snaps.close()
    # the document is named by its path in the repository either way (not by the runner's case directory)
    assert texts == {"alone": "none @main.py", "workspace": "HELPER_MARK @main.py"}
