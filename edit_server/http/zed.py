"""Zed's request formats, parsed by pure functions into engine prompts (the app is edit_server/http/app.py).

Zed's ``open_ai_compatible_api`` edit-prediction provider sends ``{"model", "prompt", "max_tokens",
"stop"}`` (Zed's ``RawCompletionRequest``) and reads ``choices[0].text``. What ``prompt`` holds depends
on Zed's ``prompt_format`` setting (and, for ``zeta2``, on the Zed build: its ``ZetaFormat`` default):

``zeta2`` → ``v0131`` (``V0131GitMergeMarkersPrefix``, the default of Zed builds since early 2026; also
           ``V0211Prefill``, which appends the first lines of the region after ``<|fim_middle|>``)::

               [<|file_sep|>{related path}\\n{excerpt}]… [<|file_sep|>edit history\\n{diffs}]
               <|file_sep|>{path}\\n<|fim_prefix|>{before}<<<<<<< CURRENT\\n{region with <|user_cursor|>}
               =======\\n<|fim_suffix|>{after}<|fim_middle|>{prefill}

           reply: the new region (minus the prefill) + ``>>>>>>> UPDATED\\n``. ``v0120``
           (``V0120GitMergeMarkers``: the region after ``<|fim_middle|>``) is answered the same way.
``zeta2`` → ``zeta2`` (``V0211SeedCoder`` / ``V0304SeedNoEdits``): ``<[fim-suffix]>{after}<[fim-prefix]>``
           + ``<filename>{path}\\n{excerpt}`` related files + ``<filename>edit_history\\n{diffs}`` +
           ``<filename>{path}\\n{before}<<<<<<< CURRENT\\n{region}=======\\n<[fim-middle]>``; same reply.
``zeta``   zeta1's instruction prompt (``### User Edits:`` … ``<|editable_region_start|>`` …); reply: the
           new region.
FIM        ``qwen`` / ``code_gemma`` ``<|fim_prefix|>…<|fim_suffix|>…<|fim_middle|>``, ``star_coder``
           ``<fim_prefix>…``, ``code_llama`` ``<PRE> … <SUF>… <MID>``, ``deepseek_coder`` ``<｜fim▁begin｜>…``,
           ``codestral`` ``[SUFFIX]…[PREFIX]…``, ``glm`` ``<|code_prefix|>…``; reply: the text to insert.

Formats Zed can send that edit-server does not answer (the multi-region marker formats of ``zeta2_1`` /
V0306+, the V0112–V0114 layouts, hashline, variable-edit) raise :class:`UnsupportedFormat`, which the app
turns into a 400 whose JSON names the supported formats and the Zed setting to change.

No aiohttp and no engine here: the app hands the parsed prompts to the same pipeline the LSP server uses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from engine.templates import EditPrompt, FimPrompt, Section

# qwen FIM markers (also the V0120 / V0131 frame)
FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE = "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"
FILE_SEP = "<|file_sep|>"
# seed-coder (zeta2) markers
Z_SUFFIX, Z_PREFIX, Z_MIDDLE = "<[fim-suffix]>", "<[fim-prefix]>", "<[fim-middle]>"
Z_FILENAME = "<filename>"
Z_HISTORY = "edit_history"
Z_CURRENT, Z_SEPARATOR, Z_UPDATED = "<<<<<<< CURRENT\n", "=======\n", ">>>>>>> UPDATED\n"
Z_CURSOR = "<|user_cursor|>"
Z_ACCEPTED = "// User accepted prediction:"
V_HISTORY = "edit history"  # the qwen-framed formats name the history section with a space
MARKER_TAG = "<|marker"  # multi-region formats (V0306+, zeta2_1)
# zeta1
Z1_CURSOR = "<|user_cursor_is_here|>"
Z1_START, Z1_END = "<|editable_region_start|>", "<|editable_region_end|>"
Z1_SOF = "<|start_of_file|>"
Z1_EXCERPT, Z1_RESPONSE = "\n\n### User Excerpt:\n\n```", "\n```\n\n### Response:\n"

# FIM formats other than qwen: name -> (begin, hole, end); codestral is suffix-first, handled apart
FIM_MARKERS: dict[str, tuple[str, str, str]] = {
    "star_coder": ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
    "code_llama": ("<PRE> ", " <SUF>", " <MID>"),
    "deepseek_coder": ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),
    "glm": ("<|code_prefix|>", "<|code_suffix|>", "<|code_middle|>"),
}
CODESTRAL_SUFFIX, CODESTRAL_PREFIX = "[SUFFIX]", "[PREFIX]"

# what a user can put in Zed's edit_predictions.open_ai_compatible_api.prompt_format
SETTING = "edit_predictions.open_ai_compatible_api.prompt_format"
SUPPORTED: dict[str, str] = {
    "zeta2": "next edits (Zed's V0131GitMergeMarkersPrefix, V0211Prefill, V0120GitMergeMarkers, "
             "V0211SeedCoder and V0304SeedNoEdits prompts) — recommended",
    "zeta": "next edits, zeta1's instruction prompt",
    "qwen": "fill-in-the-middle at the cursor", "code_gemma": "fill-in-the-middle (qwen markers)",
    "star_coder": "fill-in-the-middle", "code_llama": "fill-in-the-middle",
    "deepseek_coder": "fill-in-the-middle", "codestral": "fill-in-the-middle", "glm": "fill-in-the-middle",
}


class PromptError(ValueError):
    """The prompt is not in the format it claims (→ HTTP 400)."""


class UnsupportedFormat(PromptError):
    """A prompt in a format edit-server does not answer (→ HTTP 400 naming the supported ones)."""

    def __init__(self, detected: str) -> None:
        self.detected = detected
        names = ", ".join(f'"{k}"' for k in SUPPORTED)
        super().__init__(f"unsupported prompt format ({detected}). edit-server answers Zed's prompt_format "
                         f"{names}; set {SETTING} in Zed's settings to one of them (recommended: \"zeta2\")")


@dataclass(frozen=True)
class ZedPrompt:
    """A parsed request prompt: which layout it was, the engine prompt, and (V0211Prefill) the start of
    the region Zed already wrote after ``<|fim_middle|>`` and will put before our reply."""

    format: str  # qwen | star_coder | code_llama | deepseek_coder | codestral | glm | zeta2 | v0131 | v0120 | zeta
    prompt: FimPrompt | EditPrompt
    prefill: str = ""
    trailing_newline_added: bool = False  # zeta: the region got the newline before its end marker


# ---- detection -------------------------------------------------------------------------------------
def detect_format(prompt: str) -> str:
    """Which of Zed's prompt layouts ``prompt`` is in (raises UnsupportedFormat with what it looks like)."""
    if prompt.startswith(Z_SUFFIX) or Z_MIDDLE in prompt:
        if MARKER_TAG in prompt:
            raise UnsupportedFormat("seed-coder multi-region markers: Zed's zeta2_1 / V0306+ formats")
        if Z_SEPARATOR + Z_MIDDLE in prompt:
            return "zeta2"
        raise UnsupportedFormat("seed-coder markers without a <<<<<<< CURRENT … ======= region")
    if FIM_PREFIX in prompt or FIM_MIDDLE in prompt:
        if MARKER_TAG in prompt:
            raise UnsupportedFormat("qwen multi-region markers: Zed's V0608QwenMultiRegions format")
        if FIM_MIDDLE + Z_CURRENT in prompt and prompt.endswith(Z_SEPARATOR):
            return "v0120"
        if Z_SEPARATOR + FIM_SUFFIX in prompt and Z_CURRENT in prompt:
            return "v0131"
        if FIM_MIDDLE + "current\n" in prompt:
            raise UnsupportedFormat("Zed's V0112 / V0113 / V0114 editable-region formats")
        if FIM_PREFIX in prompt and FIM_MIDDLE in prompt and FIM_SUFFIX in prompt:
            return "qwen"
        raise UnsupportedFormat("qwen markers in an unknown layout (hashline or variable-edit?)")
    for name, (begin, hole, end) in FIM_MARKERS.items():
        if begin in prompt and hole in prompt and end in prompt:
            return name
    if prompt.startswith(CODESTRAL_SUFFIX) and CODESTRAL_PREFIX in prompt:
        return "codestral"
    if prompt.startswith("### Instruction:") and Z1_START in prompt and Z1_EXCERPT in prompt:
        return "zeta"
    raise UnsupportedFormat("no known markers: neither a fill-in-the-middle nor an edit prompt")


