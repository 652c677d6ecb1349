"""Git context: a file's uncommitted diff, recently changed files, co-change (git run hardened:
``safegit.py``, never a program named by the repository's config, with a timeout).

Everything here runs in a background thread (``GitContext.refresh``); builds only read the last
snapshot, so a slow ``git log`` never blocks a completion. Co-change = how often two files appear in
the same commit over the last ``log_commits`` commits (``git log --name-only``, as Zed does), ignoring
commits that touch more than ``max_commit_files`` files (mass renames, formatting).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from pathlib import Path

from edit_server.context.safegit import GitError, SafeGit

log = logging.getLogger(__name__)


class GitContext:
    def __init__(self, repo: SafeGit | object, *, log_commits: int = 3000, max_commit_files: int = 30,
                 ttl_s: float = 30.0) -> None:
        """``repo``: a ``SafeGit``, or anything with a ``working_tree_dir`` (a gitpython ``Repo``: only
        its directory is used, git itself always runs through ``SafeGit``)."""
        if not isinstance(repo, SafeGit):
            repo = SafeGit(Path(repo.working_tree_dir))  # type: ignore[attr-defined]
        self.repo = repo
        self.top = Path(repo.working_tree_dir).resolve()
        self.log_commits = log_commits
        self.max_commit_files = max_commit_files
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._diffs: dict[str, str] = {}
        self._cochange: dict[str, Counter[str]] = {}
        self._recent: list[str] = []
        self._history_at = 0.0
        self._rel: dict[str, str] = {}
        self._diff_at: dict[str, float] = {}
        self.pending: set[str] = set()  # paths with a refresh queued
        self.diff_ttl_s = 5.0

    def rel(self, path: Path) -> str:
        key = str(path)
        r = self._rel.get(key)
        if r is None:
            r = self._rel[key] = path.resolve().relative_to(self.top).as_posix()
        return r

    # ---- background work -------------------------------------------------------------------
    def refresh(self, path: Path | None = None, *, force: bool = False) -> None:
        """Recompute (blocking; call from a worker thread) the diff of ``path`` and, when stale,
        the recent-files list and co-change counts."""
        try:
            if path is not None:
                rel = self.rel(path)
                try:
                    diff = self.repo.run("diff", "HEAD", "--", rel).rstrip("\n")
                except GitError:  # no commits yet
                    diff = ""
                with self._lock:
                    self._diffs[rel] = diff + "\n" if diff and not diff.endswith("\n") else diff
                    self._diff_at[rel] = time.monotonic()
            if force or time.monotonic() - self._history_at > self.ttl_s:
                self._load_history()
        except Exception as e:  # a broken repository must never break completions
            log.warning("git context failed in %s: %s", self.top, e)
        finally:
            if path is not None:
                with self._lock:
                    self.pending.discard(self._rel.get(str(path), ""))

    def _load_history(self) -> None:
        try:
            out = self.repo.run("log", f"-n{self.log_commits}", "--name-only", "--format=%x01")
        except GitError:
            out = ""
        commits = [[f for f in c.split("\n") if f.strip()] for c in out.split("\x01")]
        commits = [c for c in commits if c]
        co: dict[str, Counter[str]] = {}
        for files in commits:
            if len(files) > self.max_commit_files:
                continue
            for f in files:
                cnt = co.setdefault(f, Counter())
                for g in files:
                    if g != f:
                        cnt[g] += 1
        try:
            dirty = [f for f in self.repo.run("diff", "HEAD", "--name-only").split("\n") if f]
        except GitError:
            dirty = []
        recent: list[str] = []
        small = [c for c in commits[:100] if len(c) <= self.max_commit_files]
        for f in [*dirty, *(f for c in small for f in c)]:
            if f not in recent:
                recent.append(f)
        with self._lock:
            self._cochange, self._recent, self._history_at = co, recent[:50], time.monotonic()

    # ---- snapshot reads (fast) -------------------------------------------------------------
    def diff(self, path: Path) -> str | None:
        """Last computed uncommitted diff of ``path`` ("" = clean; None = not computed yet)."""
        with self._lock:
            return self._diffs.get(self.rel(path))

    def cochanged(self, path: Path, k: int = 5) -> list[tuple[Path, int]]:
        with self._lock:
            cnt = self._cochange.get(self.rel(path))
            return [(self.top / f, n) for f, n in cnt.most_common(k)] if cnt else []

    def recent_files(self, k: int = 10) -> list[Path]:
        with self._lock:
            return [self.top / f for f in self._recent[:k]]

    def stale(self, path: Path) -> bool:
        """True (once, until the refresh runs) when the diff of ``path`` is older than ``diff_ttl_s``."""
        rel = self.rel(path)
        with self._lock:
            if rel in self.pending or time.monotonic() - self._diff_at.get(rel, 0.0) < self.diff_ttl_s:
                return False
            self.pending.add(rel)
            return True

    @property
    def ready(self) -> bool:
        return self._history_at > 0
