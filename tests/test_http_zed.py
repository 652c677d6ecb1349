"""Zed's requests, byte for byte (tests/fixtures/zed/, built by tests/zed_reference.py from Zed's source),
replayed against the app; the answers are read the way Zed reads them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from edit_server.core.settings import Settings
from edit_server.http.app import make_app
from edit_server.http.zed import SETTING, SUPPORTED, UnsupportedFormat, detect_format, parse_prompt
from engine.templates import EditPrompt, FimPrompt
from tests import zed_reference as zr
from tests.test_http import FakeEngine

FIXTURES = Path(__file__).parent / "fixtures" / "zed"
HEADERS = {"Content-Type": "application/json"}  # Zed's send_request sets exactly this (+ Authorization)


def fixture(name: str) -> bytes:
    return (FIXTURES / f"{name}.json").read_bytes()


@pytest.fixture
async def zed() -> AsyncIterator[tuple[TestClient, FakeEngine]]:
    eng = FakeEngine()
    eng.edit_text = zr.NEW_REGION
    async with TestClient(TestServer(make_app(Settings(feedback_db=":memory:"), engine=eng))) as client:
        yield client, eng


async def post(client: TestClient, data: bytes) -> tuple[int, dict[str, Any]]:
    r = await client.post("/v1/completions", data=data, headers=HEADERS)
    return r.status, await r.json()


def check_raw_completion_response(body: dict[str, Any]) -> str:
    """Zed deserialises RawCompletionResponse: id, object, created (u64), model, choices[{text,
    finish_reason}], usage{prompt, completion, total} are all required."""
    assert isinstance(body["id"], str) and isinstance(body["object"], str) and isinstance(body["model"], str)
    assert isinstance(body["created"], int) and body["created"] >= 0
    assert {"prompt_tokens", "completion_tokens", "total_tokens"} <= set(body["usage"])
    choice = body["choices"][0]
    assert choice["finish_reason"] in ("stop", "length")
    return choice["text"]


def test_fixtures_are_what_zed_sends() -> None:
    assert zr.fixtures() == {p.stem: p.read_bytes() for p in FIXTURES.glob("*.json")}


def test_v0131_is_not_mistaken_for_qwen() -> None:
    prompt = json.loads(fixture("v0131"))["prompt"]
    assert detect_format(prompt) == "v0131"
    assert detect_format(json.loads(fixture("v0211_prefill"))["prompt"]) == "v0131"
    assert detect_format(json.loads(fixture("v0211_seed_coder"))["prompt"]) == "zeta2"
    assert detect_format(json.loads(fixture("zeta1"))["prompt"]) == "zeta"
    assert detect_format(json.loads(fixture("fim_qwen"))["prompt"]) == "qwen"


@pytest.mark.parametrize("name", ["v0131", "v0211_prefill", "v0211_seed_coder", "zeta1"])
def test_edit_fixtures_parse_to_the_same_edit(name: str) -> None:
    zp = parse_prompt(json.loads(fixture(name))["prompt"])
    p = zp.prompt
    assert isinstance(p, EditPrompt)
    i = zr.EXAMPLE
    a, b = i.editable
    assert p.path == "src/calc.py"
    assert p.region == i.context[a:b] and p.region[:p.cursor] == i.context[a:i.cursor]
    assert p.before.endswith("return a + b\n\n\n") and p.after.startswith("\n\nprint(mul(2, 3))")
    if name == "zeta1":
        assert p.before == i.context[:a] and p.after == i.context[b:]
    else:
        assert p.before == i.context[:a] and p.after == i.context[b:]  # (context ends with a newline)
        assert [(s.path, s.text) for s in p.sections] == [
            ("src/util.py", "def helper():\n    return 1\n...\ndef other():\n    return 2\n...\n")]
    assert len(p.history) == 2 and p.history[0].startswith("--- a/src/calc.py\n+++ b/src/calc.py\n@@ -4,2")
    assert "-def mul(a):" in p.history[1] and "User accepted" not in p.history[1]
    assert zp.prefill == ("def" if name == "v0211_prefill" else "")


@pytest.mark.parametrize("name", ["v0131", "v0211_prefill", "v0211_seed_coder"])
async def test_merge_marker_requests_get_the_new_region(zed: tuple[TestClient, FakeEngine], name: str) -> None:
    client, eng = zed
    status, body = await post(client, fixture(name))
    assert status == 200
    text = check_raw_completion_response(body)
    prefill = json.loads(fixture(name))["prompt"].rpartition("<|fim_middle|>")[2] if name != "v0211_seed_coder" else ""
    assert zr.read_zeta2_reply(text, prefill) == zr.NEW_REGION  # what Zed diffs against the old region
    kind, prompt, kw = eng.calls[0]
    assert kind == "rewrite" and prompt.region.startswith("def mul(a, b):") and kw["cache_key"]


async def test_prefill_that_the_rewrite_does_not_keep_means_no_edit(zed: tuple[TestClient, FakeEngine]) -> None:
    client, eng = zed
    eng.edit_text = "class Mul:\n    pass\n"  # does not start with Zed's prefill "def"
    status, body = await post(client, fixture("v0211_prefill"))
    a, b = zr.EXAMPLE.editable
    assert status == 200 and zr.read_zeta2_reply(body["choices"][0]["text"], "def") == zr.CALC[a:b]


async def test_zeta1_request(zed: tuple[TestClient, FakeEngine]) -> None:
    client, eng = zed
    status, body = await post(client, fixture("zeta1"))
    assert status == 200
    text = check_raw_completion_response(body)
    for stop in json.loads(fixture("zeta1"))["stop"]:  # the server honours Zed's stops
        assert stop not in text
    new = zr.read_zeta1_reply(text)
    assert (new if new.endswith("\n") else new + "\n") == zr.NEW_REGION  # Zed ends both texts with one


async def test_fim_fixture_and_every_fim_format(zed: tuple[TestClient, FakeEngine]) -> None:
    client, eng = zed
    eng.fim_text = "a * b<|endoftext|>junk"
    status, body = await post(client, fixture("fim_qwen"))
    assert status == 200 and zr.fim_clean(check_raw_completion_response(body), "") == "a * b"
    i = zr.EXAMPLE
    prefix, suffix = i.context[:i.cursor], i.context[i.cursor:]
    for fmt in ("code_llama", "star_coder", "deepseek_coder", "qwen", "code_gemma", "codestral", "glm"):
        prompt = zr.fim_prompt(fmt, prefix, suffix)
        fp = parse_prompt(prompt).prompt
        assert isinstance(fp, FimPrompt) and (fp.prefix, fp.suffix) == (prefix, suffix), fmt
        status, body = await post(client, zr.body("m", prompt, 256, zr.FIM_STOPS))
        assert status == 200 and body["choices"][0]["text"] == "a * b", fmt
        assert eng.calls[-1][1].prefix == prefix


# a V0318SeedMultiRegions (zeta2_1) prompt's shape: seed-coder frame, numbered marker tags in the region
V0318 = ("<[fim-suffix]>\n\nprint(mul(2, 3))\n<[fim-prefix]><filename>src/calc.py\nimport math\n"
         "<|marker_1|>def mul(a, b):\n    result = a<|user_cursor|>\n<|marker_2|>    return result\n"
         "<|marker_3|>\n<[fim-middle]>")
UNSUPPORTED = {
    "multi-region": V0318,
    "v0113": "<|file_sep|>a.py\n<|fim_prefix|>\nx\n<|fim_middle|>current\ny<|user_cursor|>\n<|fim_suffix|>\n"
             "<|fim_middle|>updated\n",
    "plain text": "def f():\n    return 1",
}


@pytest.mark.parametrize("name", list(UNSUPPORTED))
async def test_unsupported_formats_get_a_json_400_naming_the_setting(zed: tuple[TestClient, FakeEngine],
                                                                    name: str) -> None:
    client, eng = zed
    with pytest.raises(UnsupportedFormat):
        parse_prompt(UNSUPPORTED[name])
    status, body = await post(client, zr.body("m", UNSUPPORTED[name], 1024, []))
    assert status == 400
    err = body["error"]
    assert err["code"] == "unsupported_prompt_format" and err["param"] == "prompt"
    assert err["setting"] == SETTING == "edit_predictions.open_ai_compatible_api.prompt_format"
    assert err["supported_formats"] == list(SUPPORTED) and "zeta2" in err["supported_formats"]
    assert '"zeta2"' in err["message"] and "prompt_format" in err["message"] and err["detected"]
    assert eng.calls == []


def test_zeta1_region_that_ends_mid_line_keeps_its_newline_convention() -> None:
    from dataclasses import replace

    from edit_server.http.zed import edit_reply

    i = replace(zr.EXAMPLE, editable=(zr.EXAMPLE.editable[0], zr.EXAMPLE.editable[1] - 1))  # before the "\n"
    zp = parse_prompt(zr.zeta1(i, start_of_file=False))
    assert isinstance(zp.prompt, EditPrompt) and zp.trailing_newline_added
    assert zp.prompt.region == zr.CALC[i.editable[0]:i.editable[1]] + "\n"
    assert zp.prompt.before + zp.prompt.region + zp.prompt.after == zr.CALC
    assert zr.read_zeta1_reply(edit_reply(zp, zr.NEW_REGION)) == zr.NEW_REGION[:-1]
    assert edit_reply(zp, None) == zr.CALC[i.editable[0]:i.editable[1]]  # no edit: the old region
