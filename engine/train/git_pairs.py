"""Real before/after pairs from git histories (GitPython; any repository on disk) → next-edit examples.

Each commit's modified source file gives (old, new); the line-level diff between them becomes a list of
`Site`s, replayed by `tasks_edit.session_example` like a synthetic edit session (history = the hunks the
user already made, target = the region with the next hunk applied).
"""

from __future__ import annotations

import difflib
import logging
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from engine.tokens import TokenizerLike
from engine.train.corpus import LANGUAGES
from engine.train.tasks import Budget, Example
from engine.train.tasks_edit import Site, session_example

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GitPair:
    repo: str
    commit: str
    path: str
    old: str
    new: str


def iter_git_pairs(repo_dir: Path, *, max_commits: int = 500, max_bytes: int = 100_000) -> Iterator[GitPair]:
    """(old, new) texts of source files modified by non-merge commits, newest first."""
    import git  # GitPython

    repo = git.Repo(repo_dir)
    for commit in repo.iter_commits(max_count=max_commits, no_merges=True):
        if not commit.parents:
            continue
        for d in commit.parents[0].diff(commit, create_patch=False):
            if d.change_type != "M" or Path(d.b_path or "").suffix not in LANGUAGES:
                continue
            try:
                old = d.a_blob.data_stream.read()
                new = d.b_blob.data_stream.read()
            except Exception:  # pragma: no cover - odd objects
                continue
            if max(len(old), len(new)) > max_bytes:
                continue
            try:
                yield GitPair(repo_dir.name, commit.hexsha, d.b_path, old.decode(), new.decode())
            except UnicodeDecodeError:
                continue


def pair_sites(old: str, new: str) -> list[Site]:
    """Line-level hunks of old → new as character sites on ``old``."""
    a = old.splitlines(keepends=True)
    b = new.splitlines(keepends=True)
    starts = [0]
    for ln in a:
        starts.append(starts[-1] + len(ln))
    sites = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op != "equal":
            sites.append(Site(starts[i1], starts[i2], "".join(b[j1:j2])))
    return sites


def git_example(tok: TokenizerLike, pair: GitPair, rng: random.Random, budget: Budget) -> Example | None:
    sites = pair_sites(pair.old, pair.new)
    if not sites or len(sites) > 20:
        return None
    order = list(range(len(sites)))
    k = rng.randint(0, len(sites) - 1) if len(sites) > 1 else 0
    if k == 0:  # nothing applied yet: the region is around the first hunk, no history
        return _first_hunk(tok, pair, sites[0], rng, budget)
    return session_example(tok, pair.old, sites, order, pair.path, rng, budget, "git", k=k)


def _first_hunk(tok: TokenizerLike, pair: GitPair, site: Site, rng: random.Random,
                budget: Budget) -> Example | None:
    from engine.train.tasks_edit import render_edit_example

    text = pair.old
    ra = text.rfind("\n", 0, max(0, site.start - 1)) + 1 if site.start else 0
    nl = text.find("\n", site.end)
    rb = len(text) if nl < 0 else nl + 1
    rb = max(rb, site.end)
    region = text[ra:rb]
    new_region = region[: site.start - ra] + site.text + region[site.end - ra:]
    return render_edit_example(tok, text, ra, rb, new_region, site.start - ra, pair.path, (), budget, rng, "git")
