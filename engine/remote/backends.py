"""Request bodies and answer parsing per backend kind (pure functions: no I/O).

``edit-server``  ``POST /v1/engine/complete`` of another ``edit-server http``: the typed prompt
                 (sections, history, path) as JSON, the result with per-token confidences.
``openai``       ``POST /v1/completions`` with the FIM prompt written in the model's own format (or
                 ``prompt`` + ``suffix`` fields), ``logprobs`` asked for the gate; next edit through
                 ``POST /v1/chat/completions`` with a Mercury-Edit-style user message.
``sglang``       SGLang's native ``POST /generate`` (``return_logprob``) for FIM formats; chat formats
                 and next edit through its OpenAI-compatible ``/v1/chat/completions``.

Every parser returns a :class:`GenerateResult`; a body it cannot read raises :class:`RemoteError`.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict
from typing import Any, get_args

from engine.remote.transport import RemoteError
from engine.templates import EditPrompt, FimPrompt, Section
from engine.types import FinishReason, GenerateResult

# (prefix, suffix, middle, file separator or "", stop strings) per FIM format
FIM_FORMATS: dict[str, tuple[str, str, str, str, tuple[str, ...]]] = {
    "qwen": ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>",
             ("<|endoftext|>", "<|file_sep|>", "<|fim_pad|>", "<|repo_name|>", "<|im_end|>")),
    "starcoder": ("<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<file_sep>",
                  ("<|endoftext|>", "<file_sep>", "<fim_pad>")),
    "codellama": ("<PRE> ", " <SUF>", " <MID>", "", ("<EOT>", "</s>")),
    "deepseek": ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>", "", ("<｜end▁of▁sentence｜>", "<|EOT|>")),
}
FENCE = re.compile(r"```[^\n]*\n(.*?)(?:\n?```|\Z)", re.S)
CURSOR = "<|cursor|>"
FIM_INSTRUCTION = ("You complete code. Reply with only the code that goes at {cursor} in the file below, "
                   "in one ``` fence, nothing else.")
EDIT_INSTRUCTION = ("You predict the user's next edit. Rewrite the code between <|code_to_edit|> and "
                    "<|/code_to_edit|> as the user will most likely change it, given the recent edits. "
                    "Reply with only the rewritten code in one ``` fence.")


# ---- edit-server (native) -----------------------------------------------------------------------
def _sections(sections: tuple[Section, ...]) -> list[dict[str, str]]:
    return [asdict(s) for s in sections]


def native_body(prompt: FimPrompt | EditPrompt, *, max_tokens: int = 0, single_line: bool = False,
                key: str = "", model: str = "") -> dict[str, Any]:
    p = asdict(prompt)
    p["history"], p["sections"] = list(prompt.history), _sections(prompt.sections)
    body: dict[str, Any] = {"kind": "infill" if isinstance(prompt, FimPrompt) else "rewrite", "prompt": p,
                            "key": key}
    if isinstance(prompt, FimPrompt):
        body.update(maxTokens=max_tokens, singleLine=single_line)
    if model:
        body["model"] = model
    return body


def _ints(v: Any) -> list[int]:
    return [int(x) for x in v] if isinstance(v, list) else []


def native_result(body: dict[str, Any]) -> GenerateResult:
    try:
        text = body["text"]
        if not isinstance(text, str):
            raise TypeError("text")
        conf = [min(1.0, max(0.0, float(c))) for c in body.get("confidences") or []]
        finish = body.get("finishReason") or "end"
        return GenerateResult(text=text, tokens=_ints(body.get("tokens")), confidences=conf,
                              steps=int(body.get("steps") or 0), forwards=int(body.get("forwards") or 0),
                              prompt_tokens=int(body.get("promptTokens") or 0),
                              cached_tokens=int(body.get("cachedTokens") or 0),
                              finish_reason=finish if finish in get_args(FinishReason) else "end",
                              timings={k: float(v) for k, v in (body.get("timings") or {}).items()})
    except (KeyError, TypeError, ValueError) as e:
        raise RemoteError(f"unexpected answer from the edit-server route ({e})") from None


# ---- prompts for FIM / chat models -------------------------------------------------------------
def fim_text(prompt: FimPrompt, fmt: str) -> str:
    """The FIM prompt in a model's own format; context sections (repo-level file separator formats
    only) come first as files, then the current file's header."""
    pre, suf, mid, sep, _stops = FIM_FORMATS[fmt]
    head = ""
    if sep:
        head = "".join(f"{sep}{s.path}\n{s.text}\n" for s in prompt.sections if s.path)
        if prompt.path or head:
            head += f"{sep}{prompt.path}\n"
    return f"{head}{pre}{prompt.prefix}{suf}{prompt.suffix}{mid}"


def _snippets(sections: tuple[Section, ...]) -> str:
    if not sections:
        return ""
    inner = "".join(f"<|recently_viewed_code_snippet|>\ncode_snippet_file_path: {s.path}\n{s.text}\n"
                    "<|/recently_viewed_code_snippet|>\n" for s in sections)
    return f"<|recently_viewed_code_snippets|>\n{inner}<|/recently_viewed_code_snippets|>\n\n"


def _history(history: tuple[str, ...]) -> str:
    if not history:
        return ""
    diffs = "".join(d if d.endswith("\n") else d + "\n" for d in history)
    return f"\n\n<|edit_diff_history|>\n{diffs}<|/edit_diff_history|>"


