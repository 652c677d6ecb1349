"""Post-processing filters and the show/hide decision for suggestions (pure functions).

All filtering lives here (not in editor plugins): clean up what the model produced, then decide
whether it is worth showing with a score in [0, 1] (higher = more confident).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.decoding.echo import columns, echo_cut, echo_for_fim
from engine.decoding.stops import empty_line_scope, loop_cut, scope_cut

_CLOSERS = {")": "(", "]": "[", "}": "{"}
_OPENERS = {v: k for k, v in _CLOSERS.items()}
_WORD = re.compile(r"\w")


@dataclass(frozen=True)
class Decision:
    show: bool
    score: float
    reason: str  # "ok" or why it is hidden


def should_auto_trigger(line_prefix: str, line_suffix: str, max_right: int = 8) -> bool:
    """Automatic triggers are skipped mid-word or with more than ``max_right`` non-space chars right of
    the cursor (llama.vim / llm-ls rules); invoked triggers always run."""
    right = sum(1 for c in line_suffix if not c.isspace())
    if right > max_right:
        return False
    if line_prefix and line_suffix and _WORD.match(line_prefix[-1]) and _WORD.match(line_suffix[0]):
        return False
    return True


def single_line_mode(line_suffix: str) -> bool:
    """Mid-line cursor (something other than closers/space to the right): complete one line only."""
    return any(not (c.isspace() or c in _CLOSERS or c in "\"':;,") for c in line_suffix)


BLOCK_OPENERS = (":", "{", "(", "[", "=>")  # a line ending so opens a block, a literal or an argument list
_DOC_OR_COMMENT = re.compile(r'^\s*("""|\'\'\'|#|//|/\*|\*)')


def block_expected(prefix: str, suffix: str) -> bool:
    """Whether a user at this cursor (nothing but closers right of it) expects a block rather than one line
    (Copilot's "empty block start"): the line before the cursor ends with an opener (``def f(x):``,
    ``items = [``), or the cursor is on a blank line under an opener — past a docstring or comments — whose
    block is still empty (the next code line is not indented deeper than the opener's line)."""
    head = prefix.rsplit("\n", 1)[-1]
    if head.strip():
        return head.rstrip().endswith(BLOCK_OPENERS)
    above = prefix.split("\n")[:-1][-60:]
    opener = None
    in_doc = False
    for ln in reversed(above):
        s = ln.strip()
        if not s:
            continue
        if s.endswith(('"""', "'''")) and (s.count('"""') + s.count("'''")) % 2 == 1 and not in_doc:
            in_doc = True  # the end of a docstring: skip to its start
            continue
        if in_doc:
            if s.startswith(('"""', "'''")) or (s.count('"""') + s.count("'''")) % 2 == 1:
                in_doc = False
            continue
        if _DOC_OR_COMMENT.match(ln) and not s.endswith(BLOCK_OPENERS):
            continue  # a one-line docstring or a comment under the header
        opener = ln
        break
    if opener is None or not opener.rstrip().endswith(BLOCK_OPENERS):
        return False
    nxt = next((ln for ln in suffix.split("\n")[1:80] if ln.strip()), None)
    return nxt is None or columns(nxt) <= columns(opener)


def _cut_loop(text: str, reference: str) -> str:
    """``text`` up to the end of the first occurrence of its first loop (`engine.decoding.stops.loop_cut`: what
    the decoder stops at too), keeping repetitions ``reference`` holds."""
    cut = loop_cut(text, reference)
    return text if cut is None else text[:cut]


def _trim_closers(text: str, line_suffix: str) -> str:
    """Drop trailing closing brackets the text did not open when the suffix already closes them."""
    depth: dict[str, int] = {}
    for c in text:
        if c in _OPENERS:
            depth[c] = depth.get(c, 0) + 1
        elif c in _CLOSERS:
            depth[_CLOSERS[c]] = depth.get(_CLOSERS[c], 0) - 1
    rest = line_suffix.lstrip()
    while text and text[-1] in _CLOSERS and depth.get(_CLOSERS[text[-1]], 0) < 0 and rest.startswith(text[-1]):
        depth[_CLOSERS[text[-1]]] += 1
        rest = rest[1:]
        text = text[:-1].rstrip(" ")
    return text


def _indent_unit(prefix: str) -> str:
    return "\t" if re.search(r"^\t", prefix[-4000:], re.MULTILINE) else "    "


def _normalise_indent(text: str, line_prefix: str, prefix: str) -> str:
    if line_prefix.strip() == "" and line_prefix:  # cursor in leading whitespace
        first = text.split("\n", 1)[0]
        lead = len(first) - len(first.lstrip(" \t"))
        text = text[min(lead, len(line_prefix)):]
    if _indent_unit(prefix) == "    ":
        text = re.sub(r"(?m)^(\t+)", lambda m: "    " * len(m.group(1)), text)
    return text


