"""A replayed case's workspace: the repository's files as they were when the case's commit was being made.

A case built from a git history (``meta.repo`` names the repository, ``meta.commit`` the commit being typed)
carries only the file(s) being edited. Under ``--workspace`` the runner puts the rest of the repository
around them — every file of ``<commit>^`` — and makes that directory the server's workspace folder, so the
prompts carry what a real editor's would: definitions from other files, imports, the directory's
neighbours. Blobs are read from git's object store (``git ls-tree`` / ``cat-file``, hardened: no checkout,
no hooks, filters or attributes); symlinks, submodules, files over 1 MB, paths that would leave the
snapshot and anything under a ``.git`` directory are not written. Bundles are cloned bare once per run.
"""

from __future__ import annotations

import logging
import shutil
from collections import OrderedDict
from pathlib import Path, PurePosixPath

from engine.git_history import BlobReader, clone_bundle, safe_git
from evals.cases import Case

log = logging.getLogger(__name__)
MAX_BLOB_BYTES = 1_000_000
FILE_MODES = ("100644", "100755")  # regular files (not 120000 symlinks, 160000 submodules)


def repo_name(src: Path) -> str:
    """The name replayed cases give a repository (``meta.repo``): a bundle's stem, a directory's name."""
    return src.stem if src.suffix == ".bundle" else src.resolve().name


def safe_relpath(path: str) -> PurePosixPath | None:
    """``path`` when it stays inside the snapshot and names no git directory (a hostile tree's ``.git/config``
    would make the snapshot a repository with its own settings), else None."""
    p = PurePosixPath(path)
    if p.is_absolute() or not p.parts or "\\" in path or \
            any(x in ("", ".", "..") or x.lower() == ".git" for x in p.parts):
        return None
    return p


def write_tree(repo: Path, rev: str, dest: Path) -> int:
    """Every regular file of ``rev``'s tree (≤ 1 MB) written under ``dest``; the number written."""
    listing = safe_git(repo, "ls-tree", "-r", "-z", "--full-tree", "-l", rev)
    reader = BlobReader(repo)
    n = 0
    try:
        for entry in listing.split(b"\0"):
            if not entry:
                continue
            head, _, raw = entry.partition(b"\t")
            mode, kind, sha, size = head.decode().split()
            path = safe_relpath(raw.decode("utf-8", "surrogateescape"))
            if mode not in FILE_MODES or kind != "blob" or path is None or not size.isdigit() \
                    or int(size) > MAX_BLOB_BYTES:
                continue
            data = reader.read(sha)
            if data is None:
                continue
            f = dest.joinpath(*path.parts)
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(data)
            n += 1
    finally:
        reader.close()
    return n


class Snapshots:
    """Workspace directories under ``root``, one per (repository, commit), the last ``keep`` kept."""

    def __init__(self, sources: list[Path], root: Path, keep: int = 4) -> None:
        self.root, self.keep = root, keep
        self.sources = {repo_name(s): s for s in sources}
        self._repos: dict[str, Path] = {}
        self._dirs: OrderedDict[tuple[str, str], Path | None] = OrderedDict()

    def _repo(self, name: str) -> Path:
        if name not in self._repos:
            src = self.sources[name]
            self._repos[name] = clone_bundle(src, self.root / ".repos" / name) if src.suffix == ".bundle" \
                else src
        return self._repos[name]

    def for_case(self, case: Case) -> Path | None:
        """The case's workspace directory (written on first use), or None: the case names no repository
        given here, or its commit has no parent / cannot be read (the case then runs alone)."""
        name, commit = str(case.meta.get("repo", "")), str(case.meta.get("commit", ""))
        if name not in self.sources or not commit:
            return None
        key = (name, commit)
        if key in self._dirs:
            self._dirs.move_to_end(key)
            return self._dirs[key]
        dest = self.root / f"{name}-{commit[:12]}"
        got: Path | None = dest
        try:
            n = write_tree(self._repo(name), f"{commit}^", dest)
            log.info("workspace %s: %d files of %s^", dest.name, n, commit[:12])
        except (RuntimeError, OSError, ValueError) as e:
            log.warning("no workspace for %s at %s: %s", name, commit[:12], e)
            shutil.rmtree(dest, ignore_errors=True)
            got = None
        self._dirs[key] = got
        while len(self._dirs) > self.keep:
            _, old = self._dirs.popitem(last=False)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        return got

    def close(self) -> None:
        for d in self._dirs.values():
            if d is not None:
                shutil.rmtree(d, ignore_errors=True)
        self._dirs.clear()
        shutil.rmtree(self.root / ".repos", ignore_errors=True)
