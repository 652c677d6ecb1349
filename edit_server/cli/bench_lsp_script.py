"""Where and what `edit-server bench lsp`'s typist types (pure functions over a file's text): the files, the
statement lines it retypes and where it stops (`split_point`: a mid-line rest an editor still asks about), the
parameters it renames, what a keystroke inserts (an opening bracket brings its closer), how an inline request
here is treated (`kind_at`) and how many keystrokes a suggestion saves (`saved_keys`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

FILES = ("engine/decoding/sampler.py", "engine/caches/prefix.py")  # ~2.5K and ~1.8K SmolLM2 tokens
PAIRS = {"(": ")", "[": "]", "{": "}"}


def source_files(n: int, paths: list[str] | None = None) -> list[Path]:
    """The files the typist works in: ``paths`` (``--file``; a missing one is an error), else the first ``n``
    of `FILES`."""
    root = Path(__file__).resolve().parents[2]
    if paths:
        got = [p if p.is_absolute() else root / p for p in map(Path, paths)]
        missing = [str(p) for p in got if not p.is_file()]
        if missing:
            raise ValueError(f"--file: no such file: {', '.join(missing)}")
        return got
    return [root / f for f in FILES[:max(1, n)] if (root / f).is_file()]


def split_point(line: str) -> int | None:
    """Where to stop retyping ``line`` so that the rest is what an editor's automatic inline
    completion still asks about mid-line: 2-8 non-space characters, not only closers, starting
    with a separator (``x = f(a, | b)``, ``return a | + b``)."""
    from edit_server.selectivity.gate import single_line_mode

    start = len(line) - len(line.lstrip()) + 1
    for c in range(start, len(line) - 1):  # the longest such rest
        rest = line[c:]
        if rest.lstrip()[:1] in tuple(",+-*/<>=.[") and line[c - 1] not in " ,(" \
                and 2 <= len(rest.replace(" ", "")) <= 8 and single_line_mode(rest):
            return c
    return None


def sites(text: str, k: int, max_chars: int) -> list[int]:
    """Line numbers of ``k`` indented statements with a mid-line split point, spread over the file."""
    lines = text.split("\n")
    ok = [i for i, ln in enumerate(lines) if re.match(r"^ {4,}(?!def |class )[a-z_]", ln) and 16 <= len(ln.strip()) <= max_chars
          and "#" not in ln and '"' not in ln and "'" not in ln and split_point(ln) is not None]
    if not ok or k <= 0:
        return []
    return sorted({ok[(2 * j + 1) * len(ok) // (2 * k)] for j in range(k)})


def renames(text: str, k: int) -> list[tuple[int, str]]:
    """(offset, name) of ``k`` function parameters that the body uses."""
    out = []
    for m in re.finditer(r"def \w+\(self, (\w+)", text):
        name, body = m.group(1), text[m.end(): m.end() + 2000]
        if len(name) > 2 and re.search(rf"\b{name}\b", body):
            out.append((m.start(1), name))
    step = max(1, len(out) // max(1, k))
    return out[::step][:k]


def keystroke(text: str, cur: int, ch: str) -> str | None:
    """What the bench's typist's key ``ch`` inserts at ``cur``: the character, an opening bracket with its
    closer; None for a closer already there (the cursor steps over it: no change)."""
    if ch in PAIRS.values() and text[cur:cur + 1] == ch:
        return None
    return ch + PAIRS.get(ch, "")


def typed_text(text: str, cur: int, chars: str) -> str:
    """``text`` after the typist types ``chars`` at ``cur`` (`keystroke` by `keystroke`)."""
    for ch in chars:
        ins = keystroke(text, cur, ch)
        if ins is not None:
            text = text[:cur] + ins + text[cur:]
        cur += 1
    return text


def _line_at(text: str, offset: int) -> str:
    ls = text.rfind("\n", 0, offset) + 1
    le = text.find("\n", ls)
    return text[ls:len(text) if le < 0 else le].rstrip()


def saved_keys(text: str, cur: int, item: dict[str, Any] | None, upcoming: str) -> int | None:
    """How many of the keystrokes ``upcoming`` taking ``item`` at ``cur`` saves: the largest m such that the
    line is then what typing ``upcoming[:m]`` makes it (trailing spaces aside), no line added; 0 when no prefix
    matches (a wrong suggestion), ``len(upcoming)`` when it types exactly what was coming. None: no item."""
    if item is None:
        return None
    from evals.humaneval import completion_edit

    got = completion_edit(text, cur, {"items": [item]})
    if got is None:
        return None
    s, e, ins, _ = got
    new = text[:s] + ins + text[e:]
    if new.count("\n") != text.count("\n"):
        return 0
    line = _line_at(new, s)
    return next((m for m in range(len(upcoming), 0, -1) if _line_at(typed_text(text, cur, upcoming[:m]), cur) == line),
                0)


def kind_at(text: str, offset: int) -> str:
    """How the server treats an inline request here: single-line (mid-line), empty-line or end-of-line."""
    from edit_server.selectivity.gate import single_line_mode

    line_start = text.rfind("\n", 0, offset) + 1
    line_end = text.find("\n", offset)
    if single_line_mode(text[offset: len(text) if line_end < 0 else line_end]):
        return "single-line"
    return "empty-line" if not text[line_start:offset].strip() else "end-of-line"
