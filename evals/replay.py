"""Turn a real git history into edit-acceptance cases (FIM, next-edit, no-edit) in the JSONL format.

For a commit ``c`` with parent ``p`` and each text file it modified, line hunks come from difflib
(``p`` → ``c``). Three kinds of cases:

* **fim**: the user is typing an added line of a hunk: the file is ``p``'s text with the hunk's lines
  before that line already typed, then the first ``c`` characters of the line (1 ≤ c, at least two
  characters left). History = that typing as one diff. Truth = insert the rest of the line at the cursor.
* **next-edit**: all hunks of the commit in order (file by file, top to bottom); hunks ``< k`` are
  applied (one history diff each), the cursor sits at the end of hunk ``k-1``; truth = hunk ``k``
  (same or another file) as one edit of the current text.
* **no-edit**: nothing should be suggested: the end of a line in a file the commit did not touch, or
  a line of a changed file ≥ ``far`` lines away from every hunk after all its hunks were applied.
"""

from __future__ import annotations

import difflib
import logging
import random
from dataclasses import dataclass
from pathlib import Path

from engine.textdiff import unified_diff
from evals.cases import LANGUAGES, Case, Cursor, Edit, language_of, normalize_ws

log = logging.getLogger(__name__)
MAX_FILE_CHARS = 100_000
MAX_HUNK_LINES = 30  # larger hunks are no next-edit targets


@dataclass(frozen=True)
class Hunk:
    path: str
    i1: int  # old line span [i1, i2)
    i2: int
    new: tuple[str, ...]  # the replacement lines (with newlines)


@dataclass
class ReplayOptions:
    commits: int = 20
    seed: int = 0
    rev: str = "HEAD"
    fim_per_commit: int = 3
    next_per_commit: int = 3
    quiet_per_commit: int = 2
    far: int = 20


def _text(blob: object) -> str | None:
    if blob is None:
        return None
    data = blob.data_stream.read()  # type: ignore[attr-defined]
    if b"\0" in data or len(data) > MAX_FILE_CHARS:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def hunks_of(path: str, old: str, new: str) -> list[Hunk]:
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    return [Hunk(path, i1, i2, tuple(b[j1:j2])) for tag, i1, i2, j1, j2 in ops if tag != "equal"]


def apply_hunks(old: str, hunks: list[Hunk]) -> str:
    """``old`` with the given hunks of one file applied (hunks in file order)."""
    lines = old.splitlines(keepends=True)
    for h in sorted(hunks, key=lambda h: h.i1, reverse=True):
        lines[h.i1: h.i2] = h.new
    return "".join(lines)


def _offset(old_lines: list[str], applied: list[Hunk], line: int) -> int:
    """Char offset of old line ``line`` in the text with ``applied`` hunks (all above it) applied."""
    n = sum(len(x) for x in old_lines[:line])
    for h in applied:
        if h.i2 <= line:
            n += sum(len(x) for x in h.new) - sum(len(x) for x in old_lines[h.i1: h.i2])
    return n


def _meta(repo: str, sha: str, category: str) -> dict[str, str | int | float]:
    return {"repo": repo, "commit": sha, "category": category}


def fim_cases(repo: str, sha: str, path: str, old: str, hunks: list[Hunk], rng: random.Random,
              limit: int) -> list[Case]:
    old_lines = old.splitlines(keepends=True)
    cands = [(h, k) for h in hunks for k, ln in enumerate(h.new) if len(ln.strip()) >= 4]
    out: list[Case] = []
    for h, k in rng.sample(cands, min(limit, len(cands))):
        line = h.new[k].rstrip("\r\n")
        indent = len(line) - len(line.lstrip())
        if len(line) - indent < 3:
            continue
        c = rng.randint(indent + 1, len(line) - 2)
        eol = h.new[k][len(line):]
        head = "".join(old_lines[: h.i1]) + "".join(h.new[:k])
        pre = head + line[:c] + eol + "".join(old_lines[h.i2:])
        cursor = len(head) + c
        out.append(Case(id=f"{sha[:12]}:fim:{path}:{h.i1}:{k}", kind="fim", language=language_of(path),
                        path=path, files={path: pre}, cursor=Cursor(path, cursor),
                        expected=[Edit(path, cursor, cursor, line[c:])],
                        history=[unified_diff(path, old, pre)], meta=_meta(repo, sha, "fim")))
    return out


