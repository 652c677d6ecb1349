"""Edit sessions from real git histories: each commit's hunks per file, replayed as a person would type them.

A **session** is one file's change over one commit, or over several consecutive first-parent commits that
each touch it (joined into one longer session, up to ``MAX_COMMITS`` commits / ``MAX_STEPS`` hunks). Its
``steps`` are the commits' line hunks, top to bottom within a commit, commit after commit; each step is a
character edit ``(start, end, text)`` on the text the previous steps left (``apply_steps``).

The replay (`session_example` here for training, `evals.replay` for evaluation) applies the first ``k``
steps as the edit history, puts the cursor where the last applied hunk left it (the end of its last typed
line), and asks for the editable region around the cursor with every pending hunk inside it applied — or
unchanged (a no-edit example) when nothing is left there.

A merge on the first-parent chain counts with its diff against its first parent (the change as merged).
Dropped, each counted by reason (`ExtractReport`): root commits, added / deleted / renamed files, non-source
files (lock files among them), vendored and generated files, binary and huge files, formatting-only
changes, whole-file rewrites, changes with too many or too large hunks. Sessions keep only the file's
lines near the steps (``CONTEXT_LINES`` around the span the steps touch): what a training window can show.

Git runs as a subprocess with the hardened settings of `edit_server/context/safegit.py` (no hooks, no
fsmonitor, no external diff or textconv, no system/global config): a bundle clone is untrusted input.
Deterministic: the same repository gives the same sessions in the same order.
"""

from __future__ import annotations

import difflib
import gzip
import json
import os
import random
import re
import subprocess
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engine.tokens import TokenizerLike
from engine.train.corpus import GENERATED, LANGUAGES, SKIP_DIRS
from engine.train.tasks import Budget, Example

MAX_FILE_BYTES = 120_000  # the session keeps only the lines near its hunks
MAX_HUNK_LINES = 40  # a larger hunk is a paste or a move, not typing
MAX_HUNKS = 24  # per file and commit
MAX_STEPS = 40  # per (joined) session
MAX_COMMITS = 4  # commits joined into one session
REWRITE_SHARE = 0.5  # changed share of the old lines that makes a whole-file rewrite …
REWRITE_MIN_LINES = 30  # … when at least this many lines changed
CONTEXT_LINES = 40  # lines kept around the span the steps touch
LOCK_NAMES = re.compile(r"(^|/)(package-lock\.json|yarn\.lock|pnpm-lock\.yaml|poetry\.lock|Pipfile\.lock|"
                        r"uv\.lock|go\.sum|Cargo\.lock|composer\.lock|[^/]*\.lock)$")
VENDOR_PARTS = SKIP_DIRS | {"vendored", "_vendored", "external", "deps"}
GENERATED_NAMES = re.compile(r"(_pb2(_grpc)?\.py|\.pb\.go|_gen\.go|\.gen\.\w+|\.min\.\w+|\.d\.ts|_generated\.\w+)$")

_SAFE = ("--no-pager", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c",
         "log.showSignature=false", "-c", "diff.external=", "-c", "core.pager=cat", "-c", "protocol.allow=never",
         "-c", "core.untrackedCache=false")
_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_PAGER": "cat", "PAGER": "cat",
        "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "GIT_EXTERNAL_DIFF": "", "LC_ALL": "C"}
_DROP_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS",
             "GIT_CONFIG_COUNT", "GIT_EXEC_PATH")


def git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROP_ENV and not k.startswith("GIT_TRACE")}
    env.update(_ENV)
    return env


def safe_git(repo: Path, *args: str, timeout: float = 600.0) -> bytes:
    """``git -C repo <hardened settings> args`` → stdout (raises ``RuntimeError`` naming the command)."""
    cmd = ["git", "-C", str(repo), *_SAFE, *args]
    r = subprocess.run(cmd, capture_output=True, env=git_env(), timeout=timeout, stdin=subprocess.DEVNULL)
    if r.returncode:
        raise RuntimeError(f"{' '.join(cmd[:3])} {' '.join(args)}: {r.stderr.decode(errors='replace').strip()}")
    return r.stdout


