"""Zed's request formats, parsed by pure functions into engine prompts (the app is edit_server/http/app.py).

Zed's ``open_ai_compatible_api`` edit-prediction provider sends ``{"model", "prompt", "max_tokens",
"stop"}`` in one of two prompt formats:

``qwen``   ``<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>`` → ``Engine.infill``; the reply is
           the middle, inserted at the cursor.
``zeta2``  ``<[fim-suffix]>{after}<[fim-prefix]>`` + ``<filename>{path}\\n{excerpt}`` related files +
           ``<filename>edit_history\\n{diffs}`` + ``<filename>{path}\\n{before}<<<<<<< CURRENT\\n{region
           with <|user_cursor|>}=======\\n<[fim-middle]>`` → ``Engine.rewrite``; the reply is the whole new
           region followed by exactly ``>>>>>>> UPDATED\\n`` (Zed diffs old vs new region).

No aiohttp and no engine here: the app hands the parsed prompts to the same pipeline the LSP server uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from engine.templates import EditPrompt, FimPrompt, Section

PromptFormat = Literal["qwen", "zeta2"]

# qwen FIM markers
FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE = "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"
FILE_SEP = "<|file_sep|>"
# zeta2 markers
Z_SUFFIX, Z_PREFIX, Z_MIDDLE = "<[fim-suffix]>", "<[fim-prefix]>", "<[fim-middle]>"
Z_FILENAME = "<filename>"
Z_HISTORY = "edit_history"
Z_CURRENT, Z_SEPARATOR, Z_UPDATED = "<<<<<<< CURRENT\n", "=======\n", ">>>>>>> UPDATED\n"
Z_CURSOR = "<|user_cursor|>"
Z_ACCEPTED = "// User accepted prediction:"



class PromptError(ValueError):
    """The prompt is not in the format it claims (→ HTTP 400)."""


# ---- pure parsing --------------------------------------------------------------------------------
def detect_format(prompt: str) -> PromptFormat:
    """Which of Zed's prompt formats ``prompt`` is in."""
    if Z_MIDDLE in prompt and Z_SUFFIX in prompt:
        return "zeta2"
    if FIM_PREFIX in prompt and FIM_MIDDLE in prompt:
        return "qwen"
    raise PromptError("prompt is neither a qwen FIM prompt (<|fim_prefix|>…<|fim_middle|>) "
                      "nor a zeta2 edit prompt (<[fim-suffix]>…<[fim-middle]>)")


def parse_qwen(prompt: str) -> FimPrompt:
    """``[<|file_sep|>{path}\\n]<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>`` → FimPrompt."""
    i = prompt.find(FIM_PREFIX)
    j = prompt.find(FIM_SUFFIX, i + len(FIM_PREFIX))
    k = prompt.rfind(FIM_MIDDLE)
    if i < 0 or j < 0 or k < j:
        raise PromptError("qwen prompt must be <|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>")
    head = prompt[:i]
    path = ""
    if FILE_SEP in head:  # optional repo-level header: <|file_sep|>{path}\n
        path = head[head.rfind(FILE_SEP) + len(FILE_SEP):].split("\n", 1)[0].strip()
    return FimPrompt(prefix=prompt[i + len(FIM_PREFIX):j], suffix=prompt[j + len(FIM_SUFFIX):k], path=path)


def split_diffs(text: str) -> tuple[str, ...]:
    """Unified diffs in an edit-history block, oldest first, without Zed's 'accepted' comments."""
    lines = [ln for ln in text.splitlines(keepends=True) if not ln.startswith(Z_ACCEPTED)]
    diffs: list[list[str]] = []
    for n, line in enumerate(lines):
        starts = line.startswith("--- ") and n + 1 < len(lines) and lines[n + 1].startswith("+++ ")
        if starts or not diffs:
            diffs.append([])
        diffs[-1].append(line)
    out = ("".join(d).rstrip("\n") + "\n" for d in diffs)  # Zed ends the section with a blank line
    return tuple(d for d in out if d.strip())


def parse_zeta2(prompt: str) -> EditPrompt:
    """A zeta2 prompt → EditPrompt (related files as sections, diffs as history, cursor from the marker)."""
    if not prompt.startswith(Z_SUFFIX):
        raise PromptError("zeta2 prompt must start with <[fim-suffix]>")
    p = prompt.find(Z_PREFIX)
    if p < 0:
        raise PromptError("zeta2 prompt has no <[fim-prefix]>")
    after = prompt[len(Z_SUFFIX):p]
    body = prompt[p + len(Z_PREFIX):]
    end = body.rfind(Z_SEPARATOR + Z_MIDDLE)
    c = body.rfind(Z_CURRENT, 0, max(end, 0))
    if end < 0 or c < 0:
        raise PromptError("zeta2 prompt must end with <<<<<<< CURRENT\\n{region}=======\\n<[fim-middle]>")
    marked = body[c + len(Z_CURRENT):end]
    chunks = body[:c].split(Z_FILENAME)
    if chunks[0].strip() or len(chunks) < 2:
        raise PromptError("zeta2 prompt must name the current file with <filename>{path}\\n before the region")
    path, _, before = chunks[-1].partition("\n")
    sections: list[Section] = []
    history: tuple[str, ...] = ()
    for chunk in chunks[1:-1]:
        name, _, text = chunk.partition("\n")
        if name.strip() == Z_HISTORY:
            history += split_diffs(text)
        else:
            sections.append(Section(kind="related", path=name.strip(), text=text))
    cursor = marked.find(Z_CURSOR)
    region = marked.replace(Z_CURSOR, "")
    return EditPrompt(before=before, region=region, after=after, cursor=max(cursor, 0), path=path.strip(),
                      history=history, sections=tuple(sections))


def zeta2_reply(new_region: str, old_region: str) -> str:
    """The reply Zed expects: the whole new region + ``>>>>>>> UPDATED\\n``.

    A whitespace-only rewrite of a non-blank region is treated as "no edit" (the region comes back
    unchanged), and a dropped final newline is restored, so a weak model never deletes the region.
    """
    new = new_region.replace(Z_UPDATED.rstrip("\n"), "")
    if not new.strip() and old_region.strip():
        new = old_region
    if old_region.endswith("\n") and not new.endswith("\n"):
        new += "\n"
    return new + Z_UPDATED


def apply_stops(text: str, stops: list[str]) -> tuple[str, bool]:
    """Cut ``text`` at the first stop string; (text, whether one was found)."""
    cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


# ---- request validation --------------------------------------------------------------------------
@dataclass(frozen=True)
class CompletionRequest:
    model: str
    prompt: str
    max_tokens: int
    stop: tuple[str, ...]


def parse_request(body: Any) -> CompletionRequest:
    """Validate a ``/v1/completions`` body (raises PromptError with the offending field)."""
    if not isinstance(body, dict):
        raise PromptError("body must be a JSON object")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise PromptError("field 'prompt' (string) is required")
    max_tokens = body.get("max_tokens", 64)
    if max_tokens is None:
        max_tokens = 64
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise PromptError("field 'max_tokens' must be a positive integer")
    stop = body.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise PromptError("field 'stop' must be a string or a list of strings")
    model = body.get("model") or ""
    if not isinstance(model, str):
        raise PromptError("field 'model' must be a string")
    return CompletionRequest(model=model, prompt=prompt, max_tokens=max_tokens, stop=tuple(stop))