def parse_prompt(prompt: str) -> ZedPrompt:
    """Any supported layout → ZedPrompt (raises PromptError / UnsupportedFormat)."""
    fmt = detect_format(prompt)
    if fmt == "qwen":
        return ZedPrompt(fmt, parse_qwen(prompt))
    if fmt == "zeta2":
        return ZedPrompt(fmt, parse_zeta2(prompt))
    if fmt in ("v0131", "v0120"):
        edit, prefill = parse_merge_markers(prompt, fmt)
        return ZedPrompt(fmt, edit, prefill)
    if fmt == "zeta":
        edit, added = parse_zeta1(prompt)
        return ZedPrompt(fmt, edit, trailing_newline_added=added)
    return ZedPrompt(fmt, parse_fim(prompt, fmt))


# ---- FIM layouts -----------------------------------------------------------------------------------
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


def parse_fim(prompt: str, fmt: str) -> FimPrompt:
    """The other FIM layouts Zed's fim.rs writes (prefix-suffix-middle, or codestral's suffix first)."""
    if fmt == "qwen":
        return parse_qwen(prompt)
    if fmt == "codestral":
        j = prompt.find(CODESTRAL_PREFIX)
        return FimPrompt(prefix=prompt[j + len(CODESTRAL_PREFIX):], suffix=prompt[len(CODESTRAL_SUFFIX):j])
    begin, hole, end = FIM_MARKERS[fmt]
    i = prompt.find(begin)
    j = prompt.find(hole, i + len(begin))
    k = prompt.rfind(end)
    if i < 0 or j < 0 or k < j + len(hole):
        raise PromptError(f"{fmt} prompt must be {begin}{{prefix}}{hole}{{suffix}}{end}")
    return FimPrompt(prefix=prompt[i + len(begin):j], suffix=prompt[j + len(hole):k])


