"""What Zed sends to an ``open_ai_compatible_api`` server, and how it reads the answer — a line-by-line
Python transcription of Zed's public source (crates/zeta_prompt: ``format_related_files_within_budget``,
``format_edit_history_within_budget``, ``write_event``, ``v0131_git_merge_markers_prefix``,
``v0211_prefill::get_prefill``, ``seed_coder``, ``zeta1``; crates/edit_prediction: ``fim.rs``
``format_fim_prompt`` / ``get_fim_stop_tokens``, ``zeta.rs`` (``max_tokens = max_output_tokens * 4``,
``prompt + prefill``, ``parse_zeta2_model_output``), ``open_ai_compatible.rs`` (``RawCompletionRequest``
serialised by serde_json: compact, ``temperature`` and ``environment`` skipped when None)).

The budgets are large enough here that nothing is cut, so the budget code paths reduce to these.
The fixtures in tests/fixtures/zed/ are these functions' output, byte for byte (a test checks it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

CURSOR = "<|user_cursor|>"
START, SEPARATOR, END = "<<<<<<< CURRENT\n", "=======\n", ">>>>>>> UPDATED\n"


@dataclass
class Excerpt:
    text: str
    rows: tuple[int, int]


@dataclass
class Related:
    path: str
    excerpts: list[Excerpt]
    max_row: int


@dataclass
class Event:
    path: str
    diff: str  # Zed's hunk text ("@@ … @@\n…")
    predicted: bool = False


@dataclass
class Input:
    path: str
    context: str  # the cursor excerpt's context range
    editable: tuple[int, int]  # byte range of the editable region in ``context`` (ASCII here)
    cursor: int
    events: list[Event] = field(default_factory=list)
    related: list[Related] = field(default_factory=list)


def write_event(e: Event) -> str:
    head = "// User accepted prediction:\n" if e.predicted else ""
    return f"{head}--- a/{e.path}\n+++ b/{e.path}\n{e.diff}"


def edit_history(events: list[Event], marker: str, name: str) -> str:
    return f"{marker}{name}\n" + "".join(write_event(e) for e in events[-6:]) if events else ""


def related_files(files: list[Related], marker: str) -> str:
    out = ""
    for f in files:
        out += f"{marker}{f.path}\n"
        for k, ex in enumerate(f.excerpts):
            out += ex.text
            if not out.endswith("\n"):
                out += "\n"
            nxt = f.excerpts[k + 1].rows[0] if k + 1 < len(f.excerpts) else None
            if ex.rows[1] < (nxt if nxt is not None else f.max_row):
                out += "...\n"
    return out


def _nl(s: str) -> str:
    return s if s.endswith("\n") else s + "\n"


def v0131(i: Input) -> str:
    """``ZetaFormat::V0131GitMergeMarkersPrefix`` (also the V0211Prefill prompt before its prefill)."""
    a, b = i.editable
    c = i.context
    section = f"<|file_sep|>{i.path}\n<|fim_prefix|>{c[:a]}{START}{c[a:i.cursor]}{CURSOR}{c[i.cursor:b]}"
    section = _nl(section) + SEPARATOR + "<|fim_suffix|>" + c[b:]
    section = _nl(section) + "<|fim_middle|>"
    return related_files(i.related, "<|file_sep|>") + edit_history(i.events, "<|file_sep|>", "edit history") + section


def prefill(i: Input) -> str:
    """``v0211_prefill::get_prefill`` (PREFILL_RATIO 0.1)."""
    region = i.context[i.editable[0]:i.editable[1]]
    pre = region[:int(len(region) * 0.1)]
    if "\n" in pre:
        end = pre.rfind("\n") + 1
        while end < len(region) and region[end] == "\n":
            end += 1
        return region[:end]
    return pre[:pre.rfind(" ")] if " " in pre else pre


def seed_coder(i: Input) -> str:
    """``ZetaFormat::V0211SeedCoder`` (``seed_coder::assemble_fim_prompt``)."""
    a, b = i.editable
    c = i.context
    related = related_files(i.related, "<filename>")
    history = edit_history(i.events, "<filename>", "edit_history")
    cursor = _nl(f"<filename>{i.path}\n{c[:a]}{START}{c[a:i.cursor]}{CURSOR}{c[i.cursor:b]}") + SEPARATOR
    return (_nl("<[fim-suffix]>" + c[b:]) + "<[fim-prefix]>" + related + ("\n" if related else "")
            + history + ("\n" if history else "") + cursor + "<[fim-middle]>")


Z1_HEADER = ("### Instruction:\nYou are a code completion assistant and your task is to analyze user edits and then "
             "rewrite an excerpt that the user provides, suggesting the appropriate edits within the excerpt, "
             "taking into account the cursor location.\n\n### User Edits:\n\n")
Z1_END = "<|editable_region_end|>"


def zeta1(i: Input, start_of_file: bool = True) -> str:
    """``zeta1::format_zeta1_from_input`` (context range = the whole ``context``)."""
    a, b = i.editable
    c = i.context
    events = "\n\n".join(f"User edited {e.path}:\n```diff\n{e.diff}\n```" for e in i.events[-6:])
    excerpt = f"```{i.path}\n" + ("<|start_of_file|>\n" if start_of_file else "") + c[:a]
    excerpt += f"<|editable_region_start|>\n{c[a:i.cursor]}<|user_cursor_is_here|>{c[i.cursor:b]}\n{Z1_END}"
    excerpt += c[b:] + "\n```"
    return Z1_HEADER + events + "\n\n### User Excerpt:\n\n" + excerpt + "\n\n### Response:\n"


Z1_STOPS = [Z1_END, Z1_END + "\n", Z1_END + "\n\n", Z1_END + "\n\n\n"]

FIM_STOPS = ["<|endoftext|>", "<|file_separator|>", "<|fim_pad|>", "<|fim_prefix|>", "<|fim_middle|>",
             "<|fim_suffix|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<PRE>", "<SUF>", "<MID>",
             "[PREFIX]", "[SUFFIX]"]


def fim_prompt(fmt: str, prefix: str, suffix: str) -> str:
    """``fim.rs`` ``format_fim_prompt`` by Zed's prompt_format value."""
    return {
        "code_llama": f"<PRE> {prefix} <SUF>{suffix} <MID>",
        "star_coder": f"<fim_prefix>{prefix}<fim_suffix>{suffix}<fim_middle>",
        "deepseek_coder": f"<｜fim▁begin｜>{prefix}<｜fim▁hole｜>{suffix}<｜fim▁end｜>",
        "qwen": f"<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>",
        "code_gemma": f"<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>",
        "codestral": f"[SUFFIX]{suffix}[PREFIX]{prefix}",
        "glm": f"<|code_prefix|>{prefix}<|code_suffix|>{suffix}<|code_middle|>",
    }[fmt]