def next_edit_cases(repo: str, sha: str, olds: dict[str, str], hunks: list[Hunk], rng: random.Random,
                    limit: int) -> list[Case]:
    out: list[Case] = []
    targets = [k for k in range(1, len(hunks))
               if max(len(hunks[k].new), hunks[k].i2 - hunks[k].i1) <= MAX_HUNK_LINES
               and normalize_ws(_old_text(olds, hunks[k])) != normalize_ws("".join(hunks[k].new))]
    for k in sorted(rng.sample(targets, min(limit, len(targets)))):
        done, target = hunks[:k], hunks[k]
        files: dict[str, str] = {}
        history: list[str] = []
        for path in dict.fromkeys([h.path for h in hunks[: k + 1]]):
            files[path] = apply_hunks(olds[path], [h for h in done if h.path == path])
        state = dict(olds)
        for h in done:  # one diff per applied hunk, in order
            before = state[h.path]
            state[h.path] = apply_hunks(olds[h.path], [x for x in done[: done.index(h) + 1]
                                                       if x.path == h.path])
            history.append(unified_diff(h.path, before, state[h.path]))
        last = done[-1]
        last_lines = olds[last.path].splitlines(keepends=True)
        applied_last = [h for h in done if h.path == last.path]
        cur = _offset(last_lines, applied_last, last.i1) + sum(len(x) for x in last.new)
        cur = min(cur, len(files[last.path]))
        if cur > 0 and files[last.path][cur - 1: cur] == "\n" and last.new:
            cur -= 1  # end of the last typed line, not the start of the next
        t_lines = olds[target.path].splitlines(keepends=True)
        t_applied = [h for h in done if h.path == target.path]
        start = _offset(t_lines, t_applied, target.i1)
        end = start + sum(len(x) for x in t_lines[target.i1: target.i2])
        out.append(Case(id=f"{sha[:12]}:next:{k}", kind="edit", language=language_of(last.path),
                        path=last.path, files=files, cursor=Cursor(last.path, cur),
                        expected=[Edit(target.path, start, end, "".join(target.new))],
                        history=history, meta=_meta(repo, sha, "next-edit")))
    return out


def _old_text(olds: dict[str, str], h: Hunk) -> str:
    return "".join(olds[h.path].splitlines(keepends=True)[h.i1: h.i2])


def _line_end_offsets(text: str) -> list[int]:
    out, pos = [], 0
    for ln in text.splitlines(keepends=True):
        body = ln.rstrip("\r\n")
        if body.strip():
            out.append(pos + len(body))
        pos += len(ln)
    return out


def quiet_cases(repo: str, sha: str, parent_files: dict[str, str], changed: dict[str, tuple[str, str]],
                hunks: list[Hunk], rng: random.Random, limit: int, far: int) -> list[Case]:
    out: list[Case] = []
    untouched = sorted(p for p in parent_files if p not in changed)
    for n in range(limit):
        if n % 2 == 0 and untouched:  # a file the commit did not touch
            path = rng.choice(untouched)
            text = parent_files[path]
            ends = _line_end_offsets(text)
            if not ends:
                continue
            kind = rng.choice(["fim", "edit"])
            out.append(Case(id=f"{sha[:12]}:quiet:{n}:{path}", kind=kind, language=language_of(path),
                            path=path, files={path: text}, cursor=Cursor(path, rng.choice(ends)),
                            expected=None, meta=_meta(repo, sha, "no-edit")))
        elif changed:  # far from every hunk of a changed file, after all its edits
            path = rng.choice(sorted(changed))
            old, new = changed[path]
            new_lines = new.splitlines(keepends=True)
            near = set()
            sm = difflib.SequenceMatcher(None, old.splitlines(keepends=True), new_lines, autojunk=False)
            for tag, _, _, j1, j2 in sm.get_opcodes():
                if tag != "equal":
                    near.update(range(j1 - far, j2 + far))
            ok = [i for i, ln in enumerate(new_lines) if i not in near and ln.strip()]
            if not ok:
                continue
            i = rng.choice(ok)
            cur = sum(len(x) for x in new_lines[:i]) + len(new_lines[i].rstrip("\r\n"))
            out.append(Case(id=f"{sha[:12]}:quiet:{n}:{path}", kind="edit", language=language_of(path),
                            path=path, files={path: new}, cursor=Cursor(path, cur), expected=None,
                            history=[unified_diff(path, old, new)], meta=_meta(repo, sha, "no-edit")))
    return out


def build_cases(repo_path: Path, opts: ReplayOptions, skipped: list[tuple[str, str]] | None = None) -> list[Case]:
    """Cases from the last ``opts.commits`` usable (non-merge, text-modifying) commits before ``rev`` of a
    repository or a ``git bundle`` (cloned bare to a temporary directory). A commit whose cases cannot be
    built is skipped (appended to ``skipped`` as (sha, reason))."""
    if repo_path.suffix == ".bundle" and repo_path.is_file():
        import shutil
        import tempfile

        from engine.git_history import clone_bundle

        tmp = Path(tempfile.mkdtemp(prefix="replay-"))
        try:
            return _build(clone_bundle(repo_path, tmp / "r"), repo_path.stem, opts, skipped)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return _build(repo_path, None, opts, skipped)


def _build(repo_path: Path, name: str | None, opts: ReplayOptions,
           skipped: list[tuple[str, str]] | None) -> list[Case]:
    import git

    repo = git.Repo(repo_path, search_parent_directories=True)
    name = name or Path(repo.working_tree_dir or repo_path).name
    cases: list[Case] = []
    used = 0
    for commit in repo.iter_commits(opts.rev):
        if used >= opts.commits:
            break
        if len(commit.parents) != 1:
            continue
        try:
            new = _commit_cases(name, commit, opts)
        except Exception as e:  # noqa: BLE001 - one odd commit must not lose the others
            log.warning("commit %s skipped: %s", commit.hexsha[:12], e)
            if skipped is not None:
                skipped.append((commit.hexsha, f"{type(e).__name__}: {e}"))
            continue
        if new is None:
            continue
        used += 1
        cases += new
    return cases


def _commit_cases(name: str, commit, opts: ReplayOptions) -> list[Case] | None:
    """The cases of one commit (None: it changes no text file we replay)."""
    parent = commit.parents[0]
    changed: dict[str, tuple[str, str]] = {}
    for d in parent.diff(commit):
        if d.change_type not in ("M", "R", "A") or not d.b_path:
            continue
        if Path(d.b_path).suffix.lower() not in LANGUAGES:
            continue
        old, new = ("" if d.change_type == "A" else _text(d.a_blob)), _text(d.b_blob)
        if old is not None and new is not None and old != new:
            changed[d.b_path] = (old, new)
    if not changed:
        return None
    rng = random.Random(f"{opts.seed}:{commit.hexsha}")
    per_file = {p: hunks_of(p, o, n) for p, (o, n) in sorted(changed.items())}
    fims = [c for p, hs in per_file.items()
            for c in fim_cases(name, commit.hexsha, p, changed[p][0], hs, rng, opts.fim_per_commit)]
    cases = rng.sample(fims, min(len(fims), opts.fim_per_commit))
    all_hunks = [h for hs in per_file.values() for h in hs]
    olds = {p: o for p, (o, _) in changed.items()}
    cases += next_edit_cases(name, commit.hexsha, olds, all_hunks, rng, opts.next_per_commit)
    parent_files = {}
    if opts.quiet_per_commit:
        blobs = [b for b in parent.tree.traverse() if b.type == "blob"
                 and Path(b.path).suffix.lower() in LANGUAGES and b.path not in changed]
        for b in rng.sample(blobs, min(len(blobs), 4)):
            t = _text(b)
            if t:
                parent_files[b.path] = t
    cases += quiet_cases(name, commit.hexsha, parent_files, changed, all_hunks, rng,
                         opts.quiet_per_commit, opts.far)
    return cases
