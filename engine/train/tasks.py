"""Training examples: FIM (random char spans, lines, multi-line blocks, tree-sitter nodes) and plain
continuation. Next-edit and no-edit generators live in `tasks_edit`.

Every example is rendered with the engine's run-time templates (`engine.templates`) and its canvas target
is `canvas_target` (text + eom + pads), so training and serving agree by construction.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from engine.templates import FimPrompt, Section, canvas_target, render_fim
from engine.tokens import TokenizerLike
from engine.train.sections import rendered_tokens
from engine.train.syntax_spans import random_syntax_span

FIM_SPANS = ("chars", "line", "lines", "syntax")  # what a plain "fim" draws from
# "block" (mix kind "fim:block"): 1-16 WHOLE lines from a line start, the last newline included, then eom —
# HumanEval's multi-line holes (1-17 lines, median 5) and whole-line holes. The other spans stop inside a
# line ("line", "chars", most "syntax") or draw 2-8 lines and drop what outgrows the canvas, so without
# "block" an adapter never learns to end a long multi-line middle.
BLOCK_LINES = 16


@dataclass
class Example:
    kind: str  # "fim:line", "edit:rename", "noedit", "continue", ...
    prompt: list[int]
    target: list[int]  # canvas target, len = multiple of block_size
    meta: dict = field(default_factory=dict)
    changed: tuple[int, ...] = ()  # a rewrite's target positions that change its region (`changed_positions`)

    def __len__(self) -> int:
        return len(self.prompt) + len(self.target)


@dataclass(frozen=True)
class Budget:
    max_len: int = 512  # prompt + canvas tokens
    block_size: int = 32
    max_canvas: int = 128
    chars_per_token: float = 3.5
    max_edit_canvas: int = 0  # a rewrite's canvas cap (0: ``max_canvas``): the served region is 15 lines
    # of the FIM examples, the share whose prompt carries context sections from neighbouring files, as the
    # server's do (engine.train.sections); at most a quarter of ``max_len``
    sections_share: float = 0.0
    # of the git-session examples, the share drawn after any hunk (mostly no-edit: after most real hunks the next
    # one is elsewhere); the rest after a hunk whose next one is near the cursor (`git_sessions.git_example`)
    git_noedit_share: float = 0.3

    @property
    def edit_canvas(self) -> int:
        return self.max_edit_canvas or self.max_canvas


def round_up(n: int, b: int) -> int:
    return -(-n // b) * b


def canvas_length(n_target: int, budget: Budget, rng: random.Random) -> int:
    """Canvas for a target of ``n_target`` tokens (+ eom) with random slack (teaches early ends)."""
    need = round_up(n_target + 1, budget.block_size)
    extra = rng.choice((0, 0, budget.block_size, 2 * budget.block_size))
    return min(max(need, min(need + extra, budget.max_canvas)), max(need, budget.max_canvas))


def window(prefix: str, suffix: str, n_chars: int, rng: random.Random) -> tuple[str, str]:
    """Trim the prefix's head and suffix's tail to ~n_chars in all, at line boundaries."""
    share = rng.uniform(0.5, 0.85)
    pre_n, suf_n = int(n_chars * share), n_chars - int(n_chars * share)
    if len(prefix) > pre_n:
        cut = len(prefix) - pre_n
        nl = prefix.find("\n", cut)
        prefix = prefix[nl + 1:] if 0 <= nl < cut + 200 else prefix[cut:]
    if len(suffix) > suf_n:
        nl = suffix.rfind("\n", 0, suf_n)
        suffix = suffix[: nl + 1] if nl > suf_n - 200 else suffix[:suf_n]
    return prefix, suffix


def pick_span(text: str, lang: str, how: str, rng: random.Random, max_chars: int) -> tuple[int, int] | None:
    """(start, end) character span of the middle, by strategy."""
    if how == "syntax":
        s = random_syntax_span(text, lang, rng, max_chars=max_chars)
        return None if s is None else (s.start, s.end)
    lines = text.splitlines(keepends=True)
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))
    if how == "block":
        return block_span(lines, starts, rng)
    if how in ("line", "lines"):
        cand = [i for i, ln in enumerate(lines) if ln.strip()]
        if not cand:
            return None
        i = rng.choice(cand)
        n = 1 if how == "line" else rng.randint(2, 8)
        j = min(len(lines), i + n)
        if how == "line":
            r = rng.random()
            if r < 2 / 3:  # mid-line start: the typing-cursor case
                indent = len(lines[i]) - len(lines[i].lstrip())
                body = len(lines[i].rstrip("\n"))
                a = starts[i] + rng.randint(indent, max(indent, body - 1))
                if r < 1 / 3:  # ... and the rest of the line stays after it: the cursor mid-line
                    gap = line_gap(lines[i], a - starts[i], rng)
                    if gap is not None:
                        return a, starts[i] + gap
                return a, starts[i] + body
        return starts[i], starts[j] if how == "lines" else starts[i] + len(lines[i].rstrip("\n"))
    n = rng.randint(1, max_chars)
    a = rng.randint(0, max(0, len(text) - n))
    return a, min(len(text), a + n)


GAP_REST = 16  # characters of a line's rest after an in-line gap (a closer, `, b)`, ` + 1):`), at most


def line_gap(line: str, a: int, rng: random.Random) -> int | None:
    """Where an in-line middle starting at column ``a`` of ``line`` ends, the rest of the line left as the
    suffix — what typing in the middle of a line looks like (`bench lsp` retypes such lines and judges what
    is shown there; docs/PERFORMANCE.md). A token boundary with 1..`GAP_REST` characters of the line after
    it; None when the line has none."""
    body = len(line.rstrip("\n"))
    ends = [b for b in range(max(a + 1, body - GAP_REST), body)
            if line[b:body].strip() and not (line[b - 1].isalnum() and line[b].isalnum())]
    return rng.choice(ends) if ends else None


def block_span(lines: list[str], starts: list[int], rng: random.Random) -> tuple[int, int] | None:
    """1..BLOCK_LINES whole lines (skewed short, like HumanEval's multi-line holes) from a non-blank line's
    start through the end of its last line's newline."""
    cand = [i for i, ln in enumerate(lines) if ln.strip() and ln.endswith("\n")]
    if not cand:
        return None
    i = rng.choice(cand)
    n = min(BLOCK_LINES, 1 + int(rng.expovariate(1 / 4.5)))
    j = min(len(lines), i + n)
    while j > i + 1 and not lines[j - 1].endswith("\n"):
        j -= 1
    return starts[i], starts[j]


def fit_block(tok: TokenizerLike, text: str, a: int, b: int, limit: int) -> tuple[int, int] | None:
    """Drop whole lines from the end of the block ``text[a:b]`` until its tokens fit ``limit`` (a long block
    is kept as its head, not thrown away: throwing away biases the mix to short middles)."""
    while b > a:
        if len(tok.encode(text[a:b])) <= limit:
            return a, b
        nl = text.rfind("\n", a, b - 1)
        if nl < 0:
            return None
        b = nl + 1
    return None


def make_fim(tok: TokenizerLike, text: str, path: str, lang: str, rng: random.Random, budget: Budget,
             how: str | None = None, layout: str | None = None, sections: tuple[Section, ...] = ()) -> Example | None:
    """A FIM example; ``sections``: context sections before the file (`engine.train.sections`), whose
    rendered tokens come out of the window's room."""
    how = how or rng.choice(FIM_SPANS)
    max_chars = int((budget.max_canvas - 1) * budget.chars_per_token)
    span = pick_span(text, lang, how, rng, max_chars)
    if span is None or span[1] <= span[0]:
        return None
    a, b = span
    if how == "block":
        fit = fit_block(tok, text, a, b, budget.max_canvas - 1)
        if fit is None:
            return None
        a, b = fit
    middle = text[a:b]
    mid_ids = tok.encode(middle)
    if len(mid_ids) + 1 > budget.max_canvas:
        return None
    canvas = canvas_length(len(mid_ids), budget, rng)
    if how == "block" and rng.random() < 0.5:  # a canvas much longer than the block: end it early
        canvas = max(canvas, budget.max_canvas)
    # the prompt order is the server's: FimPrompt's default layout unless a caller asks for another
    fim_kw = {"layout": layout} if layout else {}
    room = budget.max_len - canvas - 16 - len(tok.encode(path))
    extra = sum(rendered_tokens(tok, s) for s in sections)  # the sections' share of it
    prefix, suffix = text[:a], text[b:]
    n_chars = int((room - extra) * budget.chars_per_token)
    for _ in range(6):
        pre, suf = window(prefix, suffix, n_chars, rng)
        prompt = FimPrompt(pre, suf, path=path, sections=sections, **fim_kw)  # type: ignore[arg-type]
        ids = render_fim(tok, prompt).ids
        if len(ids) <= room + 8:
            target = canvas_target(tok, middle, canvas)
            return Example(f"fim:{how}", ids, target, {"layout": prompt.layout, "middle": middle, "prefix": pre,
                                                          "suffix": suf, "path": path, "sections": len(sections)})
        n_chars = int(n_chars * max(1, room + 8 - extra) / max(1, len(ids) - extra) * 0.9)
    return None


def make_continuation(tok: TokenizerLike, text: str, path: str, rng: random.Random,
                      budget: Budget) -> Example | None:
    """Plain continuation: FIM with an empty suffix, the middle = the next lines."""
    lines = text.splitlines(keepends=True)
    if len(lines) < 4:
        return None
    i = rng.randint(1, len(lines) - 2)
    j = min(len(lines), i + rng.randint(1, 6))
    starts = sum(len(ln) for ln in lines[:i])
    middle = "".join(lines[i:j])
    mid_ids = tok.encode(middle)
    if len(mid_ids) + 1 > budget.max_canvas:
        return None
    canvas = canvas_length(len(mid_ids), budget, rng)
    room = budget.max_len - canvas - 16 - len(tok.encode(path))
    prefix = text[:starts]
    n_chars = int(room * budget.chars_per_token)
    for _ in range(6):
        pre = prefix[-n_chars:] if n_chars > 0 else ""
        ids = render_fim(tok, FimPrompt(pre, "", path=path)).ids
        if len(ids) <= room + 8:
            return Example("continue", ids, canvas_target(tok, middle, canvas),
                           {"middle": middle, "prefix": pre, "suffix": "", "path": path})
        n_chars = int(n_chars * (room + 8) / len(ids) * 0.9)
    return None