class BlobReader:
    """``git cat-file --batch`` kept open: blob bytes by id."""

    def __init__(self, repo: Path) -> None:
        self.proc = subprocess.Popen(["git", "-C", str(repo), *_SAFE, "cat-file", "--batch"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=git_env())

    def read(self, sha: str) -> bytes | None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(sha.encode() + b"\n")
        self.proc.stdin.flush()
        header = self.proc.stdout.readline().split()
        if len(header) < 3 or header[1] != b"blob":
            return None
        data = self.proc.stdout.read(int(header[2]))
        self.proc.stdout.read(1)
        return data

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


@dataclass
class GitSession:
    repo: str
    path: str
    commits: list[str]
    base: str  # the file before the first step (only the lines near the steps, see CONTEXT_LINES)
    steps: list[tuple[int, int, str]]  # (start, end, text) on the text the previous steps left
    commit_of: list[int] = field(default_factory=list)  # per step: index into ``commits``

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict) -> GitSession:
        return cls(d["repo"], d["path"], list(d["commits"]), d["base"],
                   [(int(a), int(b), str(t)) for a, b, t in d["steps"]], list(d.get("commit_of", [])))


def apply_steps(text: str, steps: Iterable[tuple[int, int, str]]) -> str:
    for a, b, t in steps:
        text = text[:a] + t + text[b:]
    return text


def states_of(s: GitSession) -> list[str]:
    """The file's text before every step, then after the last."""
    out = [s.base]
    for st in s.steps:
        out.append(apply_steps(out[-1], [st]))
    return out


@dataclass
class ExtractReport:
    repo: str = ""
    commits: int = 0
    merges: int = 0
    reasons: Counter = field(default_factory=Counter)  # per file change: kept or why dropped
    sessions: int = 0
    steps: int = 0

    def as_dict(self) -> dict:
        return {"repo": self.repo, "commits": self.commits, "merges": self.merges, "sessions": self.sessions, "steps": self.steps,
                "file_changes": dict(sorted(self.reasons.items(), key=lambda kv: -kv[1]))}


def _norm(text: str) -> str:
    return re.sub(r"\s+", "", text)