# ---- edit layouts ----------------------------------------------------------------------------------
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


def _context(chunks: list[str], history_name: str) -> tuple[tuple[Section, ...], tuple[str, ...]]:
    """``{name}\\n{text}`` chunks (split on the file marker) → related-file sections and history diffs."""
    sections: list[Section] = []
    history: tuple[str, ...] = ()
    for chunk in chunks:
        name, _, text = chunk.partition("\n")
        if history_name == Z_HISTORY and text.endswith("\n\n"):  # seed-coder: a blank line ends a section
            text = text[:-1]
        if name.strip() == history_name:
            history += split_diffs(text)
        elif name.strip() or text.strip():
            sections.append(Section(kind="related", path=name.strip(), text=text))
    return tuple(sections), history


def _region(marked: str) -> tuple[str, int]:
    cursor = marked.find(Z_CURSOR)
    return marked.replace(Z_CURSOR, ""), max(cursor, 0)


def parse_zeta2(prompt: str) -> EditPrompt:
    """A seed-coder zeta2 prompt → EditPrompt (related files as sections, diffs as history)."""
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
    chunks = body[:c].split(Z_FILENAME)
    if chunks[0].strip() or len(chunks) < 2:
        raise PromptError("zeta2 prompt must name the current file with <filename>{path}\\n before the region")
    path, _, before = chunks[-1].partition("\n")
    sections, history = _context(chunks[1:-1], Z_HISTORY)
    region, cursor = _region(body[c + len(Z_CURRENT):end])
    return EditPrompt(before=before, region=region, after=after, cursor=cursor, path=path.strip(),
                      history=history, sections=sections)


