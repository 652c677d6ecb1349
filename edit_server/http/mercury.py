"""Inception's Mercury Edit API, parsed and answered by pure functions (handlers: handlers_mercury.py).

Routes and the shapes public clients send (Continue's Inception provider and next-edit templates, Zed's
``mercury.rs``, Kilo Code, the Inception SDK examples):

``POST /v1/fim/completions``  ``{"model", "prompt": prefix, "suffix", "max_tokens", "stop", "stream"}`` →
    an OpenAI ``text_completion`` (``choices[0].text``). Continue sends ``suffix: "<|endoftext|>"`` for an
    empty suffix. Stream chunks carry the text both as ``text`` (OpenAI / Continue's Inception FIM) and
    ``delta.content`` (clients that read FIM streams like chat, e.g. Continue's Mistral-style FIM).
``POST /v1/edit/completions`` ``{"model", "messages": [{"role": "user", "content"}], …}``; the user message
    holds ``<|recently_viewed_code_snippets|>`` (``<|recently_viewed_code_snippet|>`` blocks of
    ``code_snippet_file_path: {path}\\n{code}``), ``<|current_file_content|>`` (``current_file_path:
    {path}``, then the file with ``<|code_to_edit|>`` … ``<|cursor|>`` … ``<|/code_to_edit|>``) and
    ``<|edit_diff_history|>`` (unified diffs, oldest first). The answer is a ``chat.completion`` whose
    ``choices[0].message.content`` is the rewritten code_to_edit in a fence, ``"```\\n{code}\\n```"``:
    Zed strips ``"```\\n"`` / ``"\\n```"``, Continue and Kilo take the text between the fences.
``POST /v1/apply/completions`` the user message is ``<|original_code|>\\n{code}\\n<|/original_code|>\\n\\n
    <|update_snippet|>\\n{snippet}\\n<|/update_snippet|>``; the answer's content is the merged code.
``"stream": true``   SSE ``data: {chunk}`` events (OpenAI chunk objects), then ``data: [DONE]``.
``"diffusing": true`` SSE of the whole canvas after each denoising step: every chunk's content *replaces*
    the previous one (Inception's wire shape: ``diffusion_meta: {diffusion_content, diffusion_progress}``);
    the last frame is the final answer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from edit_server.http.zed import PromptError, split_diffs
from engine.templates import EditPrompt, Section

SNIPPETS = ("<|recently_viewed_code_snippets|>", "<|/recently_viewed_code_snippets|>")
SNIPPET = ("<|recently_viewed_code_snippet|>", "<|/recently_viewed_code_snippet|>")
CURRENT = ("<|current_file_content|>", "<|/current_file_content|>")
TO_EDIT = ("<|code_to_edit|>", "<|/code_to_edit|>")
HISTORY = ("<|edit_diff_history|>", "<|/edit_diff_history|>")
ORIGINAL = ("<|original_code|>", "<|/original_code|>")
UPDATE = ("<|update_snippet|>", "<|/update_snippet|>")
CURSOR = "<|cursor|>"
SNIPPET_PATH, CURRENT_PATH = "code_snippet_file_path: ", "current_file_path: "
CONTINUE_EMPTY_SUFFIX = "<|endoftext|>"  # Continue's Inception provider sends this for an empty suffix
MASK_GLYPH = "░"  # a still-masked canvas position in a diffusing frame
FENCE = "```"


# ---- request bodies --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Options:
    """What every Mercury route reads besides its prompt."""

    model: str = ""
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    stream: bool = False
    diffusing: bool = False


@dataclass(frozen=True)
class FimBody:
    prompt: str
    suffix: str
    options: Options = field(default_factory=Options)


def _options(body: dict[str, Any]) -> Options:
    model = body.get("model") or ""
    if not isinstance(model, str):
        raise PromptError("field 'model' must be a string")
    max_tokens = body.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                   or max_tokens < 1):
        raise PromptError("field 'max_tokens' must be a positive integer")
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise PromptError("field 'stop' must be a string or a list of strings")
    for name in ("stream", "diffusing"):
        if body.get(name) not in (None, True, False):
            raise PromptError(f"field '{name}' must be a boolean")
    diffusing = bool(body.get("diffusing"))
    return Options(model, max_tokens, tuple(stop), bool(body.get("stream")) or diffusing, diffusing)


def parse_fim_body(body: Any) -> FimBody:
    """``/v1/fim/completions`` (also ``/v1/completions`` with a ``suffix`` field)."""
    if not isinstance(body, dict):
        raise PromptError("body must be a JSON object")
    prompt, suffix = body.get("prompt"), body.get("suffix", "")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise PromptError("field 'prompt' (the text before the cursor) is required")
    if suffix is None:
        suffix = ""
    if not isinstance(suffix, str):
        raise PromptError("field 'suffix' must be a string")
    return FimBody(prompt, "" if suffix == CONTINUE_EMPTY_SUFFIX else suffix, _options(body))


def parse_chat_body(body: Any) -> tuple[str, Options]:
    """``/v1/edit/completions`` and ``/v1/apply/completions``: (the last user message, options)."""
    if not isinstance(body, dict):
        raise PromptError("body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise PromptError("field 'messages' (a list of {role, content}) is required")
    user = None
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise PromptError("each message must be an object with a 'role'")
        content = m.get("content")
        if isinstance(content, list):  # OpenAI content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if m["role"] == "user" and isinstance(content, str):
            user = content
    if user is None:
        raise PromptError("a message with role 'user' and string content is required")
    return user, _options(body)


# ---- edit prompts ----------------------------------------------------------------------------------
def _between(text: str, tags: tuple[str, str], start: int = 0) -> tuple[str, int, int] | None:
    """The text between ``tags`` (one newline after the opening tag dropped); (inner, start, end)."""
    i = text.find(tags[0], start)
    if i < 0:
        return None
    a = i + len(tags[0])
    a += text.startswith("\n", a)
    j = text.find(tags[1], a)
    if j < 0:
        raise PromptError(f"{tags[0]} is not closed by {tags[1]}")
    return text[a:j], i, j + len(tags[1])


def _snippets(block: str) -> tuple[Section, ...]:
    pieces: list[str] = []
    pos = 0
    while (found := _between(block, SNIPPET, pos)) is not None:
        pieces.append(found[0])
        pos = found[2]
    if not pieces:  # older clients: bare "code_snippet_file_path: " blocks
        pieces = [p for p in re.split(r"(?m)^(?=" + re.escape(SNIPPET_PATH) + ")", block) if p.strip()]
    out = []
    for piece in pieces:
        head, _, code = piece.partition("\n")
        path = head[len(SNIPPET_PATH):].strip() if head.startswith(SNIPPET_PATH) else ""
        out.append(Section(kind="related", path=path, text=code if path else piece))
    return tuple(out)


def parse_edit(content: str) -> EditPrompt:
    """The user message of ``/v1/edit/completions`` → EditPrompt. The region is the code between
    ``<|code_to_edit|>\\n`` and ``<|/code_to_edit|>``, the file is ``<|current_file_content|>`` with the
    newline after ``<|/code_to_edit|>`` (the tag's own line end) dropped."""
    content = content.rstrip()
    snippets = _between(content, SNIPPETS)
    history = _between(content, HISTORY)
    current = _between(content, CURRENT)
    file_text = current[0] if current else ""
    if file_text.endswith("\n"):
        file_text = file_text[:-1]  # the newline before </current_file_content> is the tag's
    path = ""
    if file_text.startswith(CURRENT_PATH):
        head, _, file_text = file_text.partition("\n")
        path = head[len(CURRENT_PATH):].strip()
    edit = _between(file_text, TO_EDIT)
    if edit is not None:
        marked, i, j = edit
        before, after = file_text[:i], file_text[j:]
        after = after[1:] if after.startswith("\n") else after  # the closing tag's own line end
    else:  # some examples put <|code_to_edit|> after the file: find the region in it
        edit = _between(content, TO_EDIT)
        if edit is None:
            raise PromptError("the user message must hold the region to rewrite: <|code_to_edit|>…<|/code_to_edit|>")
        marked = edit[0]
        plain, region = file_text.replace(CURSOR, ""), marked.replace(CURSOR, "")
        core = region.rstrip("\n")
        at = plain.find(core) if core.strip() else -1
        before, after = (plain[:at], plain[at + len(core):]) if at >= 0 else (plain, "")
        owned = region[len(core):]  # the region's own final newlines
        after = after[len(owned):] if after.startswith(owned) else after
    cursor = marked.find(CURSOR)
    region = marked.replace(CURSOR, "")
    return EditPrompt(before=before.replace(CURSOR, ""), region=region, after=after.replace(CURSOR, ""),
                      cursor=max(cursor, 0), path=path,
                      history=split_diffs(history[0]) if history else (),
                      sections=_snippets(snippets[0]) if snippets else ())


def edit_content(new_region: str | None, old_region: str) -> str:
    """``choices[0].message.content`` for an edit: the new region, fenced, with the old region's
    final-newline convention (None or a blank rewrite of a non-blank region: the region unchanged)."""
    new = old_region if new_region is None or (not new_region.strip() and old_region.strip()) else new_region
    if old_region.endswith("\n") and not new.endswith("\n"):
        new += "\n"
    elif not old_region.endswith("\n") and new.endswith("\n"):
        new = new[:-1]
    return f"{FENCE}\n{new}\n{FENCE}"


def unfence(content: str) -> str:
    """Zed's reading of an edit answer: strip ``"```\\n"`` and ``"\\n```"`` (for tests and the bench)."""
    content = content[4:] if content.startswith(FENCE + "\n") else content
    return content[:-4] if content.endswith("\n" + FENCE) else content


# ---- apply ------------------------------------------------------------------------------------------
def parse_apply(content: str) -> tuple[str, str]:
    """``<|original_code|>…<|/original_code|>`` + ``<|update_snippet|>…<|/update_snippet|>`` →
    (original, snippet); the newline before each closing tag is the tag's."""
    original, update = _between(content, ORIGINAL), _between(content, UPDATE)
    if original is None or update is None:
        raise PromptError("the user message must hold <|original_code|>…<|/original_code|> and "
                          "<|update_snippet|>…<|/update_snippet|>")
    return tuple(t[:-1] if t.endswith("\n") else t for t in (original[0], update[0]))  # type: ignore[return-value]


# "// ... existing code ...", "# ... rest of the file ...", "<!-- … unchanged … -->"
_MARKER = re.compile(r"^\s*(?:(?://|#|--|;|\*|/\*|<!--|\{/\*|'|%)\s*)?(?:\.\.\.|…)\s*"
                     r"(?:existing|rest\b|remaining|unchanged|previous|other|more|same|keep)", re.I)


_CLOSER = re.compile(r"^\s*(?:[}\])]|end\b|</|fi\b|done\b|esac\b)")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _blocks(lines: list[str]) -> list[list[str]]:
    """Split snippet lines into blocks: a line at the snippet's smallest indentation starts one; deeper
    lines, blank lines and a closing line (``}``, ``)``, ``end``, …) at that indentation belong to it."""
    base = min((_indent(ln) for ln in lines if ln.strip()), default=0)
    blocks: list[list[str]] = []
    for ln in lines:
        if blocks and (not ln.strip() or _indent(ln) > base or _CLOSER.match(ln)):
            blocks[-1].append(ln)
        elif ln.strip():
            blocks.append([ln])
    return blocks


def _block_end(olines: list[str], s: int) -> int:
    """End (exclusive, trailing blank lines left out) of the original block whose first line is ``s``."""
    base, last, e = _indent(olines[s]), s + 1, s + 1
    while e < len(olines):
        ln = olines[e]
        e += 1
        if not ln.strip():
            continue
        if _indent(ln) > base:
            last = e
            continue
        if _indent(ln) == base and _CLOSER.match(ln):
            last = e
        break
    return last


def merge_snippet(original: str, snippet: str) -> str | None:
    """Deterministic apply of a lazy edit snippet. Between ``... existing code ...`` markers the snippet is
    split into blocks (a line at its outer indentation and what is nested under it); a block whose first
    line occurs in the original (indentation included, in order) replaces that line's block there, the
    others are inserted next to the blocks they follow or precede; original text no block replaces is
    kept. None when a chunk between markers has no block found in the original (the caller asks the model)."""
    if not original.strip():
        return snippet
    olines = [ln if ln.endswith("\n") else ln + "\n" for ln in original.splitlines(keepends=True)]
    chunks: list[list[str]] = [[]]
    for line in snippet.splitlines(keepends=True):
        if _MARKER.match(line):
            chunks.append([])
        else:
            chunks[-1].append(line if line.endswith("\n") else line + "\n")
    out: list[str] = []
    pos = 0
    for chunk in (c for c in chunks if any(ln.strip() for ln in c)):
        pending: list[str] = []
        placed = False
        for block in _blocks(chunk):
            head = block[0].rstrip()
            s = next((n for n in range(pos, len(olines)) if olines[n].rstrip() == head), None)
            if s is None:
                pending += block
                continue
            e = _block_end(olines, s) if sum(1 for ln in block if ln.strip()) > 1 else s + 1  # a bare header
            if e < len(olines) and not olines[e].strip():  # keep the original's spacing after the block
                while len(block) > 1 and not block[-1].strip():
                    block = block[:-1]
            out += olines[pos:s] + pending + block
            pending, pos, placed = [], e, True
        if not placed:
            return None
        out += pending
    merged = "".join(out + olines[pos:])
    return merged if original.endswith("\n") else merged.removesuffix("\n")


# ---- answers ------------------------------------------------------------------------------------------
def completion(rid: str, created: int, model: str, text: str, finish: str,
               usage: tuple[int, int] | None = None) -> dict[str, Any]:
    """An OpenAI ``text_completion`` (the FIM answer)."""
    out: dict[str, Any] = {"id": rid, "object": "text_completion", "created": created, "model": model,
                           "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]}
    if usage is not None:
        out["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return out


def completion_chunk(rid: str, created: int, model: str, text: str | None, finish: str | None,
                     progress: float | None = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish,
                              "delta": {"content": text} if text is not None else {}}
    out: dict[str, Any] = {"id": rid, "object": "text_completion", "created": created, "model": model,
                           "choices": [choice]}
    if progress is not None:
        out["diffusion_meta"] = {"diffusion_content": True, "diffusion_progress": progress}
    return out


def chat(rid: str, created: int, model: str, content: str, finish: str,
         usage: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    """An OpenAI ``chat.completion`` (the edit and apply answers)."""
    return {"id": rid, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": finish}],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}}


def chat_chunk(rid: str, created: int, model: str, content: str | None, finish: str | None,
               progress: float | None = None) -> dict[str, Any]:
    delta: dict[str, Any] = {"role": "assistant", "content": content} if content is not None else {}
    out: dict[str, Any] = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if progress is not None:
        out["diffusion_meta"] = {"diffusion_content": True, "diffusion_progress": progress}
    return out


def deltas(text: str) -> list[str]:
    """How a finished answer is streamed: one delta per line (concatenated they are the text)."""
    return text.splitlines(keepends=True) or [""]


def canvas_text(canvas: Sequence[int], mask: int, end_ids: frozenset[int],
                decode: Callable[[list[int]], str]) -> tuple[str, float]:
    """A denoising state → (text with still-masked positions as ``MASK_GLYPH``, fraction decided). The
    canvas ends at its first end token (what follows is padding)."""
    pieces: list[str] = []
    run: list[int] = []
    masked = 0
    n = 0
    for t in canvas:
        if t in end_ids:
            break
        n += 1
        if t == mask:
            masked += 1
            if run:
                pieces.append(decode(run))
                run = []
            pieces.append(MASK_GLYPH)
        else:
            run.append(t)
    if run:
        pieces.append(decode(run))
    return "".join(pieces), (1.0 - masked / n if n else 1.0)