def commit_hunks(old: str, new: str) -> list[tuple[int, int, list[str]]]:
    """Line hunks (old line span, new lines) of old → new, top to bottom."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    return [(i1, i2, b[j1:j2]) for tag, i1, i2, j1, j2 in ops if tag != "equal"]


def hunk_steps(old: str, hunks: list[tuple[int, int, list[str]]]) -> list[tuple[int, int, str]]:
    """The hunks as character steps, applied top to bottom (each on the text the previous ones left)."""
    lines = old.splitlines(keepends=True)
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))
    out, delta = [], 0
    for i1, i2, new in hunks:
        text = "".join(new)
        out.append((starts[i1] + delta, starts[i2] + delta, text))
        delta += len(text) - (starts[i2] - starts[i1])
    return out


def classify_path(path: str) -> str | None:
    """Why a path is never replayed (None: it may be)."""
    parts = path.split("/")
    if LOCK_NAMES.search(path):
        return "lock"
    if any(p in VENDOR_PARTS for p in parts[:-1]):
        return "vendored"
    if GENERATED_NAMES.search(parts[-1]):
        return "generated"
    if Path(path).suffix not in LANGUAGES:
        return "not-source"
    return None


def classify_change(old: bytes, new: bytes) -> tuple[str | None, str, str, list]:
    """(reason to drop or None, old text, new text, hunks)."""
    if max(len(old), len(new)) > MAX_FILE_BYTES:
        return "huge", "", "", []
    if b"\0" in old or b"\0" in new:
        return "binary", "", "", []
    try:
        o, n = old.decode("utf-8"), new.decode("utf-8")
    except UnicodeDecodeError:
        return "binary", "", "", []
    if GENERATED.search("\n".join(n.splitlines()[:5])):
        return "generated", o, n, []
    if "\r" in o or "\r" in n:
        o, n = o.replace("\r\n", "\n"), n.replace("\r\n", "\n")
    if o == n:
        return "no-change", o, n, []
    if _norm(o) == _norm(n):
        return "formatting-only", o, n, []
    hunks = commit_hunks(o, n)
    changed = sum(i2 - i1 for i1, i2, _ in hunks)
    old_lines = max(1, o.count("\n"))
    if changed >= REWRITE_MIN_LINES and changed > REWRITE_SHARE * old_lines:
        return "rewrite", o, n, []
    if len(hunks) > MAX_HUNKS:
        return "too-many-hunks", o, n, []
    if any(max(i2 - i1, len(new)) > MAX_HUNK_LINES for i1, i2, new in hunks):
        return "huge-hunk", o, n, []
    return None, o, n, hunks


def _log(repo: Path, rev: str) -> Iterator[tuple[str, list[str], list[tuple[str, str, str, str]]]]:
    """(commit, parents, [(status, old blob, new blob, path)]) along the first-parent chain, oldest first."""
    raw = safe_git(repo, "log", "--first-parent", "--reverse", "--no-renames", "--no-abbrev", "--raw",
                   "--no-ext-diff", "--no-textconv", "--format=@@COMMIT %H %P", rev)
    commit, parents, changes = None, [], []
    for line in raw.decode("utf-8", errors="replace").splitlines():
        if line.startswith("@@COMMIT "):
            if commit:
                yield commit, parents, changes
            commit, *parents = line[9:].split()
            changes = []
        elif line.startswith(":"):
            meta, _, path = line.partition("\t")
            f = meta.split()
            if len(f) >= 5:
                changes.append((f[4][:1], f[2], f[3], path))
    if commit:
        yield commit, parents, changes


def _trim(base: str, steps: list[tuple[int, int, str]]) -> tuple[str, list[tuple[int, int, str]]]:
    """Cut ``base`` to the lines near the steps: text before every step's start and after every step's end
    is never changed, so it can go (but ``CONTEXT_LINES`` of it)."""
    head, tail, text = len(base), len(base), base
    for a, b, t in steps:
        head = min(head, a)
        tail = min(tail, len(text) - b)
        text = text[:a] + t + text[b:]
    cut = head
    for _ in range(CONTEXT_LINES + 1):
        cut = base.rfind("\n", 0, max(0, cut - 1)) + 1 if cut > 0 else 0
        if cut == 0:
            break
    keep_to = len(base) - tail
    for _ in range(CONTEXT_LINES):
        nl = base.find("\n", keep_to)
        if nl < 0:
            keep_to = len(base)
            break
        keep_to = nl + 1
    return base[cut:keep_to], [(a - cut, b - cut, t) for a, b, t in steps]


def extract_sessions(repo: Path, *, rev: str = "HEAD", name: str | None = None,
                     report: ExtractReport | None = None) -> list[GitSession]:
    """Every session of ``repo``'s first-parent history up to ``rev`` (oldest first)."""
    name = name or repo.name
    rep = report if report is not None else ExtractReport()
    rep.repo = name
    reader = BlobReader(repo)
    done: list[GitSession] = []
    open_: dict[str, tuple[GitSession, str, int]] = {}  # path → (session, its current full text, last commit #)
    try:
        for n, (sha, parents, changes) in enumerate(_log(repo, rev)):
            rep.commits += 1
            if not parents:
                rep.reasons["root-commit"] += len(changes)
                continue
            rep.merges += len(parents) > 1  # a merge counts with its first-parent diff: the change as merged
            for status, a_sha, b_sha, path in changes:
                if status != "M":
                    rep.reasons[{"A": "added-file", "D": "deleted-file"}.get(status, "other-status")] += 1
                    open_.pop(path, None)
                    continue
                why = classify_path(path)
                if why is None:
                    old, new = reader.read(a_sha), reader.read(b_sha)
                    if old is None or new is None:
                        why = "unreadable"
                    else:
                        why, o, new_text, hunks = classify_change(old, new)
                if why is not None:
                    rep.reasons[why] += 1
                    open_.pop(path, None)
                    continue
                rep.reasons["kept"] += 1
                steps = hunk_steps(o, hunks)
                prev = open_.get(path)
                if prev and prev[2] == n - 1 and prev[1] == o and len(prev[0].commits) < MAX_COMMITS \
                        and len(prev[0].steps) + len(steps) <= MAX_STEPS:
                    s = prev[0]
                    s.commit_of += [len(s.commits)] * len(steps)
                    s.commits.append(sha)
                    s.steps += steps
                else:
                    s = GitSession(name, path, [sha], o, list(steps), [0] * len(steps))
                    done.append(s)
                open_[path] = (s, new_text, n)
    finally:
        reader.close()
    for s in done:
        s.base, s.steps = _trim(s.base, s.steps)
    rep.sessions, rep.steps = len(done), sum(len(s.steps) for s in done)
    return done