def parse_merge_markers(prompt: str, fmt: str = "v0131") -> tuple[EditPrompt, str]:
    """V0131GitMergeMarkersPrefix / V0211Prefill (``fmt`` v0131) or V0120GitMergeMarkers (v0120) →
    (EditPrompt, prefill)."""
    m = prompt.rfind(FIM_MIDDLE)
    if fmt == "v0120":
        s = prompt.rfind(FIM_SUFFIX, 0, m)
        f = prompt.rfind(FIM_PREFIX, 0, s)
        if min(m, s, f) < 0 or not prompt.startswith(Z_CURRENT, m + len(FIM_MIDDLE)):
            raise PromptError("V0120 prompt must be <|fim_prefix|>{before}<|fim_suffix|>{after}<|fim_middle|>"
                              "<<<<<<< CURRENT\\n{region}=======\\n")
        before, after = prompt[f + len(FIM_PREFIX):s], prompt[s + len(FIM_SUFFIX):m]
        marked, prefill = prompt[m + len(FIM_MIDDLE) + len(Z_CURRENT):-len(Z_SEPARATOR)], ""
    else:
        s = prompt.rfind(Z_SEPARATOR + FIM_SUFFIX, 0, m)
        c = prompt.rfind(Z_CURRENT, 0, max(s, 0))
        f = prompt.rfind(FIM_PREFIX, 0, max(c, 0))
        if min(m, s, c, f) < 0:
            raise PromptError("V0131 prompt must be <|fim_prefix|>{before}<<<<<<< CURRENT\\n{region}=======\\n"
                              "<|fim_suffix|>{after}<|fim_middle|>")
        before, marked = prompt[f + len(FIM_PREFIX):c], prompt[c + len(Z_CURRENT):s]
        after, prefill = prompt[s + len(Z_SEPARATOR) + len(FIM_SUFFIX):m], prompt[m + len(FIM_MIDDLE):]
    chunks = prompt[:f].split(FILE_SEP)
    if chunks[0].strip() or len(chunks) < 2:
        raise PromptError("the prompt must name the current file with <|file_sep|>{path}\\n before <|fim_prefix|>")
    sections, history = _context(chunks[1:-1], V_HISTORY)
    region, cursor = _region(marked)
    return EditPrompt(before=before, region=region, after=after, cursor=cursor, path=chunks[-1].strip(),
                      history=history, sections=sections), prefill


_Z1_EVENT = re.compile(r"User edited (.+?):\n```diff\n(.*?)\n```", re.S)


def parse_zeta1(prompt: str) -> tuple[EditPrompt, bool]:
    """zeta1's instruction prompt → (EditPrompt, whether the region got back its final newline)."""
    x = prompt.find(Z1_EXCERPT)
    r = prompt.rfind(Z1_RESPONSE)
    if x < 0 or r < x:
        raise PromptError("zeta prompt must have ### User Excerpt: ```{path}\\n…\\n``` and ### Response:")
    events = prompt[:x]
    history = tuple(f"--- a/{p}\n+++ b/{p}\n{d.rstrip(chr(10))}\n" for p, d in _Z1_EVENT.findall(events))
    path, _, body = prompt[x + len(Z1_EXCERPT):r].partition("\n")
    if body.startswith(Z1_SOF + "\n"):
        body = body[len(Z1_SOF) + 1:]
    i = body.find(Z1_START + "\n")
    j = body.rfind("\n" + Z1_END)
    if i < 0 or j < i:
        raise PromptError("zeta prompt must mark the region <|editable_region_start|>\\n…\\n<|editable_region_end|>")
    before, after = body[:i], body[j + 1 + len(Z1_END):]
    region, cursor = _region(body[i + len(Z1_START) + 1:j].replace(Z1_CURSOR, Z_CURSOR))
    added = after.startswith("\n") and not region.endswith("\n")
    if added:  # the region is whole lines: it owns the newline before the end marker
        region, after = region + "\n", after[1:]
    return EditPrompt(before=before, region=region, after=after, cursor=cursor, path=path.strip(),
                      history=history), added


# ---- replies ---------------------------------------------------------------------------------------
def zeta2_reply(new_region: str, old_region: str) -> str:
    """The reply Zed expects for the merge-marker formats: the whole new region + ``>>>>>>> UPDATED\\n``.

    A whitespace-only rewrite of a non-blank region is treated as "no edit" (the region comes back
    unchanged), and a dropped final newline is restored, so a weak model never deletes the region.
    """
    new = new_region.replace(Z_UPDATED.rstrip("\n"), "")
    if not new.strip() and old_region.strip():
        new = old_region
    if old_region.endswith("\n") and not new.endswith("\n"):
        new += "\n"
    return new + Z_UPDATED


def edit_reply(zp: ZedPrompt, new_region: str | None) -> str:
    """The ``choices[0].text`` for an edit layout (``new_region`` None: no edit, the region unchanged)."""
    assert isinstance(zp.prompt, EditPrompt)
    old = zp.prompt.region
    if zp.format == "zeta":
        new = old if new_region is None or (not new_region.strip() and old.strip()) else new_region
        if zp.trailing_newline_added:
            new = new[:-1] if new.endswith("\n") else new
        return new
    text = zeta2_reply(old if new_region is None else new_region, old)
    if zp.prefill:  # Zed puts the prefill before our reply: a rewrite must keep it, else no edit
        text = text if text.startswith(zp.prefill) else zeta2_reply(old, old)
        text = text[len(zp.prefill):]
    return text


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
