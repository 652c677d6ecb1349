"""Chat-model prompts: the model's own chat template (``chat_template`` of tokenizer_config.json,
rendered in a jinja2 sandbox the way ``apply_chat_template`` does, with ``add_generation_prompt``)
around a fill-in-the-middle or rewrite instruction; the canvas is the assistant's reply.

Used where the published generation code is chat-only (SDAR, Fast-dLLM v2, LLaDA2.0: block-causal,
so a canvas cannot see a suffix after it — the suffix goes into the instruction) and for next edits
of instruct models. No model was trained on these instructions: they are zero-shot, marked
"derived" in the registry. Without a template in the checkpoint, ChatML (``<|im_start|>`` …) is used.
The instruction marks the gap / region with plain text, not special tokens.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from engine.formats import FormatNotSupported, Layout, stop_ids, token_id
from engine.registry import ModelEntry
from engine.templates import EditPrompt, FimPrompt, edit_canvas_length

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SLOT = "\x00CONTENT\x00"
FILL = "[FILL]"
REGION_START, REGION_END, CURSOR = "[EDIT_START]", "[EDIT_END]", "[CURSOR]"
FIM_TEXT = ("Fill in the missing code at {fill} in the file below. Reply with only the code that "
            "replaces {fill}: no explanation, no code fences.\n\n")
EDIT_TEXT = ("The developer is editing the file below{history}. Rewrite the region between {start} and "
             "{end} (the cursor is at {cursor}) the way the developer most likely wants it next. Reply "
             "with only the new region: no markers, no explanation, no code fences.\n\n")


def render_template(template: str, messages: list[dict[str, str]], **kw: Any) -> str:
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg: str) -> None:
        raise FormatNotSupported(f"chat template: {msg}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = lambda x, indent=None, **_: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=messages, add_generation_prompt=True, **kw)


class ChatFormat:
    name = "chat"

    def __init__(self, tok: Any, entry: ModelEntry, meta: dict[str, Any]) -> None:
        self.tok, self.entry = tok, entry
        self.template = str(meta.get("chat_template") or CHATML)
        self.bos_text = meta.get("bos_token")
        self.stops = stop_ids(tok, entry.eos_tokens)

    def prompt(self, content: str) -> tuple[list[int], list[tuple[str, int, int]]]:
        """Token ids of the template around one user message (encoded in pieces: the template's own
        text, then the content, so the content's tokens never merge with the template's)."""
        msgs = ([{"role": "system", "content": self.entry.system}] if self.entry.system else [])
        msgs.append({"role": "user", "content": SLOT})
        text = render_template(self.template, msgs, bos_token=self.bos_text or "",
                               eos_token=self.tok.decode([self.tok.special.eos]), enable_thinking=False)
        if text.count(SLOT) != 1:
            raise FormatNotSupported(f"{self.entry.name}: the chat template does not place the user message once")
        head, tail = text.split(SLOT)
        ids = self._encode_template(head)
        parts = [("template", 0, len(ids))]
        start = len(ids)
        ids += self.tok.encode(content)
        parts.append(("content", start, len(ids)))
        start = len(ids)
        ids += self._encode_template(tail)
        parts.append(("template", start, len(ids)))
        return ids, parts

    def _encode_template(self, text: str) -> list[int]:
        if self.bos_text and text.startswith(self.bos_text):  # a bos the template writes as text
            bos = token_id(self.tok, self.bos_text)
            if bos is not None:
                return [bos, *self.tok.encode(text[len(self.bos_text):])]
        return self.tok.encode(text)

    @staticmethod
    def _context(path: str, sections: tuple[Any, ...], history: tuple[str, ...]) -> str:
        out = "".join(f"Context from {s.path}:\n{s.text}\n\n" for s in sections)
        if history:
            out += "Recent edits:\n" + "".join(d if d.endswith("\n") else d + "\n" for d in history) + "\n"
        return out + (f"File: {path}\n" if path else "")

    def fim(self, p: FimPrompt, max_tokens: int = 64) -> Layout:
        content = (FIM_TEXT.format(fill=FILL) + self._context(p.path, p.sections, ())
                   + p.prefix + FILL + p.suffix)
        ids, parts = self.prompt(content)
        return Layout(ids, max_tokens, stop_ids=self.stops, parts=parts)

    def edit(self, p: EditPrompt, block_size: int | None = None) -> Layout:
        if self.entry.edit is None:
            raise FormatNotSupported(f"{self.entry.name}: next edits are not supported ({self.entry.edit_note})")
        if not 0 <= p.cursor <= len(p.region):
            raise ValueError(f"cursor {p.cursor} outside the editable region (length {len(p.region)})")
        head = EDIT_TEXT.format(history=" (recent edits first)" if p.history else "", start=REGION_START,
                                end=REGION_END, cursor=CURSOR)
        content = (head + self._context(p.path, p.sections, p.history) + p.before + REGION_START
                   + p.region[: p.cursor] + CURSOR + p.region[p.cursor:] + REGION_END + p.after)
        ids, parts = self.prompt(content)
        n = edit_canvas_length(len(self.tok.encode(p.region)), block_size=block_size or self.entry.block_size)
        return Layout(ids, n, stop_ids=self.stops, parts=parts, reply=partial(edit_reply, region=p.region))


def edit_reply(text: str, region: str) -> list[tuple[int, int]]:
    """A chat model's rewrite as the new region: the spans of ``text`` (start, end) that make it. Told to
    reply with the region alone, an instruct model may still re-type the prompt's plain-text markers
    (measured: `[EDIT_START]from attr import …`, `[CURSOR]`; docs/QUALITY.md): then the region
    is what follows ``[EDIT_START]`` and precedes ``[EDIT_END]``, and ``[CURSOR]`` is taken out — each
    marker only where the region itself does not hold that text. Spans, not text, so that the engine can
    drop the marker tokens' confidences with them (`engine.calls.call_result`)."""
    start, end = 0, len(text)
    if REGION_START not in region and REGION_START in text:
        start = text.index(REGION_START) + len(REGION_START)
    if REGION_END not in region and REGION_END in text[start:]:
        end = text.index(REGION_END, start)
    if CURSOR in region:
        return [(start, end)]
    spans, at = [], start
    while (hit := text.find(CURSOR, at, end)) >= 0:
        spans.append((at, hit))
        at = hit + len(CURSOR)
    spans.append((at, end))
    return [(a, b) for a, b in spans if b > a] or [(start, start)]
