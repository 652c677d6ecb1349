"""The JSONL edit-case format (docs/EVAL_FORMAT.md): read/write, edits, diffs, and judging suggestions."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import msgspec

from engine.textdiff import common_ends, common_prefix
from evals.metrics import (  # normalize_ws re-exported: evals.replay imports it from here
    line_f1,
    normalize_ws,
)

LANGUAGES: dict[str, str] = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".jsx": "javascript", ".mjs": "javascript",
    ".ts": "typescript", ".tsx": "typescriptreact", ".rs": "rust", ".go": "go", ".java": "java",
    ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".hpp": "cpp", ".cxx": "cpp", ".lua": "lua",
    ".md": "markdown", ".rst": "restructuredtext", ".toml": "toml", ".yaml": "yaml", ".yml": "yaml",
    ".json": "json", ".sh": "shellscript", ".rb": "ruby", ".txt": "plaintext", ".cfg": "ini",
    ".ini": "ini", ".html": "html", ".css": "css",
}


def language_of(path: str) -> str:
    return LANGUAGES.get(Path(path).suffix.lower(), "plaintext")


class Edit(msgspec.Struct, frozen=True):
    """Replace ``text[start:end]`` of ``path`` (char offsets in the pre-edit file) with ``text``."""

    path: str
    start: int
    end: int
    text: str


class Cursor(msgspec.Struct, frozen=True):
    path: str
    offset: int  # char offset (Python str index) in files[path]


class Case(msgspec.Struct, omit_defaults=True):
    id: str
    kind: Literal["fim", "edit"]  # which request the editor sends: inlineCompletion | copilotInlineEdit
    language: str
    path: str  # the file with the cursor (== cursor.path)
    files: dict[str, str]  # path -> text as the editor shows it now (history already applied)
    cursor: Cursor
    expected: list[Edit] | None  # None: the right answer is to stay quiet
    history: list[str] = []  # unified diffs of the user's recent edits, oldest first
    meta: dict[str, str | int | float] = {}  # provenance (repo, commit, category, ...)


_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder(Case)


def dumps(case: Case) -> str:
    return _enc.encode(case).decode("utf-8")


def loads(line: str) -> Case:
    case = _dec.decode(line)
    validate(case)
    return case


def validate(case: Case) -> None:
    where = f"case {case.id!r}"
    for path in case.files:  # files are written under a per-case workspace directory
        parts = path.replace("\\", "/").split("/")
        if not path or path.startswith(("/", "\\")) or ".." in parts or ":" in parts[0]:
            raise ValueError(f"{where}: file path {path!r} must be relative, without '..'")
    if case.cursor.path not in case.files:
        raise ValueError(f"{where}: cursor.path {case.cursor.path!r} is not in files")
    if not 0 <= case.cursor.offset <= len(case.files[case.cursor.path]):
        raise ValueError(f"{where}: cursor.offset {case.cursor.offset} outside the file")
    for e in case.expected or ():
        if e.path not in case.files:
            raise ValueError(f"{where}: expected edit path {e.path!r} is not in files")
        if not 0 <= e.start <= e.end <= len(case.files[e.path]):
            raise ValueError(f"{where}: expected edit [{e.start}, {e.end}) outside {e.path!r}")


def read_cases(path: Path, bad: list[tuple[str, str]] | None = None) -> list[Case]:
    """The cases of a JSONL file. A line that is not a valid case raises, or — with ``bad`` — is
    appended there as ``(id, reason)`` (its ``id`` when it has one, else ``line N``) and skipped."""
    out: list[Case] = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    out.append(loads(line))
                except (msgspec.ValidationError, msgspec.DecodeError, ValueError) as e:
                    if bad is None:
                        raise ValueError(f"{path}:{n}: {e}") from None
                    bad.append((_line_id(line, n), f"{path.name}:{n}: {e}"))
    return out


def _line_id(line: str, n: int) -> str:
    try:
        case_id = msgspec.json.decode(line).get("id")
    except (msgspec.DecodeError, AttributeError):
        case_id = None
    return case_id if isinstance(case_id, str) and case_id else f"line {n}"


def write_cases(path: Path, cases: Iterable[Case]) -> int:
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for c in cases:
            f.write(dumps(c) + "\n")
            n += 1
    return n


# --------------------------------------------------------------------------- edits

def apply_edits(text: str, edits: Sequence[Edit]) -> str:
    """Apply non-overlapping edits of one file (offsets refer to ``text``)."""
    last = len(text) + 1
    for e in sorted(edits, key=lambda e: (e.start, e.end), reverse=True):
        if not 0 <= e.start <= e.end <= len(text) or e.end > last:
            raise ValueError(f"edit [{e.start}, {e.end}) of {e.path!r} is out of range or overlaps")
        text = text[: e.start] + e.text + text[e.end:]
        last = e.start
    return text


def apply_to_files(files: dict[str, str], edits: Sequence[Edit]) -> dict[str, str]:
    out = dict(files)
    for path in {e.path for e in edits}:
        out[path] = apply_edits(files.get(path, ""), [e for e in edits if e.path == path])
    return out


@dataclass(frozen=True)
class Judgement:
    shown: bool  # the server suggested a non-empty change
    accepted: bool  # applying it yields the truth (whitespace-normalised); for quiet cases: not shown
    partial: float  # longest correct prefix of the change / length of the true change, in [0, 1]
    correct: bool  # accepted, or (quiet case and nothing shown)
    line_f1: float = 0.0  # F1 of the suggestion's changed lines against the true change's (quiet cases: 0)


def judge(case: Case, suggestion: Sequence[Edit]) -> Judgement:
    files = case.files
    changes = [e for e in suggestion if files.get(e.path, "")[e.start:e.end] != e.text]
    shown = bool(changes)
    if case.expected is None:
        return Judgement(shown, False, 0.0, not shown)
    if not shown:
        return Judgement(False, False, 0.0, False)
    try:
        got = apply_to_files(files, changes)
    except ValueError:
        return Judgement(True, False, 0.0, False)
    want = apply_to_files(files, case.expected)
    paths = {e.path for e in changes} | {e.path for e in case.expected}
    accepted = all(normalize_ws(got.get(p, "")) == normalize_ws(want.get(p, "")) for p in paths)
    f1 = 1.0 if accepted else line_f1({p: files.get(p, "") for p in paths}, got, want)
    return Judgement(True, accepted, 1.0 if accepted else _partial(files, got, want, case.expected),
                     accepted, f1)


def _partial(files: dict[str, str], got: dict[str, str], want: dict[str, str],
             expected: Sequence[Edit]) -> float:
    """Characters of the true change (from its first changed char) the suggestion reproduces, in order."""
    path = min(expected, key=lambda e: e.start).path
    old, w, g = files.get(path, ""), want[path], got.get(path, "")
    start, tail = common_ends(old, w)
    true_change = w[start: len(w) - tail]
    if not true_change:  # a pure deletion: all or nothing
        return 0.0
    return min(common_prefix(g[start:], w[start:]), len(true_change)) / len(true_change)


# --------------------------------------------------------------------------- unified diffs

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def diff_path(diff: str) -> str | None:
    """The file a unified diff applies to (the ``+++ b/...`` line, else ``--- a/...``)."""
    old = None
    for line in diff.splitlines():
        if line.startswith("+++ "):
            p = line[4:].split("\t")[0]
            if p != "/dev/null":
                return p[2:] if p.startswith("b/") else p
        elif line.startswith("--- ") and old is None:
            p = line[4:].split("\t")[0]
            old = p[2:] if p.startswith("a/") else p
    return old


def apply_diff(text: str, diff: str, *, reverse: bool = False) -> str:
    """Apply (or un-apply) a unified diff as rendered by ``engine.textdiff.unified_diff``."""
    lines = text.splitlines(keepends=True)
    hunks: list[tuple[int, list[str], list[str]]] = []
    cur: tuple[int, list[str], list[str]] | None = None
    last: list[list[str]] = []
    for raw in diff.splitlines(keepends=True):
        m = _HUNK.match(raw)
        if m:
            a, b, c, d = m.group(1), m.group(2), m.group(3), m.group(4)
            start, count = (int(c), d) if reverse else (int(a), b)
            idx = start - 1 if count != "0" else start  # an empty side names the line before it
            cur = (max(idx, 0), [], [])
            hunks.append(cur)
            continue
        if cur is None or raw.startswith(("--- ", "+++ ")) and not cur[1] and not cur[2]:
            continue
        tag, body = raw[:1], raw[1:]
        src, dst = cur[1], cur[2]
        if reverse:
            tag = {"+": "-", "-": "+"}.get(tag, tag)
        if tag == " ":
            src.append(body)
            dst.append(body)
            last = [src, dst]
        elif tag == "-":
            src.append(body)
            last = [src]
        elif tag == "+":
            dst.append(body)
            last = [dst]
        elif tag == "\\":
            for lst in last:
                lst[-1] = lst[-1].rstrip("\n")
    delta = 0
    for idx, src, dst in hunks:
        pos = _find(lines, src, idx + delta)
        if pos is None:
            raise ValueError("diff does not apply: context not found")
        lines[pos: pos + len(src)] = dst
        delta += len(dst) - len(src)
    return "".join(lines)


def _find(lines: list[str], chunk: list[str], guess: int) -> int | None:
    n = len(chunk)
    order = sorted(range(len(lines) - n + 1), key=lambda i: abs(i - guess))
    for i in order:
        if lines[i: i + n] == chunk:
            return i
    return guess if n == 0 and 0 <= guess <= len(lines) else None


def history_states(case: Case) -> dict[str, list[str]]:
    """Per file touched by the history: its texts before each of its diffs, then the current text."""
    states: dict[str, list[str]] = {}
    for diff in reversed(case.history):
        path = diff_path(diff)
        if path is None or path not in case.files:
            continue
        chain = states.setdefault(path, [case.files[path]])
        chain.insert(0, apply_diff(chain[0], diff, reverse=True))
    return states
