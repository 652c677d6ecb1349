"""The engine serves each model in its own prompt format (engine.calls over engine.formats): native
prompts unchanged, in-place canvases for bidirectional models, the format's stop tokens, clear errors."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine import EditPrompt, Engine, FimPrompt
from engine.api import InfillCall, RewriteCall
from engine.calls import call_request
from engine.decoding.sampler import Denoiser
from engine.formats import FormatNotSupported, for_model
from engine.formats.native import NativeFormat
from engine.templates import edit_canvas_length, render_edit, render_fim
from engine.types import CanvasSpec, SamplerConfig
from tests.dllm_util import DREAM, DREAM_INSTRUCT, ForwardCounter, scripted_engine, tid, tiny_engine

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FIM = FimPrompt("def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n", path="m.py",
                history=("--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-x\n+y\n",))
EDIT = EditPrompt("import os\n", "def f(x):\n    return x\n", "\nf(1)\n", cursor=9, path="m.py")


def test_native_prompts_are_byte_identical() -> None:
    """Our default layout (no registry entry) renders exactly engine.templates, canvas as before; a prompt ending
    inside a word leaves the line's last piece to token healing (tests/test_native_heal.py), one ending in a
    space typed after text keeps it (tests/test_typed_space.py)."""
    eng = Engine.load("tiny-random", device="cpu")
    assert eng.format.name == "native" and eng.info["format"] == "native"
    b = eng.block_size
    start = replace(FIM, prefix=FIM.prefix + "x\n")
    for max_tokens in (5, 8, 20):
        req = call_request(eng, InfillCall(FIM, max_tokens))
        assert req.prompt_tokens == render_fim(eng.tokenizer, FIM).ids
        assert req.heal == "" and call_request(eng, InfillCall(start, max_tokens)).heal == ""
        word = replace(FIM, prefix=FIM.prefix[:-1])  # inside the word: `` return`` healed
        assert call_request(eng, InfillCall(word, max_tokens)).heal == " return"
        assert call_request(eng, InfillCall(start, max_tokens)).prompt_tokens == render_fim(eng.tokenizer, start).ids
        assert (req.canvas.length, req.canvas.keep) == (-(-max_tokens // b) * b, max_tokens)
        assert req.after == [] and req.stop_ids == frozenset() and req.expand_id is None
    req = call_request(eng, RewriteCall(EDIT))
    assert req.prompt_tokens == render_edit(eng.tokenizer, EDIT).ids
    assert req.canvas.length == edit_canvas_length(len(eng.tokenizer.encode(EDIT.region)), block_size=b)
    r = eng.infill(FIM, max_tokens=8)  # the trailing space as typed: nothing healed
    assert r.prompt_tokens == len(render_fim(eng.tokenizer, FIM).ids) and r.lead_tokens == []
    # a bidirectional model without a registry entry: native too, canvas in the sampler's blocks
    bi = tiny_engine({}, tok=eng.tokenizer)
    req = call_request(bi, RewriteCall(EDIT, sampler=SamplerConfig(block_size=16)))
    assert req.prompt_tokens == render_edit(bi.tokenizer, EDIT).ids
    assert req.canvas.length == edit_canvas_length(len(bi.tokenizer.encode(EDIT.region)), block_size=16)


def test_block_size_comes_from_the_model_or_the_call() -> None:
    """No literal block size in the engine: the native edit canvas is rounded to the model's blocks (or
    the call's), and the denoiser and the canvas rule take it from their caller."""
    eng = Engine.load("tiny-random", device="cpu")
    n = len(eng.tokenizer.encode(EDIT.region))
    for b in (8, 16, 48):
        canvas = for_model(eng.tokenizer, {}, block_size=b).edit(EDIT).canvas
        assert canvas == edit_canvas_length(n, block_size=b) and canvas % b == 0
    assert for_model(eng.tokenizer, {}, block_size=8).edit(EDIT, 48).canvas == edit_canvas_length(n, block_size=48)
    assert eng.format.edit(EDIT).canvas == edit_canvas_length(n, block_size=eng.args.block_size)
    with pytest.raises(ValueError, match="block size"):
        NativeFormat(eng.tokenizer).edit(EDIT)
    with pytest.raises(TypeError):
        edit_canvas_length(n)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Denoiser(CanvasSpec(8), SamplerConfig(), mask_id=0, end_ids=())  # type: ignore[call-arg]


def test_bidirectional_model_infills_in_place() -> None:
    """Dream-Coder: ``bos prefix <mask>*n suffix eos`` is the sequence the model sees."""
    eng = tiny_engine(DREAM)
    tok = eng.tokenizer
    assert eng.info["format"] == "infill" and eng.info["regime"] == "bidirectional"
    seen = []
    inner = eng.model.forward
    eng.model.forward = lambda ids, *a, **kw: (seen.append(ids[0].tolist()), inner(ids, *a, **kw))[1]  # type: ignore[method-assign]
    r = eng.infill(FimPrompt("x = ", "\ny = 2\n"), max_tokens=12, sampler=SamplerConfig(block_size=4))
    mask = tok.special.mask
    want = [tid(tok, "<|beginoftext|>"), *tok.encode("x = "), *[mask] * 12, *tok.encode("\ny = 2\n"), tok.special.eos]
    assert seen[0] == want
    assert r.prompt_tokens == len(tok.encode("x = ")) + 1 and r.steps > 0 and mask not in r.tokens
    # later full steps keep the suffix in place after the canvas (block steps: the block only)
    tail = len(tok.encode("\ny = 2\n")) + 1
    full = [s for s in seen if len(s) == len(want)]
    assert len(full) >= 2 and all(s[-tail:] == want[-tail:] for s in full)
    assert all(len(s) == 4 for s in seen if len(s) != len(want))


def test_format_stop_tokens_end_the_output() -> None:
    """Dream-Coder-Instruct ends at ``<|im_end|>`` (a format stop token, not the tokenizer's eos)."""
    tok_holder: dict[str, int] = {}

    def rule(seq: list[int], p: int) -> tuple[int, float]:
        span = p - tok_holder["start"]
        token = tok_holder["im_end"] if span == 2 else tok_holder["a"] + span
        return token, 20.0 - span  # left to right

    eng, _ = scripted_engine(DREAM_INSTRUCT, rule)
    tok = eng.tokenizer
    prefix = "q = "
    tok_holder.update(start=1 + len(tok.encode(prefix)), im_end=tid(tok, "<|im_end|>"), a=tok.encode("a")[0])
    r = eng.infill(FimPrompt(prefix, "\n"), max_tokens=8, sampler=SamplerConfig(strategy="topk"))
    assert r.text == "ab" and r.finish_reason == "end"


def test_unsupported_request_is_a_clear_error_before_any_work() -> None:
    eng = tiny_engine(DREAM)
    count = ForwardCounter(eng)
    with pytest.raises(FormatNotSupported, match="next edits are not supported"):
        eng.complete([InfillCall(FIM, 8), RewriteCall(EDIT)])
    assert count.calls == 0
    assert eng.infill(FIM, max_tokens=4).steps > 0  # still serving
    # an in-place layout on a block-causal model cannot be decoded
    bc = tiny_engine(DREAM, attention="block_causal")
    with pytest.raises(FormatNotSupported, match="bidirectional"):
        bc.infill(FIM, max_tokens=8)
