"""Secret detection and redaction for everything that may enter a prompt.

Rules (``secret_rules.py``): the detect-secrets plugins (maintained: AWS, GitHub, GitLab, Slack, Stripe,
JWT, basic-auth URLs, npm, PyPI, SendGrid, Twilio, ... and its keyword detector, chosen per file
type), supplemented where they miss a format (Google ``AIza``, OpenAI/Anthropic ``sk-``, Slack and
GitHub tokens of any length, multi-line private-key blocks, ``token``/``auth`` names, high-entropy
values assigned to key/secret/token names, passwords in connection strings). Without detect-secrets
the supplements alone still cover every format listed in docs/SECURITY.md.

Redaction keeps the line structure: a secret is replaced by ``[REDACTED]`` inside its line (the whole
line only for key material such as a PEM body). Spans are widened to the whole token they sit in, so
no piece of a longer key survives beside the placeholder. Long lines are cut to ``max_line`` chars
after redaction (detection sees ``LINE_MARGIN`` more, so a secret across the cut is still seen whole).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
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

REDACTED = "[REDACTED]"
LINE_MARGIN = 8192  # chars past a line cut still scanned (a PEM block on one line is ~3.3K)
CONFIG_EXTS = frozenset({".env", ".ini", ".cfg", ".conf", ".cnf", ".cf", ".properties", ".toml", ".yaml",
                         ".yml", ".eyaml", ".sh", ".bash", ".zsh", ".envrc", ".tfvars", ".txt", ""})
_TOKEN_CHAR = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+/.~")
_BEGIN = re.compile(r"BEGIN[A-Z0-9 ]* PRIVATE KEY(?: BLOCK)?[ -]*|PuTTY-User-Key-File-\d+:.*")
_END = re.compile(r"-*\s*END[A-Z0-9 ]* PRIVATE KEY(?: BLOCK)?[ -]*")
_KEYISH_LINE = re.compile(r"^[+\- ]?[\s\"'`]*[A-Za-z0-9+/=]*(?:\\n)?[\"'`]?\s*[,;+\\]?\s*$"
                          r"|^[+\- ]?\s*(?:Proc-Type|DEK-Info|Comment|Encryption|Public-Lines|Private-Lines|"
                          r"Private-MAC)\s*:.*$")
_ASSIGN = re.compile(
    r"(?P<name>[A-Za-z_$@][\w$@.\-]*)(?:[\"'`]?\])?[\"'`]?"  # a name (a quoted / subscripted key too)
    r"[ \t]*(?::[ \t]*[A-Za-z_&][\w.\[\], |&<>']*?[ \t]*=|:=|=>|={1,3}|!==?|:|[ \t](?=[\"'`]))[ \t]*@?"
    r"(?:(?P<q>[\"'`])(?P<qv>[^\"'`\n]*)(?P=q)|(?P<uv>[^\s\"'`,;#&)\]}]+))")
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
        else:
            value, span = m.group("uv"), m.span("uv")
            start = m.start("name")
            if not fr.config and not (start and line[start - 1] in ";&?\"'" and line[m.end("name")] == "="):
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
    return _merge([_widen(text, a, b) for a, b in _split_at_newlines(text, spans)])


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


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if b <= a:
            continue
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged


def find_spans(line: str, path: str | None = None) -> list[tuple[int, int]]:
    """Character spans of the secrets in one line (newline excluded)."""
    return scan(line, rules_for(path))


# ---- applying --------------------------------------------------------------------------------

def _apply(line: str, spans: Sequence[tuple[int, int]], col: int | None = None) -> tuple[str, int]:
    out, last, new_col = [], 0, col or 0
    for a, b in spans:
        out += [line[last:a], REDACTED]
        if col is not None:
            if b <= col:
                new_col += len(REDACTED) - (b - a)
            elif a < col:
                new_col = sum(map(len, out))
        last = b
    out.append(line[last:])
    return "".join(out), new_col


def _split_nl(line: str) -> tuple[str, str]:
    if line.endswith("\r\n"):
        return line[:-2], "\r\n"
    if line.endswith(("\n", "\r")):
        return line[:-1], line[-1]
    return line, ""


def whole_line(line: str) -> str:
    body, nl = _split_nl(line)
    if not body.strip():
        return line
    return f"{body[: len(body) - len(body.lstrip())]}{REDACTED}{nl}"


def cap(line: str, max_line: int | None) -> str:
    """``line`` cut to ``max_line`` characters (newline kept, "…" marks the cut)."""
    body, nl = _split_nl(line)
    if max_line is None or len(body) <= max_line:
        return line
    return body[:max_line] + "…" + nl


def _clip(line: str, max_line: int | None) -> str:
    if max_line is None or len(line) <= max_line + LINE_MARGIN:
        return line
    body, nl = _split_nl(line)
    return body[: max_line + LINE_MARGIN] + nl


def redact_line(line: str, path: str | None = None, max_line: int | None = None) -> str:
    """One line with its secrets replaced (context-free: private-key bodies need ``redact_lines``)."""
    return redact_lines([line], path, max_line)[0]


def split_redacted(line: str, col: int, path: str | None = None, *, whole: bool = False,
                   max_half: int | None = None) -> tuple[str, str]:
    """A line split at the cursor column, its secrets redacted; a cursor inside a secret sits after
    the placeholder (half a key is still a secret). ``whole``: the line is key material.
    ``max_half``: each half keeps at most this many characters next to the cursor."""
    body, nl = _split_nl(line)
    col = min(col, len(body))
    if whole:
        red = whole_line(line)
        return red[: len(red) - len(nl)], nl
    lo = 0
    if max_half is not None:  # look at the part around the cursor only (a very long line)
        lo = max(0, col - max_half - LINE_MARGIN)
        body, col = body[lo: col + max_half + LINE_MARGIN], col - lo
    spans = scan(body, rules_for(path)) + _pem_inline(body)
    red, c = _apply(body, _merge(spans), col) if spans else (body, col)
    pre, suf = red[:c], red[c:]
    if max_half is not None:
        if len(pre) > max_half:
            pre = "…" + pre[len(pre) - max_half:]
        if len(suf) > max_half:
            suf = suf[:max_half] + "…"
    return pre, suf + nl


def _pem_lines(bodies: Sequence[str]) -> set[int]:
    """Indices of lines inside private-key blocks (BEGIN … END, or key-like lines next to a marker)."""
    out: set[int] = set()
    n, i = len(bodies), 0
    while i < n:
        b = bodies[i]
        if "PRIVATE KEY" in b or "PuTTY-User-Key-File" in b:
            begin = _BEGIN.search(b)
            if _END.search(b) and not begin:  # an END whose BEGIN is above this text
                j = i - 1
                while j >= 0 and j not in out and _KEYISH_LINE.match(bodies[j]):
                    out.add(j)
                    j -= 1
            if begin and not _END.search(b, begin.end()):
                j = i + 1
                while j < n and not _END.search(bodies[j]) and _KEYISH_LINE.match(bodies[j]):
                    out.add(j)
                    j += 1
                i = j
                continue
        i += 1
    return out


def _pem_inline(body: str) -> list[tuple[int, int]]:
    """Key material on a marker line itself (``"-----BEGIN …-----\\nMIIE…\\n-----END …"``)."""
    if "PRIVATE KEY" not in body and "PuTTY" not in body:
        return []
    out = []
    for m in _BEGIN.finditer(body):
        end = _END.search(body, m.end())
        stop = end.start() if end else len(body)
        if body[m.end():stop].strip(" \"'\\n-"):
            out.append((m.end(), stop))
    m = _END.search(body)
    if m and not _BEGIN.search(body, 0, m.start()):
        head = body[: m.start()]
        if head.strip(" \"'\\n-+") and _KEYISH_LINE.match(head):
            out.append((len(head) - len(head.lstrip()), m.start()))
    return out


def redact_lines(lines: Sequence[str], path: str | None = None, max_line: int | None = None, *,
                 diff: bool = False) -> list[str]:
    """Redacted ``lines`` (newlines kept), private-key blocks across lines included. ``diff``: each
    line starts with a one-character diff marker, kept as it is."""
    heads = [ln[:1] if diff else "" for ln in lines]
    bodies = [_clip(ln[len(h):], max_line) for ln, h in zip(lines, heads, strict=True)]
    text = "".join(bodies)
    if "\r" in text:
        text = text.replace("\r", " ")  # keep offsets; lines end in "\n" for the scan
    spans = scan(text, rules_for(path))
    pem: set[int] = set()
    if "PRIVATE KEY" in text or "PuTTY" in text:
        pem = _pem_lines(bodies)
        starts = [0]
        for b in bodies:
            starts.append(starts[-1] + len(b))
        spans += [(starts[i] + a, starts[i] + b) for i, body in enumerate(bodies) for a, b in _pem_inline(body)]
        spans = _merge(spans)
    if not spans and not pem:
        return [h + cap(b, max_line) for h, b in zip(heads, bodies, strict=True)]
    out, k, pos = [], 0, 0
    for i, (h, b) in enumerate(zip(heads, bodies, strict=True)):
        end = pos + len(b)
        mine = []
        while k < len(spans) and spans[k][0] < end:
            mine.append((spans[k][0] - pos, min(spans[k][1], end) - pos))
            k += 1
        if i in pem:
            out.append(h + cap(whole_line(b), max_line))
        else:
            body, nl = _split_nl(b)
            mine = [(a, min(e, len(body))) for a, e in mine if a < len(body)]
            out.append(h + cap(_apply(body, mine)[0] + nl if mine else b, max_line))
        pos = end
    return out


def redact(text: str, path: str | None = None, max_line: int | None = None, *, diff: bool = False) -> str:
    """``text`` with every secret replaced by ``[REDACTED]`` (line structure kept)."""
    if not text:
        return text
    return "".join(redact_lines(text.splitlines(keepends=True), path, max_line, diff=diff))


def redact_window(lines: Sequence[str], lo: int, hi: int, path: str | None = None,
                  max_line: int | None = None, reach: int = 400) -> list[str]:
    """Redacted ``lines[lo:hi]`` of a longer text: the key-like lines around the cut are looked at too,
    so a snippet that starts or ends inside a private-key block still hides all of it."""
    a = lo
    while a > 0 and lo - a < reach and (_KEYISH_LINE.match(lines[a - 1]) or "PRIVATE KEY" in lines[a - 1]):
        a -= 1
    b = hi
    while b < len(lines) and b - hi < reach and (_KEYISH_LINE.match(lines[b]) or "PRIVATE KEY" in lines[b]):
        b += 1
    return redact_lines(lines[a:b], path, max_line)[lo - a: hi - a]


def pem_rows(lines: Sequence[str]) -> set[int]:
    """Rows of a whole document's ``lines`` that are private-key material."""
    return _pem_lines(lines) if any("PRIVATE KEY" in ln or "PuTTY" in ln for ln in lines) else set()


def is_secret_line(line: str, path: str | None = None) -> bool:
    """The line holds a secret (or opens a private-key block)."""
    body = _split_nl(line)[0]
    return bool(find_spans(body, path) or _pem_inline(body) or _BEGIN.search(body))