def write_sessions(path: Path, sessions: Iterable[GitSession]) -> int:
    """JSONL, gzip-compressed (deterministic: no name or timestamp in the header)."""
    n = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", compresslevel=9, mtime=0) as z:
        for s in sessions:
            z.write(s.to_json().encode() + b"\n")
            n += 1
    return n


def read_sessions(path: Path) -> list[GitSession]:
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(GitSession.from_dict(json.loads(line)))
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}: line {i}: not a git session ({type(e).__name__}: {e})") from e
    return out


# ---- the replay (training side) -------------------------------------------------------------
def cursor_after(text: str, step: tuple[int, int, str]) -> int:
    """Where a hunk leaves the cursor: the end of its last typed line (its start for a deletion)."""
    a, _, t = step
    cur = a + len(t)
    if t.endswith("\n"):
        cur -= 1
    return max(0, min(cur, len(text)))


def line_span(text: str, cursor: int, before: int, after: int) -> tuple[int, int]:
    """Char span of whole lines: ``before`` lines above the cursor's line, ``after`` below it."""
    a = text.rfind("\n", 0, cursor) + 1
    for _ in range(before):
        if a == 0:
            break
        a = text.rfind("\n", 0, a - 1) + 1
    nl = text.find("\n", cursor)
    b = len(text) if nl < 0 else nl + 1
    for _ in range(after):
        if b >= len(text):
            break
        nl = text.find("\n", b)
        b = len(text) if nl < 0 else nl + 1
    return a, b


def pending_in_region(current: str, final: str, ra: int, rb: int) -> tuple[int, int, str]:
    """(region start, end, new region): the region of ``current`` with every change of current → final
    that touches it applied (the region grows to whole hunks that cross its edges)."""
    a = current.splitlines(keepends=True)
    b = final.splitlines(keepends=True)
    starts = [0]
    for ln in a:
        starts.append(starts[-1] + len(ln))
    hunks = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        s, e = starts[i1], starts[i2]
        if e < ra or s > rb or (s == rb and e > s) or (i1 == i2 and s == rb and rb > ra):
            continue
        hunks.append((s, e, "".join(b[j1:j2])))
    for s, e, _ in hunks:
        ra, rb = min(ra, s), max(rb, e)
    region = current[ra:rb]
    for s, e, t in reversed(hunks):
        region = region[: s - ra] + t + region[e - ra:]
    return ra, rb, region


