"""How public Mercury Edit clients build their requests and read the answers — transcribed from their
public source, for tests/test_http_mercury.py:

- Continue: ``core/llm/llms/Inception.ts`` (``_streamFim`` posts ``{model, prompt, suffix ("<|endoftext|>"
  when empty), max_tokens, …, stop: [...stop, "\\n\\n", "\\n \\n"], stream: true}`` to ``completions`` and
  reads ``choices[0].text``; ``streamSpecialEndpoint`` posts ``{model, messages, max_tokens, …, stream:
  true}`` to ``edit/completions`` / ``apply/completions`` and concatenates ``choices[0].delta.content``),
  ``core/nextEdit/templating`` (the ``mercury-coder`` template, ``recentlyViewedCodeSnippetsBlock``,
  ``currentFileContentBlock``, ``editHistoryBlock``), ``MercuryCoderNextEditProvider.extractCompletion``;
  the OpenAI-style ``_streamFim`` of other providers reads ``choices[0].delta.content`` from
  ``fim/completions``;
- Zed: ``crates/edit_prediction/src/mercury.rs`` (``build_prompt``, one user message, ``stream: false``,
  ``text_from_response`` then ``strip_prefix("```\\n")`` / ``strip_suffix("\\n```")``, ``"None"`` = none);
- Inception's SDK examples / apply clients: ``<|original_code|>\\n{code}\\n<|/original_code|>\\n\\n
  <|update_snippet|>\\n{snippet}\\n<|/update_snippet|>``, answer in ``choices[0].message.content``.
JSON.stringify drops ``undefined`` members: the dicts below leave those keys out.
"""

from __future__ import annotations

import json
from typing import Any

CURSOR = "<|cursor|>"
MERCURY_SYSTEM_PROMPT = ("You are Mercury, created by Inception Labs. You are an AI Assistant and an expert at "
                         "coding. Your role as an AI assistant is to help developers complete their code tasks "
                         "by assisting in editing specific sections of code marked by the <|code_to_edit|> and "
                         "<|/code_to_edit|> tags.")  # (the first sentences of Continue's MERCURY_SYSTEM_PROMPT)


def continue_fim_body(model: str, prefix: str, suffix: str, max_tokens: int = 150,
                      stop: list[str] | None = None) -> dict[str, Any]:
    return {"model": model, "prompt": prefix, "suffix": "<|endoftext|>" if suffix.strip() == "" else suffix,
            "max_tokens": max_tokens, "temperature": 0.0, "presence_penalty": 1.5,
            "stop": [*(stop or ["<|endoftext|>"]), "\n\n", "\n \n"], "stream": True}


def openai_fim_stream_body(model: str, prefix: str, suffix: str) -> dict[str, Any]:
    """The OpenAI-adapter ``_streamFim`` (Mistral-style ``fim/completions``, reads ``delta.content``)."""
    return {"model": model, "prompt": prefix, "suffix": suffix, "max_tokens": 64, "stream": True}


def _insert_cursor(lines: list[str], line: int, ch: int, token: str) -> list[str]:
    lines = list(lines)
    if 0 <= line < len(lines):
        c = min(max(0, ch), len(lines[line]))
        lines[line] = lines[line][:c] + token + lines[line][c:]
    return lines


def continue_user_prompt(snippets: list[tuple[str, str]], file_path: str, file_text: str, start_line: int,
                         end_line: int, cursor: tuple[int, int], diffs: list[str]) -> str:
    """The ``mercury-coder`` template with Continue's three blocks (diffs as from ``createPatch``: an
    ``Index:`` line and a ``===`` separator first, which ``editHistoryBlock`` drops)."""
    snips = "\n".join("\n".join(["<|recently_viewed_code_snippet|>", f"code_snippet_file_path: {p}", c,
                                 "<|/recently_viewed_code_snippet|>"]) for p, c in snippets)
    lines = _insert_cursor(file_text.split("\n"), cursor[0], cursor[1], CURSOR)
    current = "\n".join([*lines[:start_line], "<|code_to_edit|>", *lines[start_line:end_line + 1],
                         "<|/code_to_edit|>", *lines[end_line + 1:]])
    history = "\n".join("\n".join(d.split("\n")[2:]) for d in diffs)
    return (f"<|recently_viewed_code_snippets|>\n{snips}\n<|/recently_viewed_code_snippets|>\n\n"
            f"<|current_file_content|>\ncurrent_file_path: {file_path}\n{current}\n<|/current_file_content|>\n\n"
            f"<|edit_diff_history|>\n{history}\n<|/edit_diff_history|>\n")


def continue_chat_body(model: str, user: str, stream: bool = True) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "system", "content": MERCURY_SYSTEM_PROMPT},
                                         {"role": "user", "content": user}],
            "max_tokens": 1024, "temperature": 0.0, "stream": stream}


def continue_extract_completion(message: str) -> str:
    """``MercuryCoderProvider.extractCompletion``."""
    start = message.find("```\n") + len("```\n")
    return message[start:message.rfind("\n\n```")]


def zed_mercury_prompt(snippets: list[tuple[str, str]], path: str, before: str, region_before_cursor: str,
                       region_after_cursor: str, after: str, events: list[str]) -> str:
    """``mercury.rs`` ``build_prompt`` (every delimiter carries its own newline)."""
    out = "<|recently_viewed_code_snippets|>\n"
    for p, text in snippets:
        out += f"<|recently_viewed_code_snippet|>\ncode_snippet_file_path: {p}\n{text}<|/recently_viewed_code_snippet|>\n"
    out += "<|/recently_viewed_code_snippets|>\n<|current_file_content|>\n"
    out += f"current_file_path: {path}\n{before}<|code_to_edit|>\n{region_before_cursor}{CURSOR}{region_after_cursor}"
    out += f"<|/code_to_edit|>\n{after}<|/current_file_content|>\n<|edit_diff_history|>\n"
    out += "".join(f"{e}\n" for e in events)
    return out + "<|/edit_diff_history|>\n"


def zed_mercury_body(prompt: str) -> bytes:
    """``open_ai::Request`` as Zed's mercury.rs fills it (empty / None members are not serialised)."""
    return json.dumps({"model": "mercury-coder", "messages": [{"role": "user", "content": prompt}],
                       "stream": False}, separators=(",", ":")).encode()


def zed_read_mercury(body: dict[str, Any]) -> str | None:
    """``text_from_response`` + the fence strip; None = "no prediction"."""
    text = body["choices"][-1]["message"]["content"]
    text = text[4:] if text.startswith("```\n") else text
    text = text[:-4] if text.endswith("\n```") else text
    return None if text == "None" else text


def apply_body(original: str, snippet: str, stream: bool = False) -> dict[str, Any]:
    content = f"<|original_code|>\n{original}\n<|/original_code|>\n\n<|update_snippet|>\n{snippet}\n<|/update_snippet|>"
    out: dict[str, Any] = {"model": "mercury-edit", "messages": [{"role": "user", "content": content}],
                           "max_tokens": 8192, "temperature": 0.0}
    if stream:
        out["stream"] = True
    return out


def sse(raw: bytes) -> list[Any]:
    """``streamSse``: the JSON of every ``data:`` event up to ``[DONE]`` (which must come last)."""
    events: list[Any] = []
    done = False
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), block
        assert not done, "an event after [DONE]"
        data = block[len("data: "):]
        if data == "[DONE]":
            done = True
            continue
        events.append(json.loads(data))
    assert done, "the stream did not end with data: [DONE]"
    return events
