"""Finding secrets in a text: the rules of ``secret_rules.py`` (gated, so a text costs a few substring
searches for most of them), detect-secrets' keyword detector for the file's type, and assignments
of values to secret-sounding names; spans are widened to the whole token they sit in."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cache

from edit_server.context.secret_rules import (
    BASE64_LINE,
    DS_HINT,
    HINT,
    HINT_I,
    KEY_PREFIXES,
    KEY_WORDS,
    LONG_RUN,
    PASSWORD_WORDS,
    SUPPLEMENT_RULES,
    TOKEN_WORDS,
    Rule,
    _entropy,
    detect_secrets_rules,
)

CONFIG_EXTS = frozenset({".env", ".ini", ".cfg", ".conf", ".cnf", ".cf", ".properties", ".toml", ".yaml",
                         ".yml", ".eyaml", ".sh", ".bash", ".zsh", ".envrc", ".tfvars", ".txt", ""})
_TOKEN_CHAR = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+/.~")
_ASSIGN = re.compile(
    r"(?P<name>[A-Za-z_$@][\w$@.\-]*)(?:[\"'`]?\])?[\"'`]?"  # a name (a quoted / subscripted key too)
    r"[ \t]*(?::[ \t]*[A-Za-z_&][\w.\[\], |&<>']*?[ \t]*=|:=|=>|={1,3}|!==?|:|[ \t](?=[\"'`]))[ \t]*@?"
    r"(?:(?P<q>[\"'`])(?P<qv>[^\"'`\n]*)(?P=q)|(?P<uv>[^\s\"'`;]+))")
_PARTS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+|[^\x00-\x7f]+")
_CRED_VALUE = re.compile(r"[A-Za-z0-9_\-+/=.~:]+")
_CONSTANT_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|[a-z]+(?:[._][a-z]+)+")


@dataclass(frozen=True)
class FileRules:
    config: bool  # unquoted values count (.env, .ini, .yaml, ...)
    keyword: tuple[tuple[re.Pattern[str], int], ...]  # detect-secrets keyword regexes for this type


@cache
def all_rules() -> tuple[Rule, ...]:
    return (*detect_secrets_rules(), *SUPPLEMENT_RULES)


@cache
def _index() -> tuple[dict[str, list[Rule]], dict[str, list[Rule]], list[Rule], list[Rule]]:
    """Rules by gate literal (case-sensitive, lower-case), the ungated ones that need a long run of
    key characters, and the rest."""
    by_gate: dict[str, list[Rule]] = {}
    by_lower: dict[str, list[Rule]] = {}
    need, always = [], []
    for r in all_rules():
        for g in r.gates:
            (by_lower if r.lower else by_gate).setdefault(g, []).append(r)
        if not r.gates:
            (need if r.need else always).append(r)
    return by_gate, by_lower, need, always


def _search(r: Rule, text: str, where: list[tuple[int, int]], spans: list[tuple[int, int]]) -> None:
    for a, b in where:
        for m in r.regex.finditer(text, a, b):
            g = r.group if r.group and m.group(r.group) is not None else 0
            if r.check is None or r.check(m.group(g)):
                spans.append(m.span(g))


@cache
def file_rules(ext: str) -> FileRules:
    """Rules for a file extension (lower case, with the dot; "" for none)."""
    try:
        from detect_secrets.plugins import keyword as kw
        from detect_secrets.util.filetype import determine_file_type

        table = kw.REGEX_BY_FILETYPE.get(determine_file_type("x" + ext), kw.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP)
        if ext in CONFIG_EXTS:
            table = kw.CONFIG_DENYLIST_REGEX_TO_GROUP
        keyword = tuple(table.items())
    except ImportError:  # the supplements still cover every listed format
        keyword = ()
    return FileRules(ext in CONFIG_EXTS, keyword)


def rules_for(path: str | None) -> FileRules:
    """Rules for a file (None: unknown, code rules: unquoted values are expressions)."""
    if path is None:
        return file_rules(".py")
    base = os.path.basename(path).lower()
    ext = os.path.splitext(base)[1]
    if base.startswith(".env") or base.endswith(".env"):
        ext = ".env"
    return file_rules(ext)


# ---- keyword assignments ---------------------------------------------------------------------

def _classes(s: str) -> int:
    return sum((any(c.islower() for c in s), any(c.isupper() for c in s), any(c.isdigit() for c in s)))


def name_level(name: str) -> int:
    """3: password-like, 2: token-like, 1: key-like (entropy decides), 0: not a secret name."""
    parts = [p.lower() for p in _PARTS.findall(name)]
    level = 0
    for i, p in enumerate(parts):
        if p in PASSWORD_WORDS or p.endswith(("password", "passwd", "secret", "pwd")) or \
                p.startswith(("password", "secret")):
            return 3
        if p in TOKEN_WORDS or p.endswith(("token", "apikey", "authkey")) or \
                p in KEY_WORDS and i and parts[i - 1] in KEY_PREFIXES:
            level = 2
        elif p in KEY_WORDS:
            level = max(level, 1)
    return level


def _value_is_secret(level: int, v: str, comparison: bool) -> bool:
    if not v.strip():
        return False
    if level == 3:
        return len(v) >= 3
    if comparison or not _CRED_VALUE.fullmatch(v) or _CONSTANT_NAME.fullmatch(v):
        return False
    if level == 2:
        return len(v) >= 8 and (_classes(v) >= 2 or any(c in v for c in "+/=") or _entropy(v) >= 3.5)
    return len(v) >= 12 and _entropy(v) >= 3.0 and (_classes(v) >= 2 or _entropy(v) > 4.0)


def _assignments(line: str, fr: FileRules) -> list[tuple[int, int]]:
    out, pos = [], 0
    while (m := _ASSIGN.search(line, pos)) is not None:
        pos = m.end("name")  # the assignments inside this one's value too (a connection string)
        level = name_level(m.group("name"))
        if not level:
            continue
        if m.group("q") is not None:
            value, span = m.group("qv"), m.span("qv")
        elif fr.config:  # the rest of the line, but a trailing comment
            a = m.start("uv")
            cut = line.find(" #", a)
            b = len(line[: cut if cut >= 0 else len(line)].rstrip())
            value, span = line[a:b], (a, b)
        else:
            value, span = m.group("uv"), m.span("uv")
            start = m.start("name")
            if not (start and line[start - 1] in ";&?\"'" and line[m.end("name")] == "="):
                continue  # code: an unquoted value is an expression, unless inside a string (a DSN)
        op = line[m.end("name"):span[0]]
        if _value_is_secret(level, value, "==" in op or "!=" in op):
            out.append(span)
    return out


# ---- scanning --------------------------------------------------------------------------------

def _widen(text: str, a: int, b: int) -> tuple[int, int]:
    while a < b and text[a] in " \t\"'`=:":
        a += 1
    while b > a and text[b - 1] in " \t\"'`:":
        b -= 1
    while a > 0 and text[a - 1] in _TOKEN_CHAR:
        a -= 1
    while b < len(text) and (text[b] in _TOKEN_CHAR or text[b] == "="):
        b += 1
    return a, b


def scan(text: str, fr: FileRules) -> list[tuple[int, int]]:
    """Spans of the secrets in ``text`` (one or many lines), widened, sorted, within lines."""
    spans: list[tuple[int, int]] = []
    low = text.lower()
    aligned = len(low) == len(text)  # str.lower() keeps offsets (not so for a few letters, e.g. "İ")
    by_gate, by_lower_gate, need, always = _index()
    todo = dict.fromkeys(r for g, rs in by_gate.items() if g in text for r in rs)
    todo.update(dict.fromkeys(r for g, rs in by_lower_gate.items() if g in low for r in rs))
    todo.update(dict.fromkeys(always))
    for r in todo:
        _search(r, text, _candidates(r, text, low if aligned else None), spans)
    if need:
        long_runs = _lines_at(text, [m.start() for m in LONG_RUN.finditer(text)])
        if long_runs:
            for r in need:
                _search(r, text, long_runs, spans)
    for a, b in _lines_at(text, [m.start() for m in HINT.finditer(low)] if aligned else
                          [m.start() for m in HINT_I.finditer(text)]):
        line = text[a:b]
        if fr.keyword and DS_HINT.search(line.lower()):
            for rx, g in fr.keyword:
                spans += [(a + m.start(g), a + m.end(g)) for m in rx.finditer(line) if m.group(g)]
        spans += [(a + x, a + y) for x, y in _assignments(line, fr)]
    spans += [m.span(1) for m in BASE64_LINE.finditer(text)]
    return merge([_widen(text, a, b) for a, b in _split_at_newlines(text, spans)])


def _candidates(r: Rule, text: str, low: str | None) -> list[tuple[int, int]]:
    """The line ranges of ``text`` a rule has to look at (the lines holding one of its gates); the
    whole text when that cannot be narrowed."""
    if r.gates:
        hay = (low if r.lower else text)
        if hay is None:  # lower-case offsets do not line up: the gate decides for the whole text
            return [(0, len(text))] if any(g in text.lower() for g in r.gates) else []
        pos = []
        for g in r.gates:
            i = hay.find(g)
            while i >= 0:
                pos.append(i)
                i = hay.find(g, i + 1)
        return _lines_at(text, pos)
    return [(0, len(text))]


def _lines_at(text: str, positions: list[int]) -> list[tuple[int, int]]:
    """The (start, end) ranges of the lines holding these offsets, merged, in order."""
    out: list[tuple[int, int]] = []
    for p in sorted(positions):
        if out and p < out[-1][1]:
            continue
        a = text.rfind("\n", 0, p) + 1
        b = text.find("\n", p)
        out.append((a, len(text) if b < 0 else b))
    return out


def _split_at_newlines(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out = []
    for a, b in spans:
        nl = text.find("\n", a, b)
        while nl >= 0:  # a match across lines: redact its part on each line
            out.append((a, nl))
            a = nl + 1
            nl = text.find("\n", a, b)
        out.append((a, b))
    return out


def merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if b <= a:
            continue
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged


