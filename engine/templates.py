"""Prompt layouts: the one source of truth for serving *and* training.

Every prompt is a list of token ids built from separately encoded pieces, so token counts are
additive (the context builder's budget is exact) and the same text always yields the same ids
(the prefix KV cache can reuse them).

Layouts (``S`` = special token, pieces in ``{}``)::

    sections   S(file_sep){path}\n{text}                ... one per context section
    history    S(edit_history){diff}\n{diff}\n ...         unified diffs, oldest first (optional)
    header     S(file_sep){path}\n
    FIM  spml  S(fim_suffix){suffix from the line end}S(fim_prefix){prefix}[S(cursor){rest}]S(fim_middle)
                                                                       <- default (serving and training)
    FIM  spm   S(fim_suffix){suffix}S(fim_prefix){prefix}S(fim_middle)
    FIM  psm   S(fim_prefix){prefix}S(fim_suffix){suffix}S(fim_middle)
    edit       S(fim_suffix){after}S(fim_prefix){before}S(region_start){region[:c]}S(cursor)
               {region[c:]}S(region_end)S(fim_middle)
    edit layouts (the order of history and file; the adapter's metadata names it, ``edit_layout``):
      history-file  sections, history, header, edit                      <- default (the shipped adapter)
      file-history  sections, header, S(fim_suffix){after}S(fim_prefix){before}, history,
                    S(region_start)...S(region_end)S(fim_middle)

The canvas (masked span) follows the prompt. Its target is the middle / new region, then one
``eom`` token, then ``pad`` up to the canvas length. Suffix-first layouts put the text that changes
while typing (the end of the prefix) at the end of the prompt, so consecutive keystrokes reuse
almost the whole KV cache. ``file-history`` does the same for next edits: the history grows with every
edit, so behind the file text (which an edit inside the region leaves alone) only the history and the
region are prefilled again, not the whole file. ``spml`` also moves the rest of the cursor's line (the suffix up to its first
line end, when the cursor is past the line's first column) behind the prefix, marked by ``cursor`` and
left out when empty: moving the cursor along its line, pressing Enter at its end or typing an
auto-closed bracket then re-prefills that line only, not the whole suffix and prefix. A request at a
line end or a line start renders exactly as ``spm`` (whole-line holes, empty lines, ends of lines).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from engine.tokens import TokenizerLike

FimLayout = Literal["spml", "spm", "psm"]
DEFAULT_FIM_LAYOUT: FimLayout = "spml"
EditLayout = Literal["history-file", "file-history"]
EDIT_LAYOUTS: tuple[str, ...] = ("history-file", "file-history")
DEFAULT_EDIT_LAYOUT: EditLayout = "history-file"
# the diffs a next-edit prompt shows (newest last): training renders a session's last EDIT_HISTORY steps, each
# cut at EDIT_DIFF_CHARS characters (engine.train.tasks_edit, git_sessions); the adapter's metadata records
# the count (``edit_history``) and the server shows no more (edit_server.serving.contexts.edit_history)
EDIT_HISTORY = 3
EDIT_DIFF_CHARS = 1500
# a next edit's editable region in lines: up to EDIT_REGION_ABOVE above the cursor's line and EDIT_REGION_BELOW
# below it — training's git sessions draw their regions up to it (engine.train.git_sessions), the replay's
# truth is every pending hunk inside it (evals.replay_sessions, evals.next_edit), and the server's region is
# exactly it (``nextEdit.region`` "lines": edit_server.context.builder)
EDIT_REGION_ABOVE = 6
EDIT_REGION_BELOW = 8


@dataclass(frozen=True)
class Section:
    """A piece of extra context with provenance (shown by `edit-server context`)."""

    kind: str  # "definition", "import", "git_diff", "cochange", "recent", "open_file", ...
    path: str
    text: str


@dataclass(frozen=True)
class FimPrompt:
    prefix: str
    suffix: str
    path: str = ""
    history: tuple[str, ...] = ()  # unified diffs, oldest first
    sections: tuple[Section, ...] = ()
    layout: FimLayout = DEFAULT_FIM_LAYOUT


@dataclass(frozen=True)
class EditPrompt:
    before: str  # file text before the editable region
    region: str  # the editable region (to be rewritten)
    after: str  # file text after the region
    cursor: int  # character offset of the cursor inside ``region``
    path: str = ""
    history: tuple[str, ...] = ()
    sections: tuple[Section, ...] = ()
    layout: EditLayout = DEFAULT_EDIT_LAYOUT


@dataclass
class Rendered:
    """A rendered prompt: its ids and, per labelled part, the span of ids it produced."""

    ids: list[int] = field(default_factory=list)
    parts: list[tuple[str, int, int]] = field(default_factory=list)  # (label, start, end)

    def add(self, label: str, ids: list[int]) -> None:
        start = len(self.ids)
        self.ids.extend(ids)
        self.parts.append((label, start, len(self.ids)))


def _common(tok: TokenizerLike, out: Rendered, path: str, history: tuple[str, ...],
            sections: tuple[Section, ...], *, with_history: bool = True) -> None:
    sp = tok.special
    for i, s in enumerate(sections):
        out.add(f"section:{i}:{s.kind}", [sp.file_sep, *tok.encode(f"{s.path}\n{s.text}")])
    if with_history:
        _history(tok, out, history)
    out.add("header", [sp.file_sep, *tok.encode(f"{path}\n")])


def _history(tok: TokenizerLike, out: Rendered, history: tuple[str, ...]) -> None:
    if history:
        ids = [tok.special.edit_history]
        for diff in history:
            ids.extend(tok.encode(diff if diff.endswith("\n") else diff + "\n"))
        out.add("history", ids)


def render_fim(tok: TokenizerLike, p: FimPrompt) -> Rendered:
    sp = tok.special
    out = Rendered()
    _common(tok, out, p.path, p.history, p.sections)
    prefix = [sp.fim_prefix, *tok.encode(p.prefix)]
    rest, following = fim_rest(p)  # spml: the cursor line's rest goes behind the prefix; others: no rest
    suffix = [sp.fim_suffix, *tok.encode(following)]
    if p.layout == "psm":
        out.add("prefix", prefix)
        out.add("suffix", suffix)
    else:
        out.add("suffix", suffix)
        out.add("prefix", prefix)
        if rest:
            out.add("rest", [sp.cursor, *tok.encode(rest)])
    out.add("middle", [sp.fim_middle])
    return out


def fim_rest(p: FimPrompt) -> tuple[str, str]:
    """(rest of the cursor's line, the suffix from that line's end): how ``spml`` splits the suffix
    (no rest at a line start, at a line end, or in another order)."""
    if p.layout != "spml" or not p.prefix or p.prefix.endswith("\n"):
        return "", p.suffix
    i = p.suffix.find("\n")
    return (p.suffix, "") if i < 0 else (p.suffix[:i], p.suffix[i:])


def fim_specials(p: FimPrompt) -> int:
    """Special tokens ``render_fim`` adds around the prefix and suffix (besides sections, history and
    the header): fim_suffix, fim_prefix, fim_middle, and ``cursor`` when ``spml`` has a rest."""
    return 4 if fim_rest(p)[0] else 3


def in_trained_order(p: FimPrompt | EditPrompt, fim_layout: str | None = None,
                     edit_layout: str | None = None) -> FimPrompt | EditPrompt:
    """``p`` in the order an adapter was trained on (its metadata's ``fim_layout`` / ``edit_layout``; None: the
    default): a prompt in the default order takes the adapter's, one that names another order keeps it. Every
    renderer of a model's prompts goes through it — the engine's format, the KTO trainer, the reward scorer — so
    a reward is scored on the prompt the model generated from (not, say, history-first for a tier trained
    file-first)."""
    from dataclasses import replace

    if isinstance(p, EditPrompt):
        if edit_layout and p.layout == DEFAULT_EDIT_LAYOUT and edit_layout != p.layout:
            return replace(p, layout=edit_layout)  # type: ignore[arg-type]
    elif fim_layout and p.layout == DEFAULT_FIM_LAYOUT and fim_layout != p.layout:
        return replace(p, layout=fim_layout)  # type: ignore[arg-type]
    return p


def render_trained(tok: TokenizerLike, p: FimPrompt | EditPrompt, fim_layout: str | None = None,
                   edit_layout: str | None = None) -> list[int]:
    """The ids of ``p`` in the adapter's trained order (`in_trained_order`): how the KTO trainer renders its
    examples and the reward scorer the prompts it scores."""
    p = in_trained_order(p, fim_layout, edit_layout)
    return render_fim(tok, p).ids if isinstance(p, FimPrompt) else render_edit(tok, p).ids


def render_edit(tok: TokenizerLike, p: EditPrompt) -> Rendered:
    if not 0 <= p.cursor <= len(p.region):
        raise ValueError(f"cursor {p.cursor} outside the editable region (length {len(p.region)})")
    if p.layout not in EDIT_LAYOUTS:
        raise ValueError(f"edit layout {p.layout!r}: expected one of {', '.join(EDIT_LAYOUTS)}")
    sp = tok.special
    out = Rendered()
    file_first = p.layout == "file-history"
    _common(tok, out, p.path, p.history, p.sections, with_history=not file_first)
    out.add("after", [sp.fim_suffix, *tok.encode(p.after)])
    out.add("before", [sp.fim_prefix, *tok.encode(p.before)])
    if file_first:
        _history(tok, out, p.history)
    out.add("region", [sp.region_start, *tok.encode(p.region[: p.cursor]), sp.cursor,
                       *tok.encode(p.region[p.cursor:]), sp.region_end])
    out.add("middle", [sp.fim_middle])
    return out


def edit_canvas_length(region_tokens: int, *, slack: float = 0.25, minimum: int = 16, block_size: int) -> int:
    """Canvas length for rewriting a region of ``region_tokens`` tokens, rounded up to whole blocks of
    ``block_size`` (the model's or the sampler's: the caller's)."""
    n = region_tokens + max(minimum, int(region_tokens * slack)) + 1  # + eom
    return -(-n // block_size) * block_size


def canvas_target(tok: TokenizerLike, text: str, length: int) -> list[int]:
    """Training target of a canvas: ``text`` ids, one eom, pads up to ``length`` (truncating)."""
    sp = tok.special
    ids = [*tok.encode(text), sp.eom]
    if len(ids) > length:
        return ids[:length]
    return ids + [sp.pad] * (length - len(ids))


def strip_canvas(tok: TokenizerLike, ids: list[int]) -> list[int]:
    """Output ids up to (not including) the first end/pad token."""
    ends = tok.special.end_ids
    for i, t in enumerate(ids):
        if t in ends:
            return ids[:i]
    return ids
