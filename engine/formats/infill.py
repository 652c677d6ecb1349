"""In-place infilling for bidirectional models: ``[bos] prefix <mask>*n suffix [eos]``.

This is the layout of the published infilling code — DreamOn's ``process_infilling_prompt`` /
``MDMGenerator.infilling`` (bos + prefix, masks, suffix + eos; also used there for the fixed-length
Dream-Coder baselines) and Open-dCoder's ``eval_infill.infilling`` (prefix, masks, suffix; no
bos / eos) — so the masked span sits between prefix and suffix and every position attends to both.
Extra context (other files) goes first as Qwen repo-level ``<|file_sep|>{path}`` blocks when the
tokenizer has that token (Dream-Coder, DiffuCoder and Open-dCoder descend from Qwen2.5-Coder), and is
left out otherwise; the published examples carry none.
"""

from __future__ import annotations

from typing import Any

from engine.formats import FormatNotSupported, Layout, stop_ids, token_id
from engine.registry import ModelEntry
from engine.templates import EditPrompt, FimPrompt


class InfillFormat:
    def __init__(self, tok: Any, entry: ModelEntry, meta: dict[str, Any]) -> None:
        self.tok, self.entry, self.meta = tok, entry, meta
        self.name = entry.fim
        self.bos = token_id(tok, meta.get("bos_token")) if entry.fim_bos else None
        self.eos = tok.special.eos if entry.fim_eos else None
        self.file_sep = token_id(tok, "<|file_sep|>")
        self.stops = stop_ids(tok, entry.eos_tokens)
        self.expand = token_id(tok, entry.expand_token) if entry.expand_token else None

    def _context(self, path: str, sections: tuple[Any, ...]) -> tuple[list[int], list[tuple[str, int, int]]]:
        ids: list[int] = [] if self.bos is None else [self.bos]
        parts = [("bos", 0, len(ids))] if ids else []
        if self.file_sep is None or not (sections or path):
            return ids, parts
        for i, s in enumerate(sections):
            start = len(ids)
            ids += [self.file_sep, *self.tok.encode(f"{s.path}\n{s.text}\n")]
            parts.append((f"section:{i}:{s.kind}", start, len(ids)))
        start = len(ids)
        ids += [self.file_sep, *self.tok.encode(f"{path}\n")]
        parts.append(("header", start, len(ids)))
        return ids, parts

    def fim(self, p: FimPrompt, max_tokens: int = 64) -> Layout:
        before, parts = self._context(p.path, p.sections)
        start = len(before)
        before += self.tok.encode(p.prefix)
        parts.append(("prefix", start, len(before)))
        after = self.tok.encode(p.suffix) + ([] if self.eos is None else [self.eos])
        return Layout(before, max_tokens, after, self.stops, self.expand, parts)

    def edit(self, p: EditPrompt, block_size: int | None = None) -> Layout:
        if self.entry.edit is None:
            raise FormatNotSupported(f"{self.entry.name}: next edits are not supported ({self.entry.edit_note})")
        from engine.formats.chat import ChatFormat

        return ChatFormat(self.tok, self.entry, self.meta).edit(p, block_size)