def _cut_at_scope_end(text: str, line_prefix: str, prefix: str = "") -> str:
    """Keep a multi-line completion inside the cursor's block (Continue/Tabby-style): the decoder's own cut
    (`engine.decoding.stops.scope_cut`, before the first non-blank line indented less than the cursor line
    or after two blank lines; on an empty cursor line, the enclosing function's block: `empty_line_scope`),
    for engines that do not stop themselves."""
    base = empty_line_scope(prefix) if line_prefix == "" else columns(line_prefix)
    cut = scope_cut(text, base)
    return text if cut is None else text[:cut - 1]  # without the newline before the cut line


def clean_fim(text: str, prefix: str, suffix: str, single_line: bool, path: str = "") -> str:
    """Post-process a FIM completion; returns "" when nothing useful is left."""
    text = text.replace("\r\n", "\n")
    line_prefix = prefix.rsplit("\n", 1)[-1]
    line_suffix = suffix.split("\n", 1)[0]
    if single_line:
        text = text.split("\n", 1)[0]
    text = _cut_loop(text, prefix + suffix)
    echo = echo_cut(text if single_line else text + "\n", echo_for_fim(prefix, suffix, path, single_line))
    if echo is not None:  # re-types the suffix / the prefix, or prose: where the decoder stops too
        text = text[:echo[0]]
    text = _normalise_indent(text, line_prefix, prefix)
    text = _cut_at_scope_end(text, line_prefix, prefix)
    text = text.rstrip() if "\n" in text or not line_suffix.strip() else text.rstrip("\n")
    if not text.strip():
        return ""
    # output that repeats the end of the line before the cursor (an echo, e.g. of the suggestion just
    # accepted: "return a + b" + "a + b")
    body = text.strip()
    if "\n" not in body and len(body) >= 3 and line_prefix.rstrip().endswith(body):
        return ""
    # output that repeats the text after the cursor
    if line_suffix.strip() and line_suffix.strip().startswith(body):
        return ""
    # trailing output lines that repeat the next lines of the document
    nxt = [ln.strip() for ln in suffix.split("\n")[1:] if ln.strip()]
    out = text.split("\n")
    if len(out) > 1 and nxt:
        body = [ln.strip() for ln in out[1:]]
        for k in range(len(body), 0, -1):
            if body[-k:] == nxt[:k] or body[:k] == nxt[:k]:
                cut = len(out) - k if body[-k:] == nxt[:k] else 1
                out = out[:cut]
                break
        text = "\n".join(out).rstrip()
    first = (line_prefix + text.split("\n", 1)[0]).strip()
    if nxt and not line_suffix.strip() and first == nxt[0]:
        return ""  # rewrites the next line
    text = _trim_closers(text, line_suffix)
    return text if text.strip() else ""


def score(confidences: list[float]) -> float:
    """Geometric-mean token confidence, in [0, 1]."""
    import math

    if not confidences:
        return 0.0
    logs = [math.log(min(1.0, max(c, 1e-9))) for c in confidences]
    return float(math.exp(sum(logs) / len(logs)))


def decide(text: str, confidences: list[float], enabled: bool, threshold: float,
           rule: str | None = None) -> Decision:
    """Show iff the score reaches ``threshold``; ``rule``: why a rule check hides the suggestion whatever
    its score (`syntax_check.introduced`), reported as the reason."""
    s = score(confidences)
    if not text.strip():
        return Decision(False, s, "empty")
    if not enabled:
        return Decision(True, s, "ok")
    if rule:
        return Decision(False, s, rule)
    return Decision(s >= threshold, s, "ok" if s >= threshold else "low score")


def clean_edit(old_region: str, new_region: str, reference: str | None = None) -> str:
    """Post-process a rewritten region: same line endings, final newline kept. A rewrite that falls
    into a loop (`engine.decoding.stops.loop_cut`, repetitions ``reference`` — the document, else the old
    region — does not hold) is no edit: cut there, it would delete the rest of the region."""
    new_region = new_region.replace("\r\n", "\n")
    if loop_cut(new_region, old_region.replace("\r\n", "\n") if reference is None else reference) is not None:
        return old_region
    if "\r\n" in old_region:
        new_region = new_region.replace("\n", "\r\n")
    if old_region.endswith("\n") and not new_region.endswith("\n"):
        new_region += "\r\n" if old_region.endswith("\r\n") else "\n"
    if not new_region.strip():
        return old_region  # an empty rewrite would delete the region: treat as "no edit"
    return new_region
