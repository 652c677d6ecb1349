"""The remote backend (engine/remote/) against a fake OpenAI-compatible / SGLang server on loopback:
request shapes, the auth header, timeouts and 5xx → local fallback, abort → connection closed, no
contact unless configured, the key never logged; settings ``remote.*``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from edit_server.core.settings import build_settings, parse_set
from edit_server.serving.remote import api_key, remote_engine
from engine.api import OneByOne
from engine.remote import RemoteConfig, RemoteEngine, RemoteError
from engine.templates import EditPrompt, FimPrompt, Section
from engine.types import AbortSignal, EngineInfo, GenerateResult
from tests.remote_fake import Fake, free_port

KEY = "sk-test-0123456789abcdef-KEY"
PROMPT = FimPrompt(prefix="def add(a, b):\n    return ", suffix="\n\nprint(add(1, 2))\n", path="src/calc.py",
                   sections=(Section("definition", "src/util.py", "def helper():\n    return 1"),))
EDIT = EditPrompt(before="import math\n", region="def area(w, h):\n    return w * w\n", after="\nx = 1\n",
                  cursor=5, path="src/geo.py", history=("--- a/src/geo.py\n+++ b/src/geo.py\n@@ -1 +1 @@\n-a\n+b\n",))


class Local(OneByOne):
    """The local fallback: says where it ran."""

    info = EngineInfo(model="local")
    tokenizer = args = None

    def __init__(self) -> None:
        self.calls = 0

    def _r(self, text: str) -> GenerateResult:
        self.calls += 1
        return GenerateResult(text=text, tokens=[1], confidences=[0.9], steps=1, forwards=1, prompt_tokens=1,
                              cached_tokens=0, finish_reason="end")

    def infill(self, prompt: Any, **kw: Any) -> GenerateResult:
        return self._r("local")

    def rewrite(self, prompt: Any, **kw: Any) -> GenerateResult:
        return self._r(prompt.region)


@pytest.fixture
def fake() -> Iterator[Fake]:
    f = Fake()
    yield f
    f.close()


def _engine(url: str, local: Local | None = None, **kw: Any) -> RemoteEngine:
    cfg = RemoteConfig(url=url, **{"kind": "openai", "api_key": KEY, "model": "qwen-coder", **kw})
    return RemoteEngine(cfg, fallback=(lambda: local) if local is not None else None)


# ---- request shapes --------------------------------------------------------------------------------
def test_openai_fim_request_shape_auth_and_confidences(fake: Fake) -> None:
    eng = _engine(fake.url)
    try:
        r = eng.infill(PROMPT, max_tokens=24, single_line=True)
    finally:
        eng.close()
    req = fake.requests[-1]
    assert req["path"] == "/v1/completions"
    assert req["headers"]["Authorization"] == f"Bearer {KEY}"
    body = req["body"]
    assert body["prompt"] == ("<|file_sep|>src/util.py\ndef helper():\n    return 1\n<|file_sep|>src/calc.py\n"
                              "<|fim_prefix|>def add(a, b):\n    return <|fim_suffix|>\n\nprint(add(1, 2))\n"
                              "<|fim_middle|>")
    assert body["model"] == "qwen-coder" and body["max_tokens"] == 24 and body["temperature"] == 0
    assert body["logprobs"] == 1 and "\n" in body["stop"] and "<|file_sep|>" in body["stop"]
    assert r.text == "a + b" and r.confidences == pytest.approx([0.5] * 3) and r.finish_reason == "end"
    assert eng.degraded is None and eng.calls == {"remote": 1, "local": 0, "failed": 0}


@pytest.mark.parametrize("fmt, want", [
    ("starcoder", "<file_sep>src/util.py\ndef helper():\n    return 1\n<file_sep>src/calc.py\n<fim_prefix>"),
    ("codellama", "<PRE> def add"),
    ("deepseek", "<｜fim▁begin｜>def add"),
])
def test_fim_formats(fake: Fake, fmt: str, want: str) -> None:
    eng = _engine(fake.url, fim_format=fmt)
    try:
        eng.infill(PROMPT)
    finally:
        eng.close()
    assert fake.requests[-1]["body"]["prompt"].startswith(want)


def test_suffix_format_sends_prompt_and_suffix_fields(fake: Fake) -> None:
    eng = _engine(fake.url, fim_format="suffix")
    try:
        eng.infill(PROMPT)
    finally:
        eng.close()
    body = fake.requests[-1]["body"]
    assert (body["prompt"], body["suffix"]) == (PROMPT.prefix, PROMPT.suffix)


def test_sglang_uses_generate_with_logprobs(fake: Fake) -> None:
    eng = _engine(fake.url, kind="sglang")
    try:
        r = eng.infill(PROMPT, max_tokens=16)
    finally:
        eng.close()
    req = fake.requests[-1]
    assert req["path"] == "/generate" and req["body"]["return_logprob"] is True
    assert req["body"]["sampling_params"]["max_new_tokens"] == 16
    assert req["body"]["text"].endswith("<|fim_middle|>")
    assert r.text == "a + b" and r.confidences == pytest.approx([0.5] * 3) and r.prompt_tokens == 5


def test_rewrite_goes_to_chat_in_the_mercury_shape(fake: Fake) -> None:
    eng = _engine(fake.url)
    fake.chat_text = "Sure:\n```python\ndef area(w, h):\n    return w * h\n```"
    try:
        r = eng.rewrite(EDIT)
    finally:
        eng.close()
    req = fake.requests[-1]
    assert req["path"] == "/v1/chat/completions"
    user = req["body"]["messages"][-1]["content"]
    assert "current_file_path: src/geo.py\nimport math\n<|code_to_edit|>\ndef a<|cursor|>rea(w, h):" in user
    assert "<|edit_diff_history|>\n--- a/src/geo.py" in user
    assert r.text == "def area(w, h):\n    return w * h\n"


def test_single_line_is_cut_even_when_the_server_ignores_stop(fake: Fake) -> None:
    fake.text = "a + b\nprint(1)"
    eng = _engine(fake.url)
    try:
        r = eng.infill(PROMPT, single_line=True)
    finally:
        eng.close()
    assert r.text == "a + b" and r.finish_reason == "newline"


# ---- failures and fallback ------------------------------------------------------------------------
def test_5xx_falls_back_to_local_and_skips_the_remote_for_retry_s(fake: Fake) -> None:
    fake.mode = "500"
    local = Local()
    eng = _engine(fake.url, local, retry_s=3600)
    try:
        r = eng.infill(PROMPT)
        assert r.text == "local" and local.calls == 1
        assert eng.degraded is not None and "HTTP 500" in eng.degraded and "out of memory" in eng.degraded
        assert "local model" in eng.degraded
        n = len(fake.requests)
        assert eng.infill(PROMPT).text == "local" and len(fake.requests) == n  # not tried again yet
    finally:
        eng.close()


def test_remote_answers_again_after_retry(fake: Fake) -> None:
    fake.mode = "500"
    local = Local()
    eng = _engine(fake.url, local, retry_s=0)
    try:
        assert eng.infill(PROMPT).text == "local"
        fake.mode = "ok"
        assert eng.infill(PROMPT).text == "a + b" and eng.degraded is None
    finally:
        eng.close()


def test_timeout_falls_back(fake: Fake) -> None:
    fake.mode = "slow"
    local = Local()
    eng = _engine(fake.url, local, timeout_s=0.3)
    try:
        assert eng.infill(PROMPT).text == "local"
        assert eng.degraded is not None and "timed out" in eng.degraded
    finally:
        eng.close()


def test_bad_answer_falls_back(fake: Fake) -> None:
    fake.mode = "garbage"
    local = Local()
    eng = _engine(fake.url, local)
    try:
        assert eng.rewrite(EDIT).text == EDIT.region and local.calls == 1
    finally:
        eng.close()


def test_unreachable_without_fallback_raises_and_names_it() -> None:
    eng = _engine(f"http://127.0.0.1:{free_port()}")
    try:
        with pytest.raises(RemoteError, match="unreachable"):
            eng.infill(PROMPT)
        assert eng.degraded is not None and "no suggestions" in eng.degraded
    finally:
        eng.close()


def test_the_local_model_loads_only_on_the_first_failure(fake: Fake) -> None:
    made: list[Local] = []

    def factory() -> Local:
        made.append(Local())
        return made[-1]

    eng = RemoteEngine(RemoteConfig(url=fake.url, kind="openai", retry_s=0), fallback=factory)
    try:
        eng.infill(PROMPT)
        assert made == [] and eng.local is None
        fake.mode = "500"
        eng.infill(PROMPT)
        eng.infill(PROMPT)
        assert len(made) == 1 and made[0].calls == 2
    finally:
        eng.close()


# ---- cancellation ------------------------------------------------------------------------------
def test_abort_cancels_the_request_and_closes_the_connection(fake: Fake) -> None:
    fake.mode = "hang"
    local = Local()
    eng = _engine(fake.url, local)
    abort = AbortSignal()
    out: list[GenerateResult] = []
    t = threading.Thread(target=lambda: out.append(eng.infill(PROMPT, abort=abort)))
    try:
        t.start()
        assert fake.received.wait(10)
        abort.abort()
        t.join(10)
        assert out and out[0].aborted and local.calls == 0 and eng.degraded is None
        assert fake.closed.wait(10), "the remote never saw the connection close"
    finally:
        eng.close()


def test_calls_of_a_batch_go_concurrently_and_abort_alone(fake: Fake) -> None:
    from engine.api import InfillCall

    eng = _engine(fake.url)
    a1, a2 = AbortSignal(), AbortSignal()
    a1.abort()
    try:
        res = eng.complete([InfillCall(PROMPT, abort=a1), InfillCall(PROMPT, abort=a2)])
    finally:
        eng.close()
    # the call aborted before it was sent is never sent (it used to be, and a fast answer could beat the abort)
    assert res[0].aborted and res[1].text == "a + b" and len(fake.requests) == 1


# ---- no network unless configured; the key stays secret ----------------------------------------
def test_nothing_is_contacted_until_a_call(fake: Fake) -> None:
    eng = _engine(fake.url, Local())
    try:
        assert fake.requests == [] and eng.transport._loop is None
    finally:
        eng.close()
    settings, bad = build_settings({})
    assert bad == [] and settings.remote.url == ""


def test_the_key_is_never_logged(fake: Fake, caplog: pytest.LogCaptureFixture) -> None:
    fake.mode = "500"
    caplog.set_level(logging.DEBUG)
    eng = _engine(fake.url.replace("127.0.0.1", "localhost"), Local())
    try:
        eng.infill(PROMPT)
    finally:
        eng.close()
    assert fake.requests and KEY not in caplog.text and KEY not in (eng.degraded or "")
    assert KEY not in repr(eng.info)


def test_plain_http_to_another_host_warns(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    eng = RemoteEngine(RemoteConfig(url="http://gpu.example.com:8377"))
    assert "unencrypted" in eng.info["warning"] and "unencrypted" in caplog.text
    for ok in ("https://gpu.example.com", "http://127.0.0.1:1", "http://localhost:2", "http://[::1]:3"):
        assert "warning" not in RemoteEngine(RemoteConfig(url=ok)).info


# ---- settings ---------------------------------------------------------------------------------
def test_remote_settings_from_every_path(monkeypatch: pytest.MonkeyPatch) -> None:
    cli = parse_set(["remote.url=https://gpu:8377", "remote.kind=openai", "remote.timeoutMs=5000"])
    s, bad = build_settings({"remote": {"fallback": "none", "apiKeyEnv": "MY_KEY"}}, cli)
    assert bad == []
    r = s.remote
    assert (r.url, r.kind, r.timeout_ms, r.fallback, r.api_key_env) == ("https://gpu:8377", "openai", 5000,
                                                                       "none", "MY_KEY")
    monkeypatch.setenv("MY_KEY", KEY)
    assert api_key(r) == KEY
    eng = remote_engine(s, lambda: Local())
    assert eng._fallback_factory is None and eng.cfg.timeout_s == 5.0 and eng.cfg.api_key == KEY


@pytest.mark.parametrize("raw, problem", [
    ({"url": "ftp://gpu"}, "http(s)://"),
    ({"url": "https://user:pw@gpu"}, "credentials"),
    ({"url": "http://gpu:99999"}, "bad port"),
    ({"kind": "vllm"}, "remote.kind"),
    ({"timeoutMs": 10}, "remote.timeoutMs"),
    ({"fallback": "cloud"}, "remote.fallback"),
    ({"apiKeyEnv": "A-B C"}, "environment variable"),
])
def test_bad_remote_settings_are_named(raw: dict[str, Any], problem: str) -> None:
    s, bad = build_settings({"remote": raw})
    assert len(bad) == 1 and problem in bad[0] and s.remote == build_settings({})[0].remote
    assert "pw" not in bad[0]