def edit_message(p: EditPrompt) -> str:
    """The Mercury Edit user message (the shape ``edit-server http``'s ``/v1/edit/completions`` and
    Inception's API read): snippets, the current file with the marked region and cursor, the diffs."""
    region = p.region[: p.cursor] + CURSOR + p.region[p.cursor:]
    nl = "" if region.endswith("\n") else "\n"
    return (f"{_snippets(p.sections)}<|current_file_content|>\ncurrent_file_path: {p.path}\n"
            f"{p.before}<|code_to_edit|>\n{region}{nl}<|/code_to_edit|>\n{p.after}\n<|/current_file_content|>"
            f"{_history(p.history)}")


def fim_message(p: FimPrompt) -> str:
    context = "".join(f"File {s.path}:\n```\n{s.text}\n```\n\n" for s in p.sections if s.path)
    return f"{context}File {p.path or 'current'}:\n```\n{p.prefix}{CURSOR}{p.suffix}\n```"


def chat_body(system: str, user: str, model: str, max_tokens: int, stop: list[str] | None = None
              ) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "system", "content": system},
                                                          {"role": "user", "content": user}],
                            "max_tokens": max_tokens, "temperature": 0, "stream": False, "logprobs": True}
    if stop:
        body["stop"] = stop
    return body


def completions_body(prompt: FimPrompt, fmt: str, model: str, max_tokens: int, single_line: bool
                     ) -> dict[str, Any]:
    stops = list(FIM_FORMATS[fmt][4]) if fmt in FIM_FORMATS else []
    if single_line:
        stops.append("\n")
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "temperature": 0, "stream": False,
                            "logprobs": 1, "stop": stops[:4] if fmt == "suffix" else stops}
    if fmt == "suffix":
        body.update(prompt=prompt.prefix, suffix=prompt.suffix)
    else:
        body["prompt"] = fim_text(prompt, fmt)
    return body


def generate_body(prompt: FimPrompt, fmt: str, max_tokens: int, single_line: bool) -> dict[str, Any]:
    """SGLang's native ``/generate``."""
    stops = list(FIM_FORMATS[fmt][4]) + (["\n"] if single_line else [])
    return {"text": fim_text(prompt, fmt), "return_logprob": True,
            "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0, "stop": stops}}


# ---- answers ------------------------------------------------------------------------------------
def _confidences(logprobs: Any) -> list[float]:
    """exp(logprob) per generated token, from either OpenAI shape (completions' ``token_logprobs``,
    chat's ``content[].logprob``) or SGLang's ``output_token_logprobs`` ([logprob, id, text] rows)."""
    vals: list[Any] = []
    if isinstance(logprobs, dict):
        if isinstance(logprobs.get("token_logprobs"), list):
            vals = logprobs["token_logprobs"]
        elif isinstance(logprobs.get("content"), list):
            vals = [c.get("logprob") for c in logprobs["content"] if isinstance(c, dict)]
    elif isinstance(logprobs, list):
        vals = [row[0] if isinstance(row, list | tuple) and row else row for row in logprobs]
    out = []
    for v in vals:
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            out.append(min(1.0, math.exp(min(0.0, v))))
    return out


def _result(text: str, confidences: list[float], finish: str, prompt_tokens: int, completion: int
            ) -> GenerateResult:
    n = len(confidences) or completion or len(text)
    if not confidences:  # the server sent no logprobs: the gate keeps only its filters (docs/DEPLOY.md)
        confidences = [1.0] * n
    return GenerateResult(text=text, tokens=[0] * n, confidences=confidences, steps=1, forwards=1,
                          prompt_tokens=prompt_tokens, cached_tokens=0,
                          finish_reason="length" if finish == "length" else "end")


def single_line_cut(r: GenerateResult) -> GenerateResult:
    """One line: everything after the first newline goes (servers may ignore ``stop``)."""
    nl = r.text.find("\n")
    if nl >= 0:
        r.text = r.text[:nl]
        r.finish_reason = "newline"
    return r


def completion_result(body: dict[str, Any]) -> GenerateResult:
    try:
        choice = body["choices"][0]
        text = choice["text"]
        if not isinstance(text, str):
            raise TypeError("text")
    except (KeyError, IndexError, TypeError) as e:
        raise RemoteError(f"unexpected completions answer ({type(e).__name__}: {e})") from None
    usage = body.get("usage") or {}
    return _result(text, _confidences(choice.get("logprobs")), str(choice.get("finish_reason") or ""),
                   int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))


def chat_text(body: dict[str, Any]) -> tuple[str, GenerateResult]:
    """(the code inside the answer's fence, or the whole answer, and the result around it)."""
    try:
        choice = body["choices"][0]
        content = choice["message"]["content"]
        if not isinstance(content, str):
            raise TypeError("content")
    except (KeyError, IndexError, TypeError) as e:
        raise RemoteError(f"unexpected chat answer ({type(e).__name__}: {e})") from None
    m = FENCE.search(content)
    code = m.group(1) if m else content
    usage = body.get("usage") or {}
    r = _result(code, _confidences(choice.get("logprobs")), str(choice.get("finish_reason") or ""),
                int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
    return code, r


def generate_result(body: dict[str, Any]) -> GenerateResult:
    try:
        text = body["text"]
        if not isinstance(text, str):
            raise TypeError("text")
    except (KeyError, TypeError) as e:
        raise RemoteError(f"unexpected /generate answer ({type(e).__name__}: {e})") from None
    meta = body.get("meta_info") or {}
    finish = meta.get("finish_reason")
    finish = finish.get("type", "") if isinstance(finish, dict) else str(finish or "")
    return _result(text, _confidences(meta.get("output_token_logprobs")), finish,
                   int(meta.get("prompt_tokens") or 0), int(meta.get("completion_tokens") or 0))
