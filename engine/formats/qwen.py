"""Qwen2.5-Coder's own FIM format (what its pretraining used; llama.vim / llama.cpp's ``/infill`` send it):

* file level: ``<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>`` — the middle follows;
* repository level, when the context builder found other files:
  ``<|repo_name|>{repo}\\n<|file_sep|>{path}\\n{text}\\n`` per file, then
  ``<|file_sep|>{current path}\\n`` and the file-level FIM of the current file.

The middle ends at ``<|endoftext|>`` (or ``<|fim_pad|>``, or ``<|file_sep|>`` / ``<|repo_name|>`` when the
model moves on to another file; the instruct checkpoint also ends with ``<|im_end|>``): the registry's
``eos_tokens``, which are also llama.cpp's end-of-generation tokens for this vocabulary. The canvas comes
after the prompt (block-causal, left to right). Edit history has no place in this format and is left out.
Every id comes from the tokenizer by token text; a tokenizer that lacks one of the FIM tokens is refused.

Where the cursor is. The text typed on the cursor's line goes after ``<|fim_middle|>`` (as llama.cpp's ``/infill``
puts llama.vim's ``prompt``), so a keystroke changes the prompt's end only and the prefix cache keeps the suffix's
KV (a keystroke used to re-prefill the whole suffix) — unless more than `MOVE_REST` non-space characters follow the
cursor on its line: the model then ignores where the suffix goes on (HumanEval random-span), and the line stays in
the prefix. Either way the line's last pre-tokenizer piece is left out and healed (`engine.decoding.heal`): a
prompt ending inside a word (``retu``) made the model write ``n a`` or ``rn`` again — except whitespace typed after
text on the line (``return ``), which stays as typed (`engine.formats.typed_whitespace`). docs/QUALITY.md has the
measurements.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from engine.formats import FormatNotSupported, Layout, split_typed, stop_ids, token_id
from engine.registry import ModelEntry
from engine.templates import EditPrompt, FimPrompt

FIM_TOKENS = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|repo_name|>", "<|file_sep|>")
DEFAULT_REPO = "workspace"


def repo_name(path: str) -> str:
    """The repository name of the repo-level header: the first folder of a relative path, else a fixed name."""
    parts = PurePosixPath(path.replace("\\", "/")).parts
    return parts[0] if len(parts) > 1 and parts[0] not in ("/", "..", ".") else DEFAULT_REPO


MOVE_REST = 8  # non-space characters right of the cursor up to which its line goes after the middle token


class QwenFimFormat:
    name = "qwen-fim"

    def __init__(self, tok: Any, entry: ModelEntry, meta: dict[str, Any]) -> None:
        self.tok, self.entry, self.meta = tok, entry, meta
        ids = {t: token_id(tok, t) for t in FIM_TOKENS}
        missing = [t for t, i in ids.items() if i is None]
        if missing:
            raise FormatNotSupported(f"{entry.name}: the tokenizer lacks {', '.join(missing)}")
        self.prefix_id, self.suffix_id, self.middle_id, self.repo_id, self.sep_id = (
            int(ids[t]) for t in FIM_TOKENS)  # type: ignore[arg-type]
        self.stops = stop_ids(tok, entry.eos_tokens)

    def fim(self, p: FimPrompt, max_tokens: int = 64) -> Layout:
        ids: list[int] = []
        parts: list[tuple[str, int, int]] = []

        def add(label: str, new: list[int]) -> None:
            parts.append((label, len(ids), len(ids) + len(new)))
            ids.extend(new)

        if p.sections:
            add("repo", [self.repo_id, *self.tok.encode(f"{repo_name(p.path)}\n")])
            for i, s in enumerate(p.sections):
                add(f"section:{i}:{s.kind}", [self.sep_id, *self.tok.encode(f"{s.path}\n{s.text}\n")])
            add("header", [self.sep_id, *self.tok.encode(f"{p.path}\n")])
        head, typed, piece = split_typed(self.tok, p.prefix)
        rest = p.suffix.split("\n", 1)[0]
        moved = len("".join(rest.split())) <= MOVE_REST
        add("prefix", [self.prefix_id, *self.tok.encode(head if moved else head + typed)])
        add("suffix", [self.suffix_id, *self.tok.encode(p.suffix)])
        add("middle", [self.middle_id, *(self.tok.encode(typed) if moved else [])])
        return Layout(ids, max_tokens, stop_ids=self.stops, parts=parts, heal=piece)

    def edit(self, p: EditPrompt, block_size: int | None = None) -> Layout:
        from engine.formats.chat import ChatFormat

        return ChatFormat(self.tok, self.entry, self.meta).edit(p, block_size)