def session_example(tok: TokenizerLike, s: GitSession, rng: random.Random, budget: Budget,
                    k: int | None = None, reach_next: bool = False) -> Example | None:
    """Apply the first ``k`` steps (history), cursor after the k-th; target = the region around the
    cursor with every pending step inside it applied (unchanged: a no-edit example). ``reach_next``: the
    region reaches the line where the next step starts."""
    from engine.textdiff import unified_diff
    from engine.train.tasks_edit import render_edit_example

    if not s.steps:
        return None
    states = states_of(s)
    k = k if k is not None else rng.randint(1, len(s.steps))
    current, final = states[k], states[-1]
    cursor = cursor_after(current, s.steps[k - 1])
    ra, rb = line_span(current, cursor, rng.randint(1, 6), rng.randint(2, 8))
    if reach_next and k < len(s.steps):
        nxt = s.steps[k][0]
        ra = min(ra, current.rfind("\n", 0, nxt) + 1)
        rb = max(rb, nxt + 1 if nxt < len(current) else nxt)
        nl = current.find("\n", rb - 1) if rb > 0 else -1
        rb = len(current) if nl < 0 else max(rb, nl + 1)
    ra, rb, new_region = pending_in_region(current, final, ra, rb)
    history = tuple(d[:1500] for d in (unified_diff(s.path, x, y) for x, y in zip(states[max(0, k - 3):k],
                                                                                states[max(1, k - 2):k + 1],
                                                                                strict=True)) if d)
    label = "git" if new_region != current[ra:rb] else "noedit:git"
    return render_edit_example(tok, current, ra, rb, new_region, cursor - ra, s.path, history, budget, rng, label)


# ---- sources: repositories, bundles, pre-extracted files ----------------------------------------
def extract_source(src: Path, report: ExtractReport | None = None) -> list[GitSession]:
    """Sessions of a repository directory or a ``git bundle`` file (cloned, objects only, into a
    temporary directory: no checkout, no hooks)."""
    import shutil
    import tempfile

    if src.is_dir():
        return extract_sessions(src, report=report)
    if src.suffix != ".bundle":
        raise ValueError(f"{src}: not a repository, a .bundle or a .jsonl.gz of git sessions")
    tmp = Path(tempfile.mkdtemp(prefix="git-sessions-"))
    try:
        subprocess.run(["git", *_SAFE, "-c", "protocol.file.allow=always", "clone", "-q", "--bare", "--no-local", str(src.resolve()), str(tmp / "r")],
                       check=True, capture_output=True, env=git_env(), stdin=subprocess.DEVNULL, timeout=600)  # bundle: local file
        return extract_sessions(tmp / "r", name=src.stem, report=report)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def cap_sessions(sessions: list[GitSession], n: int, seed: str) -> list[GitSession]:
    """At most ``n`` sessions (0: all), a deterministic sample kept in history order."""
    if not n or len(sessions) <= n:
        return sessions
    keep = set(random.Random(seed).sample(range(len(sessions)), n))
    return [s for i, s in enumerate(sessions) if i in keep]


def load_git_sources(sources: Iterable[str], *, max_per_repo: int = 0) -> list[GitSession]:
    """Sessions from each source: a pre-extracted ``*.jsonl.gz`` file, a repository or a bundle."""
    out: list[GitSession] = []
    for src in sources:
        p = Path(src)
        if not p.exists():
            raise FileNotFoundError(f"git_repos: {src}: no such file or directory")
        got = read_sessions(p) if p.name.endswith(".jsonl.gz") else extract_source(p)
        out += cap_sessions(got, max_per_repo, f"cap:{p.name}")
    return out


def near_ks(s: GitSession, states: list[str] | None = None, above: int = 6, below: int = 8) -> list[int]:
    """The ``k`` (steps applied) after which the next step starts within ``above`` lines above / ``below``
    lines below the cursor: where a next-edit model has something to suggest."""
    states = states or states_of(s)
    out = []
    for k in range(1, len(s.steps)):
        cur = cursor_after(states[k], s.steps[k - 1])
        nxt = s.steps[k][0]
        lo, hi = min(cur, nxt), max(cur, nxt)
        lines = states[k].count("\n", lo, hi)
        if lines <= (above if nxt < cur else below):
            out.append(k)
    return out


def git_example(tok: TokenizerLike, s: GitSession, rng: random.Random, budget: Budget,
                noedit_share: float = 0.3) -> Example | None:
    """A session example: with probability 1 - ``noedit_share`` after a hunk whose next one is near the
    cursor (after most hunks the next one is elsewhere: a no-edit region), else after any hunk."""
    k = None
    if rng.random() >= noedit_share:
        ks = near_ks(s)
        if not ks:
            return None  # the caller draws another session
        k = rng.choice(ks)
    return session_example(tok, s, rng, budget, k=k, reach_next=k is not None)
