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

import bisect
import re
from collections.abc import Sequence

from edit_server.context.secret_scan import FileRules, file_rules, merge, rules_for, scan

__all__ = ["REDACTED", "FileRules", "cap", "find_spans", "is_secret_line", "pem_rows", "redact", "redact_any",
           "redact_line", "redact_lines", "redact_window", "rules_for", "split_redacted", "whole_line"]

REDACTED = "[REDACTED]"
LINE_MARGIN = 8192  # chars past a line cut still scanned (a PEM block on one line is ~3.3K)
_BEGIN = re.compile(r"BEGIN[A-Z0-9 ]* PRIVATE KEY(?: BLOCK)?[ -]*|PuTTY-User-Key-File-\d+:.*")
_END = re.compile(r"-*\s*END[A-Z0-9 ]* PRIVATE KEY(?: BLOCK)?[ -]*")
_KEYISH_LINE = re.compile(r"^[+\- ]?[\s\"'`]*[A-Za-z0-9+/=]*(?:\\n)?[\"'`]?\s*[,;+\\]?\s*$"
                          r"|^[+\- ]?\s*(?:Proc-Type|DEK-Info|Comment|Encryption|Public-Lines|Private-Lines|"
                          r"Private-MAC)\s*:.*$")


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
    red, c = _apply(body, merge(spans), col) if spans else (body, col)
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
                 diff: bool = False, blocks: bool = True) -> list[str]:
    """Redacted ``lines`` (newlines kept), private-key blocks across lines included (``blocks``;
    False: each line on its own, as ``redact_line``, for lines that are not neighbours). ``diff``:
    each line starts with a one-character diff marker, kept as it is."""
    heads = [ln[:1] if diff else "" for ln in lines]
    bodies = [_clip(ln[len(h):], max_line) for ln, h in zip(lines, heads, strict=True)]
    text = "".join(bodies)
    if "\r" in text:
        text = text.replace("\r", " ")  # keep offsets; lines end in "\n" for the scan
    spans = scan(text, rules_for(path))
    pem: set[int] = set()
    if "PRIVATE KEY" in text or "PuTTY" in text:
        pem = _pem_lines(bodies) if blocks else set()
        starts = [0]
        for b in bodies:
            starts.append(starts[-1] + len(b))
        spans += [(starts[i] + a, starts[i] + b) for i, body in enumerate(bodies) for a, b in _pem_inline(body)]
        spans = merge(spans)
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
    """The line holds a secret (key material on a private-key marker line included; the markers
    alone are not secret)."""
    body = _split_nl(line)[0]
    return bool(find_spans(body, path) or _pem_inline(body))


_ESCAPE = re.compile(r"\\[nrt\"'\\/]")  # a JSON / Python string escape
_UNESCAPED = {"n": "\n", "r": "\n", "t": "\t", '"': '"', "'": "'", "\\": "\\", "/": "/"}
ANY_TYPE = (".py", ".go", ".c", ".yaml")  # one file type per distinct rule set: code, Go, C, config


def redact_any(text: str) -> str:
    """``text`` of unknown type and shape (a log record) with every secret replaced: the rules of every
    file type (a config file's unquoted values too), with string escapes read as what they stand for,
    so a document quoted in a JSON message dump (``password = \\"…\\"\\napi_key: …``) hides nothing."""
    if not text:
        return text
    parts, at, last = [], [], 0  # at: flat offsets of the unescaped characters (each one shorter)
    for m in _ESCAPE.finditer(text):
        parts += [text[last:m.start()], _UNESCAPED[m.group()[1]]]
        at.append(m.start() - len(at))
        last = m.end()
    flat = ("".join(parts) + text[last:]).replace("\r", " ")
    spans = [sp for ext in ANY_TYPE for sp in scan(flat, file_rules(ext))]
    if "PRIVATE KEY" in flat or "PuTTY" in flat:
        lines = flat.splitlines(keepends=True)
        pem, pos = _pem_lines(lines), 0
        for i, line in enumerate(lines):
            body = _split_nl(line)[0]
            spans += [(pos + a, pos + b) for a, b in _pem_inline(body)]
            if i in pem and body.strip():
                spans.append((pos + len(body) - len(body.lstrip()), pos + len(body)))
            pos += len(line)
    if not spans:
        return text
    back = [(a + bisect.bisect_left(at, a), b + bisect.bisect_left(at, b)) for a, b in merge(spans)]
    return _apply(text, back)[0]