def body(model: str, prompt: str, max_tokens: int, stop: list[str]) -> bytes:
    """``serde_json::to_string(&RawCompletionRequest {..})``: field order, compact, UTF-8 unescaped."""
    return json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "stop": stop},
                      ensure_ascii=False, separators=(",", ":")).encode()


def read_zeta2_reply(text: str, prefill_text: str = "") -> str:
    """``parse_zeta2_model_output`` for the merge-marker formats: prefill + reply, minus the end marker and
    the cursor marker = the new editable region."""
    out = prefill_text + text
    out = out[:-len(END)] if out.endswith(END) else out
    return out.replace(CURSOR, "")


def read_zeta1_reply(text: str) -> str:
    """``zeta1::clean_zeta1_model_output`` (the server already cut at the end-marker stop)."""
    content = text.replace("<|user_cursor_is_here|>", "")
    marker = "<|editable_region_start|>"
    s = content.find(marker)
    start = 0 if s < 0 else s + len(marker) + (content[s + len(marker):s + len(marker) + 1] == "\n")
    e = content.find(Z1_END)
    end = len(content) if e < 0 else e - (e > 0 and content[e - 1] == "\n")
    return content[start:end] if start <= end else ""


def fim_clean(text: str, suffix: str) -> str:
    """``clean_fim_completion`` (cut at any end token); the suffix-overlap trim is left out."""
    for token in FIM_STOPS:
        if token in text:
            text = text[:text.find(token)]
    return text


# ---- the example every fixture is built from ---------------------------------------------------------
CALC = ("import math\n\n\ndef add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    # product of two numbers\n"
        "    result = a\n    return result\n\n\nprint(mul(2, 3))\n")
_REGION = "def mul(a, b):\n    # product of two numbers\n    result = a\n    return result\n"
_A = CALC.index(_REGION)
EXAMPLE = Input(
    path="src/calc.py", context=CALC, editable=(_A, _A + len(_REGION)),
    cursor=CALC.index("result = a") + len("result = a"),
    events=[Event("src/calc.py", "@@ -4,2 +4,2 @@\n def add(a, b):\n-    pass\n+    return a + b\n"),
            Event("src/calc.py", "@@ -9,1 +9,1 @@\n-def mul(a):\n+def mul(a, b):\n", predicted=True)],
    related=[Related("src/util.py", [Excerpt("def helper():\n    return 1\n", (0, 2)),
                                     Excerpt("def other():\n    return 2", (10, 12))], 30)],
)
NEW_REGION = "def mul(a, b):\n    # product of two numbers\n    result = a * b\n    return result\n"
MODEL = "edit-server"


def fixtures() -> dict[str, bytes]:
    """tests/fixtures/zed/NAME.json: the request bodies Zed sends for EXAMPLE (max_output_tokens 256)."""
    i = EXAMPLE
    prefix, suffix = CALC[:i.cursor], CALC[i.cursor:]
    return {
        "v0131": body(MODEL, v0131(i), 256 * 4, []),
        "v0211_prefill": body(MODEL, v0131(i) + prefill(i), 256 * 4, []),
        "v0211_seed_coder": body(MODEL, seed_coder(i), 256 * 4, []),
        "zeta1": body(MODEL, zeta1(i), 256 * 4, Z1_STOPS),
        "fim_qwen": body(MODEL, fim_prompt("qwen", prefix, suffix), 256, FIM_STOPS),
    }
