"""Per-model prompt formats: how a FIM or next-edit request becomes the token layout a given model
was trained (or, where marked, is zero-shot asked) to complete.

A format turns a `FimPrompt` / `EditPrompt` into a `Layout`: the tokens before the canvas, the
canvas length, the tokens *after* the canvas (in-place infilling of bidirectional models: the
suffix follows the masked span, as in the models' published infilling code), and the extra tokens
that end the output (``<|im_end|>`` of chat models). Token ids come from the loaded tokenizer by
token text; nothing here holds a literal id.

    fmt = for_model(engine.tokenizer, engine.meta, block_size=engine.args.block_size)   # once, after loading
    lay = fmt.fim(prompt, max_tokens)                # Layout
    lay = fmt.edit(prompt, block_size)               # Layout (canvas in whole blocks), or FormatNotSupported

Formats: ``native`` (our adapter's layout, `engine.templates`), ``infill`` (in-place
``[bos] prefix <mask>*n suffix [eos]``: Dream / Dream-Coder / DiffuCoder / Open-dCoder / LLaDA),
``dreamon`` (infill + the ``<|expand|>`` token), ``qwen-fim`` (Qwen2.5-Coder's own
``<|fim_prefix|>…<|fim_suffix|>…<|fim_middle|>``, repo-level ``<|file_sep|>`` sections), ``chat`` (the model's own chat template around a
fill / rewrite instruction: block-causal chat models and instruct edits).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.templates import EditPrompt, FimPrompt


class FormatNotSupported(ValueError):
    """This model has no prompt format for the request kind; the message says why."""


@dataclass
class Layout:
    before: list[int]  # prompt tokens before the canvas
    canvas: int  # mask positions to decode (an upper bound of the output length)
    after: list[int] = field(default_factory=list)  # tokens after the canvas (in-place infilling)
    stop_ids: frozenset[int] = frozenset()  # tokens that end the output, besides the tokenizer's ends
    expand_id: int | None = None  # DreamOn: the token by which a mask asks to become two
    parts: list[tuple[str, int, int]] = field(default_factory=list)  # (label, start, end) in `before`
    # the spans (start, end) of the output's text that make the answer, where the prompt marked things in
    # plain text a reply may echo (a chat model's rewrite: `engine.formats.chat.edit_reply`); None: all of it
    reply: Callable[[str], list[tuple[int, int]]] | None = None
    # token healing: the typed text `before` leaves out at its end (a pre-tokenizer piece), which the model
    # spells again with tokens of its choosing before the output (`engine.decoding.heal`)
    heal: str = ""

    @property
    def in_place(self) -> bool:
        """The canvas sits between prompt tokens (bidirectional models only)."""
        return bool(self.after)


class PromptFormat(Protocol):
    name: str

    def fim(self, p: FimPrompt, max_tokens: int = 64) -> Layout: ...

    def edit(self, p: EditPrompt, block_size: int | None = None) -> Layout: ...


def token_id(tok: Any, text: str | None) -> int | None:
    """Id of a token given by its text, or None when the tokenizer lacks it."""
    if not text:
        return None
    hf = getattr(tok, "hf", None)
    if hf is not None:
        i = hf.token_to_id(text)
        return None if i is None else int(i)
    ids = tok.encode(text)
    return ids[0] if len(ids) == 1 else None


def stop_ids(tok: Any, texts: tuple[str, ...] | list[str]) -> frozenset[int]:
    return frozenset(i for i in (token_id(tok, t) for t in texts) if i is not None)


HEAL_CHARS = 32  # a longer last piece (a run of ``=`` or ``#``) is left as typed: one heal forward per choice


def split_typed(tok: Any, prefix: str) -> tuple[str, str, str]:
    """``prefix`` as (the text before the cursor's line, that line's text up to its last pre-tokenizer piece, the
    piece): ``'x = 1\\n    retur'`` → ``'x = 1\\n'``, ``'   '``, ``' retur'`` (no token crosses a piece's start, so
    the piece is what token healing re-chooses: ``' return'``, not the ``' ret'``, ``'ur'`` the model never saw).
    The piece is empty (the line stays as typed) when it is over `HEAL_CHARS` characters, and when it is
    whitespace after text on the line (`typed_whitespace`: ``'    return '``, ``'total = '``).

    Every layout that heals (`engine.formats.native`, `engine.formats.qwen`), so every front end and
    ``Engine.infill``, splits the typed line here."""
    cut = prefix.rfind("\n") + 1
    at = cut + tok.last_piece(prefix[cut:])
    if len(prefix) - at > HEAL_CHARS or typed_whitespace(prefix[cut:at], prefix[at:]):
        at = len(prefix)
    return prefix[:cut], prefix[cut:at], prefix[at:]


def typed_whitespace(typed: str, piece: str) -> bool:
    """Whether the last piece is whitespace typed after text on its line (``return ``, ``x = foo(a, ``): such a
    piece is not healed. A prefix ending in that whitespace token is what a FIM example whose middle starts at
    the next word trains (the prefix is tokenized alone), so the prompt as typed asks nothing new; healing it
    instead shows the model the line without the space, where it expects the next word without one (``1``,
    ``sum``, ``(``), and then makes it choose among the tokens that start with a space, which it finds
    unlikely: after ``total = `` the shipped tier chose `` =`` (``total = = 1``), after ``return `` it chose
    an indentation and typed the line again. An indentation alone (a line with nothing else) is still healed:
    ``'    '`` is ``'   '`` + the first word's piece."""
    return bool(piece) and not piece.strip() and bool(typed.strip())


def for_model(tok: Any, meta: dict[str, Any] | None = None, name: str | None = None,
              block_size: int | None = None, heal: bool = False) -> PromptFormat:
    """The format of a loaded model: its registry entry's (``meta["registry"]``, set by the HF
    loader for known models), else our native layout. ``name`` forces one (``native``, ``infill``,
    ``dreamon``, ``chat``). ``block_size``: the model's (``ModelArgs.block_size``), which the native
    layout's edit canvas is rounded to when the call names none. ``heal``: the model can heal a prompt's
    last piece (`engine.decoding.heal.supported`); our native layout then leaves the cursor line's last piece
    out for it (Qwen's format always does: its models are left to right)."""
    from engine.registry import lookup

    meta = dict(meta or {})
    entry = lookup(str(meta.get("registry") or meta.get("hub_repo") or ""))
    kind = name or (entry.fim if entry is not None else "native")
    if kind == "native":
        from engine.formats.native import NativeFormat

        return NativeFormat(tok, block_size, meta.get("fim_layout"), meta.get("edit_layout"), heal=heal)
    if entry is None:
        raise FormatNotSupported(f"format {kind!r} needs a registry model (engine.registry); got {meta!r}")
    if kind in ("infill", "dreamon"):
        from engine.formats.infill import InfillFormat

        return InfillFormat(tok, entry, meta)
    if kind == "qwen-fim":
        from engine.formats.qwen import QwenFimFormat

        return QwenFimFormat(tok, entry, meta)
    if kind == "chat":
        from engine.formats.chat import ChatFormat

        return ChatFormat(tok, entry, meta)
    raise FormatNotSupported(f"unknown prompt format {kind!r}")


__all__ = ["FormatNotSupported", "Layout", "PromptFormat", "for_model", "split_typed", "stop_ids", "token_id",
           "typed_whitespace"]
