"""A prefix that ends in whitespace typed after text (``    return ``, ``total = ``) goes to the model as typed,
through every front end alike: the whitespace is not a piece token healing re-chooses (`engine.formats.split_typed`,
`typed_whitespace`), while a prefix ending inside a word still is. Each front end's request is checked by what the
engine is given (its prompt tokens and the piece it heals), on a tiny random model that can heal."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from edit_server.core.settings import Settings
from edit_server.http.app import make_app
from edit_server.serving.pipeline import Pipeline
from engine import Engine, FimPrompt
from engine.calls import FormatRequest
from engine.config import preset
from engine.formats import split_typed, typed_whitespace
from engine.model import Transformer
from engine.templates import in_trained_order, render_fim
from tests.test_native_heal import TOK

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SUFFIX = "\n"
SPACED = ("def add(a, b):\n    return ", "items = [1, 2, 3]\ntotal = ", "return n % 2 == ", "f(a,\t")
WORD = "def add(a, b):\n    return"  # the same line without its trailing space: its last piece is healed


class Recording(Engine):
    """The tiny engine, keeping each request it is given (prompt tokens, the piece to heal)."""

    def __init__(self) -> None:
        args = preset("tiny", vocab_size=TOK.vocab_size, special_tokens=TOK.special.as_dict())
        super().__init__(Transformer(args, init=False).init_random(3), TOK, name="tiny-heal", fast_cpu=False)
        self.seen: list[FormatRequest] = []

    def _run(self, reqs: Sequence[Any], on_step: Sequence[Any]) -> Any:
        self.seen.extend(r for r in reqs if isinstance(r, FormatRequest))
        return super()._run(reqs, on_step)


@pytest.fixture(scope="module")
def eng() -> Recording:
    return Recording()


def as_typed(prefix: str) -> list[int]:
    """The prompt of ``prefix`` with all of it in the prompt (nothing left out for healing)."""
    return render_fim(TOK, in_trained_order(FimPrompt(prefix, SUFFIX))).ids


def check_given(eng: Recording, prefix: str) -> None:
    req = eng.seen[-1]
    assert req.heal == "", prefix
    assert req.prompt_tokens == as_typed(prefix)
    # the prompt ends in the whitespace token as typed (the middle token after it)
    body = TOK.decode(req.prompt_tokens)
    assert prefix.rsplit("\n", 1)[-1] + TOK.decode([req.prompt_tokens[-1]]) in body


def check_word_healed(eng: Recording) -> None:
    req = eng.seen[-1]
    assert req.heal == " return"
    assert req.prompt_tokens == render_fim(TOK, in_trained_order(FimPrompt(WORD[:-len(" return")], SUFFIX))).ids


def test_split_typed_leaves_whitespace_after_text_as_typed() -> None:
    assert split_typed(TOK, "def add(a, b):\n    return ") == ("def add(a, b):\n", "    return ", "")
    assert split_typed(TOK, "x = 1\ntotal = ") == ("x = 1\n", "total = ", "")
    assert split_typed(TOK, "x = 1\ntotal =  ") == ("x = 1\n", "total =  ", "")
    assert split_typed(TOK, "def add(a, b):\n    return") == ("def add(a, b):\n", "   ", " return")
    assert split_typed(TOK, "def f(x):\n    ") == ("def f(x):\n", "", "    ")  # indentation alone: healed
    assert typed_whitespace("x =", " ") and typed_whitespace("f(a,", "\t")
    assert not typed_whitespace("", "    ") and not typed_whitespace("x", "y") and not typed_whitespace("x", "")


def test_engine_infill_gives_the_model_the_prefix_as_typed(eng: Recording) -> None:
    for prefix in SPACED:
        eng.infill(FimPrompt(prefix, SUFFIX), max_tokens=4)
        check_given(eng, prefix)
    eng.infill(FimPrompt(WORD, SUFFIX), max_tokens=4)
    check_word_healed(eng)


async def _post(client: TestClient, route: str, body: dict[str, Any]) -> None:
    r = await client.post(route, json=body)
    assert r.status == 200, await r.text()


def test_http_mercury_fim_and_zed_completions_give_the_model_the_prefix_as_typed(eng: Recording) -> None:
    async def run() -> None:
        app = make_app(Settings(feedback_db=":memory:"), engine=eng)
        async with TestClient(TestServer(app)) as client:
            for prefix in (*SPACED, WORD):
                eng.seen.clear()
                await _post(client, "/v1/fim/completions",
                            {"model": "m", "prompt": prefix, "suffix": SUFFIX, "max_tokens": 4})
                check_word_healed(eng) if prefix == WORD else check_given(eng, prefix)
                eng.seen.clear()
                zed = f"<|fim_prefix|>{prefix}<|fim_suffix|>{SUFFIX}<|fim_middle|>"
                await _post(client, "/v1/completions", {"model": "m", "prompt": zed, "max_tokens": 4})
                check_word_healed(eng) if prefix == WORD else check_given(eng, prefix)

    asyncio.run(run())


def test_the_lsp_pipeline_gives_the_model_the_prefix_as_typed(eng: Recording, tmp_path: Path) -> None:
    settings = Settings(feedback_db=":memory:")
    p = Pipeline(settings, lambda *_: None, [tmp_path], engine=eng)
    try:
        assert p.worker.ready.wait(30)

        async def ask(i: int, prefix: str) -> FormatRequest:
            path = tmp_path / f"m{i}.py"
            p.open_document(path.as_uri(), str(path), prefix + SUFFIX, 1, "python")
            eng.seen.clear()
            await p.inline_completion(path.as_uri(), len(prefix))
            deadline = time.monotonic() + 30
            while not eng.seen and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            return eng.seen[-1]

        for i, prefix in enumerate(SPACED):
            req = asyncio.run(ask(i, prefix))
            # the server's prompt holds its context too: the piece is what shows how the line went in
            assert req.heal == "", prefix
            line = prefix.rsplit("\n", 1)[-1]
            assert TOK.decode(req.prompt_tokens).count(line) >= 1
        req = asyncio.run(ask(len(SPACED), WORD))
        assert req.heal == " return"
    finally:
        p.worker.stop()
        p.worker.join(5)


def test_the_typed_whitespace_is_the_prompts_last_text_before_the_middle(eng: Recording) -> None:
    """The prompt as typed ends with the whitespace's own token, not a token healing chose."""
    prefix = SPACED[0]
    lay = eng.format.fim(FimPrompt(prefix, SUFFIX), 4)
    healed = eng.format.fim(replace(FimPrompt(prefix, SUFFIX), prefix=prefix[:-1]), 4)
    assert lay.heal == "" and healed.heal == " return"
    assert TOK.encode(" ")[0] in lay.before and len(lay.before) > len(healed.before)
