"""Our own layout (the shipped adapter and models trained with `engine.train`): `engine.templates`.

A model that can heal (block-causal, blocks from the canvas, shifted logits: `engine.decoding.heal.supported`) gets
its FIM prompt without the cursor line's last pre-tokenizer piece, which the model then spells again with tokens
of its choosing (`engine.decoding.heal`): a prompt ending inside a word (``    retu``, ``c =``, ``.append``)
made the shipped bd3 tier write ``False`` for `` False``, ``'('`` for ``= '('``. A middle that starts where the
piece starts is one training drew (`engine.train.tasks`: spans start at any character), so the healed prompt
asks nothing new. A request at a line start is unchanged, and so is whitespace typed after text on the line
(``return ``: `engine.formats.typed_whitespace`). docs/QUALITY.md has the measurements.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from engine.formats import Layout, split_typed
from engine.templates import (
    EditPrompt,
    FimPrompt,
    edit_canvas_length,
    fim_rest,
    in_trained_order,
    render_edit,
    render_fim,
)


class NativeFormat:
    name = "native"

    def __init__(self, tok: Any, block_size: int | None = None, fim_layout: str | None = None,
                 edit_layout: str | None = None, heal: bool = False) -> None:
        """``block_size``: the model's (``ModelArgs.block_size``); an ``edit`` call may name its own.
        ``fim_layout``: the FIM prompt order the adapter was trained on (its metadata's ``fim_layout``;
        None = ``DEFAULT_FIM_LAYOUT``). It replaces the default order of a prompt; a prompt that names
        another order explicitly keeps it. ``edit_layout``: the same for next edits (``edit_layout``;
        None = ``DEFAULT_EDIT_LAYOUT``, history before the file). ``heal``: leave the cursor line's last piece
        out of a FIM prompt for the engine to heal (the model can: `engine.decoding.heal.supported`)."""
        self.tok, self.block, self.fim_layout = tok, block_size, fim_layout
        self.edit_layout = edit_layout
        self.heal = heal and hasattr(tok, "last_piece")

    def fim(self, p: FimPrompt, max_tokens: int = 64) -> Layout:
        p = in_trained_order(p, fim_layout=self.fim_layout)  # type: ignore[assignment]
        _, typed, piece = split_typed(self.tok, p.prefix) if self.heal else ("", "", "")
        if piece and not typed and fim_rest(p)[0]:
            piece = ""  # all of the line left of the cursor, text right of it: without the piece the prefix
            # would end at a line start, where spml renders that text as the suffix's start — a re-prefill
        if piece:
            p = replace(p, prefix=p.prefix[: len(p.prefix) - len(piece)])
        r = render_fim(self.tok, p)
        return Layout(r.ids, max_tokens, parts=r.parts, heal=piece)

    def edit(self, p: EditPrompt, block_size: int | None = None) -> Layout:
        b = block_size or self.block
        if not b:
            raise ValueError("native edit layout: no block size (give the model's ModelArgs.block_size)")
        p = in_trained_order(p, edit_layout=self.edit_layout)  # type: ignore[assignment]
        r = render_edit(self.tok, p)
        n = edit_canvas_length(len(self.tok.encode(p.region)), block_size=b)
        return Layout(r.ids, n, parts=r.parts)
