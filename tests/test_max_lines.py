"""Multi-line completions are capped at ``maxLines`` lines (0 = auto: 4 on a CPU, no cap elsewhere): the
engine stops decoding there (tests/test_decode.py) and the pipeline cuts what an engine returns beyond it."""

from __future__ import annotations

from types import SimpleNamespace

import msgspec

from edit_server.core.messages import Job
from edit_server.core.requests import FimRequest
from edit_server.core.settings import Settings, build_settings
from edit_server.selectivity.select import fim_result
from edit_server.serving.contexts import max_lines
from edit_server.serving.worker import engine_call
from engine.templates import FimPrompt

CPU = SimpleNamespace(info={"device": "cpu"})
GPU = SimpleNamespace(info={"device": "cuda:0"})
REMOTE = SimpleNamespace(info={"device": "cpu", "remote": "https://gpu.example"})


def test_auto_is_four_lines_on_a_cpu_only() -> None:
    s = Settings()
    assert (max_lines(s, CPU), max_lines(s, GPU), max_lines(s, REMOTE), max_lines(s, None)) == (4, None, None, 4)
    seven = msgspec.structs.replace(s, max_lines=7)
    assert (max_lines(seven, CPU), max_lines(seven, GPU)) == (7, 7)
    assert build_settings({"maxLines": 12}, {})[0].max_lines == 12
    bad, problems = build_settings({"maxLines": -1}, {})
    assert bad.max_lines == 0 and any("maxLines" in p for p in problems)  # reported, default kept


def test_the_engine_call_carries_the_cap_for_multi_line_requests_only() -> None:
    text = "def f(x):\n    \n"
    multi = Job("u", FimRequest("u", "f.py", text, 1, len("def f(x):\n    ")), Settings())
    call = engine_call(multi, FimPrompt("def f(x):\n    ", "\n"), CPU)
    assert call.max_lines == 4 and not call.single_line
    assert engine_call(multi, FimPrompt("def f(x):\n    ", "\n"), GPU).max_lines is None
    mid = Job("u", FimRequest("u", "f.py", "x = foo(, 1)\n", 1, len("x = foo(")), Settings())
    one = engine_call(mid, FimPrompt("x = foo(", ", 1)\n"), CPU)
    assert one.single_line and one.max_lines is None


def test_the_pipeline_cuts_longer_output() -> None:
    text = "def f(x):\n    \n"
    req = FimRequest("u", "f.py", text, 1, len("def f(x):\n    "))
    out = "a = 1\n    b = 2\n    c = 3\n    d = 4\n    e = 5\n    return e"
    s = msgspec.structs.replace(Settings(), gate=msgspec.structs.replace(Settings().gate, enabled=False))
    capped = fim_result(req, out, [0.9] * 10, s, max_lines=4)
    assert capped is not None and capped.text == "a = 1\n    b = 2\n    c = 3\n    d = 4"
    whole = fim_result(req, out, [0.9] * 10, s)
    assert whole is not None and whole.text.endswith("return e")


def test_completion_time_budgets_per_kind_and_device() -> None:
    """``singleLineBudgetMs`` / ``multilineBudgetMs`` (0 = auto: 600 / 1,200 ms on a CPU, 1,000 / 2,000
    elsewhere) reach the engine call of each kind; a setting wins on any device."""
    from edit_server.serving import contexts
    from edit_server.serving.contexts import completion_budget_ms

    s = Settings()
    assert [completion_budget_ms(s, e, True) for e in (CPU, GPU, REMOTE, None)] == \
        [contexts.CPU_SINGLE_LINE_BUDGET_MS, contexts.GPU_SINGLE_LINE_BUDGET_MS,
         contexts.GPU_SINGLE_LINE_BUDGET_MS, contexts.CPU_SINGLE_LINE_BUDGET_MS] == [600, 1000, 1000, 600]
    assert [completion_budget_ms(s, e, False) for e in (CPU, GPU)] == [1200, 2000]
    set_, problems = build_settings({"singleLineBudgetMs": 250, "multilineBudgetMs": 900}, {})
    assert not problems and completion_budget_ms(set_, GPU, True) == 250 and completion_budget_ms(set_, CPU, False) == 900
    mid = Job("u", FimRequest("u", "f.py", "x = foo(, 1)\n", 1, len("x = foo(")), Settings())
    assert engine_call(mid, FimPrompt("x = foo(", ", 1)\n"), CPU).budget_ms == 600
    multi = Job("u", FimRequest("u", "f.py", "def f(x):\n    \n", 1, len("def f(x):\n    ")), Settings())
    assert engine_call(multi, FimPrompt("def f(x):\n    ", "\n"), GPU).budget_ms == 2000
