"""Engine factories for e2e tests (EDIT_SERVER_ENGINE_FACTORY=tests.e2e.fake_engines:<name>).

Both wrap the real tiny-random Engine (so prompts are rendered, steps run and AbortSignal is honoured);
``slow`` sleeps at every denoising step so supersede / cancellation are observable deterministically,
``scripted`` replaces the (garbage) random output with a fixed completion / edit so items can be checked.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from engine.api import OneByOne

STEP_S = 0.1


class _Wrapped(OneByOne):
    label = "test engine"

    def __init__(self, eng: Any) -> None:
        self._eng = eng
        self.tokenizer, self.args = eng.tokenizer, eng.args
        self.info = replace(eng.info, label=self.label)

    def _on_step(self, _ev: Any) -> None:
        pass

    def infill(self, prompt: Any, **kw: Any) -> Any:
        return self._eng.infill(prompt, **{**kw, "on_step": self._on_step})

    def rewrite(self, prompt: Any, **kw: Any) -> Any:
        return self._eng.rewrite(prompt, **{**kw, "on_step": self._on_step})


class Slow(_Wrapped):
    label = "slow test engine"

    def _on_step(self, _ev: Any) -> None:
        time.sleep(STEP_S)


class Scripted(_Wrapped):
    """FIM -> "a + b" (confidence 0.8); edit -> region with "w * w" replaced by "w * h"."""

    label = "scripted test engine"

    def infill(self, prompt: Any, **kw: Any) -> Any:
        r = super().infill(prompt, **kw)
        if not r.aborted:
            r.text, r.confidences = "a + b", [0.8] * 3
        return r

    def rewrite(self, prompt: Any, **kw: Any) -> Any:
        r = super().rewrite(prompt, **kw)
        if not r.aborted:
            r.text, r.confidences = prompt.region.replace("w * w", "w * h"), [0.9] * 4
            r.changed = None  # the scripted text is not the model's: no changed-token confidences
        return r


class ScriptedSplit(Scripted):
    """Like ``scripted``, but the FIM tokens are "a + b" followed by the first byte of "é": a UTF-8
    character split by the canvas end, decoded by the engine's own tokenizer (tiny-random: byte level)."""

    label = "scripted split-utf8 test engine"

    def infill(self, prompt: Any, **kw: Any) -> Any:
        r = _Wrapped.infill(self, prompt, **kw)
        if not r.aborted:
            tok = self.tokenizer
            r.tokens = tok.encode("a + b") + tok.encode("é")[:1]
            r.text, r.confidences = tok.decode_content(r.tokens), [0.8] * len(r.tokens)
        return r


class Sections(_Wrapped):
    """FIM -> the ``*_MARK`` words of the prompt's context sections, sorted ("none" without any): what
    reached the prompt from other files, checked through the real server."""

    label = "sections test engine"
    with_path = False  # also the path the prompt names the document by (" @src/main.py")

    def infill(self, prompt: Any, **kw: Any) -> Any:
        import re

        r = super().infill(prompt, **kw)
        if not r.aborted:
            marks = sorted(set(re.findall(r"[A-Z]+_MARK", "".join(s.text for s in prompt.sections))))
            r.text = (" ".join(marks) or "none") + (f" @{prompt.path}" if self.with_path else "")
            r.confidences = [0.9] * len(r.text)
        return r


class Printable(_Wrapped):
    """The real tiny-random engine with every output byte folded into printable ASCII: its random
    weights emit bytes that are not UTF-8, which the tokenizer drops (nothing would show)."""

    label = "printable tiny-random test engine"

    def _fold(self, r: Any) -> Any:
        if not r.aborted:
            tok = self.tokenizer
            special = set(tok.special.as_dict().values())
            r.tokens = [t if t in special else tok.encode(chr(33 + t % 94))[0] for t in r.tokens]
            r.text = tok.decode_content(r.tokens)
        return r

    def infill(self, prompt: Any, **kw: Any) -> Any:
        return self._fold(super().infill(prompt, **kw))

    def rewrite(self, prompt: Any, **kw: Any) -> Any:
        return self._fold(super().rewrite(prompt, **kw))


def _base(spec: str) -> Any:
    from engine import Engine

    return Engine.load("tiny-random" if spec in ("tiny-random", "default") else spec, device="cpu")


def slow(spec: str, device: str) -> Slow:
    return Slow(_base(spec))


def scripted(spec: str, device: str) -> Scripted:
    return Scripted(_base(spec))


def scripted_split(spec: str, device: str) -> ScriptedSplit:
    return ScriptedSplit(_base(spec))


def sections(spec: str, device: str) -> Sections:
    return Sections(_base(spec))


def sections_path(spec: str, device: str) -> Sections:
    eng = Sections(_base(spec))
    eng.with_path = True
    return eng


def printable(spec: str, device: str) -> Printable:
    return Printable(_base(spec))


class Instant(OneByOne):
    """No model work at all (fuzzing the protocol and document sync fast): FIM → "pass", edit → the
    region unchanged. Tokenizer and shape of the real tiny-random model (the context builder counts)."""

    label = "instant test engine"

    def __init__(self, eng: Any) -> None:
        from engine.types import GenerateResult

        self._result = GenerateResult
        self.tokenizer, self.args = eng.tokenizer, eng.args
        self.info = replace(eng.info, label=self.label)

    def _out(self, text: str, abort: Any) -> Any:
        aborted = abort is not None and abort.aborted
        return self._result(text="" if aborted else text, tokens=[] if aborted else [1] * len(text),
                            confidences=[] if aborted else [0.9] * len(text), steps=1, forwards=1,
                            prompt_tokens=1, cached_tokens=0, finish_reason="aborted" if aborted else "end")

    def infill(self, prompt: Any, **kw: Any) -> Any:
        return self._out("pass", kw.get("abort"))

    def rewrite(self, prompt: Any, **kw: Any) -> Any:
        return self._out(prompt.region, kw.get("abort"))


def instant(spec: str, device: str) -> Instant:
    return Instant(_base(spec))
