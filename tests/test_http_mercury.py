"""Mercury Edit compatible API: the request shapes public clients send (tests/mercury_clients.py),
answers parsed the way those clients parse them; stream and diffusing modes; deterministic apply."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from edit_server.core.settings import Gate, Settings
from edit_server.http import mercury as m
from edit_server.http.app import make_app
from edit_server.http.zed import PromptError
from engine.templates import EditPrompt, FimPrompt
from engine.textdiff import unified_diff
from engine.types import StepEvent
from tests import mercury_clients as mc
from tests.test_http import FakeEngine, _result

FILE = "import os\n\n\ndef mul(a, b):\n    result = a\n    return result\n\n\nprint(mul(2, 3))\n"
OLD_LINES = ["def mul(a, b):", "    result = a", "    return result"]
NEW_REGION = "def mul(a, b):\n    result = a * b\n    return result\n"
DIFF = unified_diff("src/calc.py", "def mul(a):\n", "def mul(a, b):\n")


class SteppingEngine(FakeEngine):
    """A fake that reports three denoising states through ``on_step`` before answering."""

    frames = ("░░░░", "a░░░", "a * b")

    def _run(self, kind: str, prompt: Any, kw: dict[str, Any], text: str) -> Any:
        on_step = kw.get("on_step")
        for n, f in enumerate(self.frames if on_step else ()):
            on_step(StepEvent(step=n + 1, block=0, canvas=[], text=f, unmasked=1))
        return super()._run(kind, prompt, kw, text)


@pytest.fixture
async def merc() -> AsyncIterator[tuple[TestClient, SteppingEngine]]:
    eng = SteppingEngine()
    eng.fim_text = "a * b"
    eng.edit_text = NEW_REGION
    app = make_app(Settings(feedback_db=":memory:"), engine=eng)
    async with TestClient(TestServer(app, handler_cancellation=True)) as client:
        yield client, eng


def continue_next_edit_prompt() -> str:
    return mc.continue_user_prompt(
        snippets=[("src/util.py", "def helper():\n    return 1")], file_path="src/calc.py",
        file_text=FILE, start_line=3, end_line=5, cursor=(4, len("    result = a")),
        diffs=["Index: src/calc.py\n===================================================================\n" + DIFF])


# ---- pure parsing ----------------------------------------------------------------------------------------
def test_parse_continue_next_edit_prompt() -> None:
    p = m.parse_edit(continue_next_edit_prompt())
    assert p.path == "src/calc.py"
    assert p.region == "\n".join(OLD_LINES) + "\n"
    assert p.region[:p.cursor] == "def mul(a, b):\n    result = a"
    assert p.before + p.region + p.after == FILE
    assert [(s.path, s.text) for s in p.sections] == [("src/util.py", "def helper():\n    return 1\n")]
    assert p.history == (DIFF,)


def test_parse_zed_mercury_prompt() -> None:
    i, j = FILE.index("def mul"), FILE.index("\n\n\nprint")
    c = FILE.index("result = a") + len("result = a")
    prompt = mc.zed_mercury_prompt([("src/util.py", "def helper():\n    return 1\n")], "src/calc.py",
                                   FILE[:i], FILE[i:c], FILE[c:j], FILE[j:], [DIFF.rstrip("\n")])
    p = m.parse_edit(prompt)
    assert (p.path, p.region, p.region[:p.cursor]) == ("src/calc.py", FILE[i:j], FILE[i:c])
    assert p.before == FILE[:i] and p.before + p.region + p.after == FILE[:-1]  # (the tag's newline)
    assert p.history == (DIFF,) and p.sections[0].text == "def helper():\n    return 1\n"


def test_parse_region_outside_the_file_block_and_errors() -> None:
    content = ("<|recently_viewed_code_snippets|>\n\n<|/recently_viewed_code_snippets|>\n<|current_file_content|>\n"
               "current_file_path: add.py\nx = 1\ndef add(a, b):\n    return a - b\n<|/current_file_content|>\n"
               "<|code_to_edit|>\ndef add(a, b):\n    return a - b<|cursor|>\n<|/code_to_edit|>\n"
               "<|edit_diff_history|>\n# Implement addition rather than subtraction.\n<|/edit_diff_history|>")
    p = m.parse_edit(content)
    assert (p.before, p.region, p.after, p.path) == ("x = 1\n", "def add(a, b):\n    return a - b\n", "", "add.py")
    with pytest.raises(PromptError, match="code_to_edit"):
        m.parse_edit("<|current_file_content|>\nx\n<|/current_file_content|>")
    with pytest.raises(PromptError):
        m.parse_chat_body({"messages": [{"role": "system", "content": "hi"}]})
    assert m.parse_fim_body({"prompt": "a", "suffix": "<|endoftext|>"}).suffix == ""


def test_edit_content_keeps_the_region_convention() -> None:
    assert m.edit_content("x\n", "a\n") == "```\nx\n\n```"
    assert m.edit_content("x\n", "a") == "```\nx\n```"
    assert m.edit_content(None, "a\n") == m.edit_content("  ", "a\n") == "```\na\n\n```"
    assert mc.continue_extract_completion(m.edit_content("x\ny\n", "a\nb\n")) == "x\ny"
    assert m.unfence(m.edit_content("x\ny\n", "a\nb\n")) == "x\ny\n"


ORIGINAL = "import os\n\n\ndef a():\n    return 1\n\n\ndef b():\n    return 2\n"


@pytest.mark.parametrize("snippet, merged", [
    ("// ... existing code ...\ndef b():\n    return 3\n", ORIGINAL.replace("return 2", "return 3")),
    ("# ... existing code ...\ndef a():\n    x = 1\n    return x\n# ... existing code ...",
     ORIGINAL.replace("    return 1\n", "    x = 1\n    return x\n")),
    ("import os\nimport sys\n# ... rest of the file ...", ORIGINAL.replace("import os\n", "import os\nimport sys\n")),
    ("# ... existing code ...\ndef b():\n    return 2\n\n\ndef c():\n    return 3\n",
     ORIGINAL + "\n\ndef c():\n    return 3\n"),
    (ORIGINAL.replace("return 1", "return 10"), ORIGINAL.replace("return 1", "return 10")),  # the whole file
])
def test_merge_snippet(snippet: str, merged: str) -> None:
    assert m.merge_snippet(ORIGINAL, snippet) == merged


JS = "function a() {\n  return 1;\n}\n\nfunction b() {\n  return 2;\n}\n"
CLASS = "class A:\n    def f(self):\n        return 1\n\n    def g(self):\n        return 2\n"


@pytest.mark.parametrize("original, snippet, merged", [
    (JS, "// ... existing code ...\nfunction b() {\n  return 3;\n}\n", JS.replace("return 2", "return 3")),
    (CLASS, "class A:\n    # ... existing code ...\n    def g(self):\n        return 3\n",
     CLASS.replace("return 2", "return 3")),
    (CLASS, "    def f(self):\n        log()\n        return 1\n    # ... existing code ...",
     CLASS.replace("    def f(self):\n", "    def f(self):\n        log()\n")),
])
def test_merge_snippet_blocks(original: str, snippet: str, merged: str) -> None:
    assert m.merge_snippet(original, snippet) == merged


def test_merge_snippet_gives_up_on_code_it_cannot_place() -> None:
    assert m.merge_snippet(ORIGINAL, "// ... existing code ...\ndef z():\n    pass\n// ... existing code ...") is None
    assert m.merge_snippet("", "x = 1\n") == "x = 1\n"
    assert m.parse_apply(mc.apply_body("a\n", "b")["messages"][0]["content"]) == ("a\n", "b")


# ---- the routes, as the clients call them ----------------------------------------------------------------
async def test_fim_non_stream_inception_sdk_shape(merc: tuple[TestClient, SteppingEngine]) -> None:
    client, eng = merc
    r = await client.post("/v1/fim/completions", json={"model": "mercury-edit-2", "prompt": "def add(a, b):\n    return ",
                                                       "suffix": "\n\nprint(add(2, 3))", "max_tokens": 64})
    body = await r.json()
    assert r.status == 200 and body["object"] == "text_completion" and body["model"] == "mercury-edit-2"
    assert body["choices"][0]["text"] == "a * b" and body["choices"][0]["finish_reason"] == "stop"
    assert set(body["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}
    kind, prompt, kw = eng.calls[0]
    assert kind == "infill" and prompt == FimPrompt("def add(a, b):\n    return ", "\n\nprint(add(2, 3))")
    assert kw["max_tokens"] == 64


async def test_fim_stream_as_continue_inception_reads_it(merc: tuple[TestClient, SteppingEngine]) -> None:
    client, eng = merc
    eng.fim_text = "a * b\n\nnext_block()"
    body = mc.continue_fim_body("mercury-coder", "def add(a, b):\n    return ", "")
    r = await client.post("/v1/completions", json=body, headers={"Accept": "application/json"})
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    chunks = mc.sse(await r.read())
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == "a * b"  # cut at "\n\n"
    assert eng.calls[0][1].suffix == ""  # Continue's "<|endoftext|>" = no suffix
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


async def test_fim_stream_as_openai_adapter_reads_it(merc: tuple[TestClient, SteppingEngine]) -> None:
    client, eng = merc
    eng.fim_text = "a * b\n    return c"
    r = await client.post("/v1/fim/completions", json=mc.openai_fim_stream_body("m", "x = ", "\n"))
    chunks = mc.sse(await r.read())
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "a * b\n    return c"


async def test_next_edit_as_continue_streams_it(merc: tuple[TestClient, SteppingEngine]) -> None:
    client, eng = merc
    r = await client.post("/v1/edit/completions", json=mc.continue_chat_body("mercury-coder", continue_next_edit_prompt()))
    chunks = mc.sse(await r.read())
    message = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert mc.continue_extract_completion(message) == NEW_REGION.rstrip("\n")  # Continue replaces the lines
    kind, prompt, _ = eng.calls[0]
    assert kind == "rewrite" and isinstance(prompt, EditPrompt) and prompt.region.startswith("def mul")
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)


async def test_next_edit_as_zed_mercury_sends_it(merc: tuple[TestClient, SteppingEngine]) -> None:
    client, eng = merc
    i, j = FILE.index("def mul"), FILE.index("\n\n\nprint") + 1
    c = FILE.index("result = a") + len("result = a")
    prompt = mc.zed_mercury_prompt([], "src/calc.py", FILE[:i], FILE[i:c], FILE[c:j], FILE[j:], [DIFF])
    r = await client.post("/v1/edit/completions", data=mc.zed_mercury_body(prompt),
                          headers={"Content-Type": "application/json", "Authorization": "Bearer x"})
    body = await r.json()
    assert r.status == 200 and body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert mc.zed_read_mercury(body) == NEW_REGION  # Zed diffs this against the old region text
    eng.confidence = 0.1  # hidden by the gate: the region comes back unchanged ("no edit")
    body = await (await client.post("/v1/edit/completions", data=mc.zed_mercury_body(prompt),
                                    headers={"Content-Type": "application/json"})).json()
    assert mc.zed_read_mercury(body) == FILE[i:j]


async def test_apply_merges_without_the_model_and_streams(merc: tuple[TestClient, SteppingEngine]) -> None:
    client, eng = merc
    snippet = "// ... existing code ...\ndef b():\n    return 3\n"
    r = await client.post("/v1/apply/completions", json=mc.apply_body(ORIGINAL, snippet))
    body = await r.json()
    assert r.status == 200 and body["choices"][0]["message"]["content"] == ORIGINAL.replace("return 2", "return 3")
    r = await client.post("/v1/apply/completions", json=mc.apply_body(ORIGINAL, snippet, stream=True))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in mc.sse(await r.read()))
    assert text == ORIGINAL.replace("return 2", "return 3")
    assert eng.calls == []  # a deterministic merge


async def test_apply_asks_the_model_when_the_snippet_cannot_be_placed(merc: tuple[TestClient, SteppingEngine]) -> None:
    client, eng = merc
    eng.edit_text = ORIGINAL + "\n\ndef z():\n    pass\n"
    snippet = "// ... existing code ...\ndef z():\n    pass\n// ... existing code ..."
    body = await (await client.post("/v1/apply/completions", json=mc.apply_body(ORIGINAL, snippet))).json()
    assert body["choices"][0]["message"]["content"] == eng.edit_text
    kind, prompt, _ = eng.calls[0]
    assert kind == "rewrite" and prompt.region == ORIGINAL and prompt.sections[0].text == snippet


async def test_diffusing_streams_each_denoising_state_then_the_answer(merc: tuple[TestClient, SteppingEngine]) -> None:
    client, eng = merc
    r = await client.post("/v1/fim/completions", json={"prompt": "x = ", "suffix": "\n", "diffusing": True})
    chunks = mc.sse(await r.read())
    frames = [c for c in chunks if "diffusion_meta" in c]
    assert [f["choices"][0]["text"] for f in frames] == [*SteppingEngine.frames, "a * b"]
    assert all(f["diffusion_meta"]["diffusion_content"] for f in frames)
    assert frames[-1]["diffusion_meta"]["diffusion_progress"] == 1.0 and frames[-1]["choices"][0]["finish_reason"]
    chat = mc.continue_chat_body("m", continue_next_edit_prompt())
    chat["diffusing"] = True
    chunks = mc.sse(await (await client.post("/v1/edit/completions", json=chat)).read())
    contents = [c["choices"][0]["delta"]["content"] for c in chunks if "diffusion_meta" in c]
    assert contents[0] == m.edit_content("░░░░", "\n".join(OLD_LINES) + "\n")  # a frame replaces, not appends
    assert mc.continue_extract_completion(contents[-1]) == NEW_REGION.rstrip("\n")


async def test_diffusing_with_the_real_engine(tiny: Any) -> None:
    async with TestClient(TestServer(make_app(Settings(feedback_db=":memory:", gate=Gate(enabled=False)),
                                              engine=tiny))) as client:
        r = await client.post("/v1/fim/completions", json={"prompt": "def f(x):\n    return ", "suffix": "\n",
                                                           "max_tokens": 8, "diffusing": True})
        frames = [c for c in mc.sse(await r.read()) if "diffusion_meta" in c]
        progress = [f["diffusion_meta"]["diffusion_progress"] for f in frames]
        assert len(frames) >= 2 and progress == sorted(progress) and progress[-1] == 1.0
        assert m.MASK_GLYPH in frames[0]["choices"][0]["text"]  # the first state is still (partly) masked
        plain = await (await client.post("/v1/fim/completions", json={"prompt": "def f(x):\n    return ",
                                                                      "suffix": "\n", "max_tokens": 8})).json()
        assert plain["choices"][0]["text"] == frames[-1]["choices"][0]["text"]  # same answer, greedy


@pytest.fixture(scope="module")
def tiny() -> Any:
    from engine import Engine

    return Engine.load("tiny-random", device="cpu")


async def test_bad_bodies_are_400s(merc: tuple[TestClient, SteppingEngine]) -> None:
    client, eng = merc
    for path, body in (("/v1/edit/completions", {"messages": []}),
                       ("/v1/edit/completions", {"messages": [{"role": "user", "content": "no tags"}]}),
                       ("/v1/apply/completions", {"messages": [{"role": "user", "content": "<|original_code|>x"}]}),
                       ("/v1/fim/completions", {"suffix": "x"}),
                       ("/v1/fim/completions", {"prompt": "x", "stream": "yes"})):
        r = await client.post(path, json=body)
        assert r.status == 400 and (await r.json())["error"]["type"] == "invalid_request_error", (path, body)
    assert eng.calls == []


async def test_client_gone_mid_stream_aborts_the_generation(merc: tuple[TestClient, SteppingEngine]) -> None:
    client, eng = merc
    eng.gate = threading.Event()
    resp = await client.post("/v1/fim/completions", json={"prompt": "x", "suffix": "", "stream": True})
    assert resp.status == 200 and await asyncio.to_thread(eng.started.wait, 5)  # headers sent, generating
    resp.close()  # the editor gives up on this suggestion
    for _ in range(200):
        if eng.calls[0][2]["abort"].aborted:
            break
        await asyncio.sleep(0.02)
    assert eng.calls[0][2]["abort"].aborted
    eng.gate.set()


def test_engine_error_mid_stream_is_an_error_event() -> None:
    async def go() -> list[Any]:
        eng = FakeEngine()
        eng.fail = RuntimeError("CUDA out of memory")
        async with TestClient(TestServer(make_app(Settings(feedback_db=":memory:"), engine=eng))) as client:
            r = await client.post("/v1/fim/completions", json={"prompt": "x", "stream": True})
            return mc.sse(await r.read())

    events = asyncio.run(go())
    assert events[-1]["error"]["type"] == "server_error" and "out of memory" in events[-1]["error"]["message"]
    assert _result("x").text == "x"
