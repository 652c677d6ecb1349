"""`edit-server bench lsp` stays runnable: the real stdio server on tiny-random, main + AR runs.

No timing asserts: the fields, the request counts of the scripted session, and the prompt-order
invariant (a keystroke re-prefills only the typed tokens)."""

from __future__ import annotations

import json

import pytest

from edit_server.cli import build_parser
from edit_server.cli.bench_lsp_report import KINDS, format_table
from edit_server.cli.bench_lsp_script import renames, sites, split_point

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_script_picks_lines_and_parameters() -> None:
    text = "class A:\n    def f(self, count, y):\n        total = count + y * 2\n        return total\n"
    assert sites(text, 1, 60) == [2]
    line = text.split("\n")[2]
    assert line[split_point(line):] == " + y * 2"  # type: ignore[misc]
    assert renames(text, 1) == [(text.index("count"), "count")]


def test_a_suggestion_is_right_when_taking_it_makes_the_authors_line() -> None:
    from edit_server.cli.bench_lsp_script import saved_keys, typed_text

    text = "def f(count):\n    total = c\n    return total\n"
    cur = text.index("= c") + 3
    left = "ount + 1"  # what the typist was about to type
    assert saved_keys(text, cur, {"insertText": "ount + 1"}, left) == 8  # all of it
    assert saved_keys(text, cur, {"insertText": "ount"}, left) == 5  # a correct start (and the space after it)
    assert saved_keys(text, cur, {"insertText": "ount + 2"}, left) == 0
    assert saved_keys(text, cur, {"insertText": "ount + 1\n    x = 2"}, left) == 0  # more than the line
    rng = {"start": {"line": 1, "character": 4}, "end": {"line": 1, "character": 13}}  # replaces "total = c"
    assert saved_keys(text, cur, {"insertText": "total = count + 1", "range": rng}, left) == 8
    assert saved_keys(text, cur, None, left) is None
    assert saved_keys(text, cur, {"insertText": "x"}, "") == 0  # nothing was left to type
    # brackets as the typist types them: "(" brings ")", a typed ")" steps over it
    assert typed_text("x = \n", 4, "f(a") == "x = f(a)\n" and typed_text("x = \n", 4, "f(a)") == "x = f(a)\n"
    t2 = "    v = where.get()[j] - 1)\n"  # the typist's line after "where.get(" (its ")" auto-closed)
    at = t2.index("()") + 1
    rest = {"start": {"line": 0, "character": at}, "end": {"line": 0, "character": len(t2) - 1}}
    assert saved_keys(t2, at, {"insertText": "cand)[j] - 1)", "range": rest}, "cand") == 4
    assert saved_keys(t2, at, {"insertText": "c)[j] - 1)", "range": rest}, "cand") == 1
    assert saved_keys(t2, at, {"insertText": "x)[j] - 1)", "range": rest}, "cand") == 0


def test_bench_lsp_tiny_random(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(
        ["bench", "lsp", "--model", "tiny-random", "--device", "cpu", "--files", "1", "--sites", "1",
         "--renames", "1", "--eol-chars", "3", "--typing-ms", "20", "--chunk", "2", "--timeout", "240", "--json"])
    assert args.func(args) == 0
    r = json.loads(capsys.readouterr().out)
    assert set(r["ratio"]) == set(KINDS)
    assert r["machine"]["device"] == "cpu" and r["machine"]["torch_threads"] >= 1
    for run in (r["main"], r["ar"]):
        k = run["kinds"]
        assert set(k) == set(KINDS)
        assert k["load"]["n"] == k["cold"]["n"] == k["next-edit"]["n"] == k["empty-line"]["n"] == 1
        assert k["cold"]["model_calls"] == k["next-edit"]["model_calls"] == k["empty-line"]["model_calls"] == 1
        assert k["single-line"]["n"] >= 3 and k["end-of-line"]["n"] == 3  # one request per keystroke
        assert k["single-line"]["model_calls"] >= 1  # the burst's last request at least is answered
        # every suggestion while a line is retyped is judged against the author's line; none elsewhere
        sl = k["single-line"]
        assert sl["judged"] == sl["answered"] >= sl["right"] + sl["partly"]
        assert k["end-of-line"]["judged"] == k["empty-line"]["judged"] == 0
        for kind in ("cold", "single-line", "next-edit"):
            assert k[kind]["p50_ms"] > 0 and k[kind]["settled"] >= 1 and k[kind]["steps_mean"] >= 1
        ks = run["keystrokes"]
        # typing appends at the prefix's end (spml): a keystroke recomputes itself, the cursor marker, the rest
        # of the line (2-8 characters and spaces, byte-level tokens) and fim_middle — not the window
        assert ks["model_calls"] >= 2 and ks["recomputed_p50"] <= 16
        assert run["memory"]["peak_rss_mb"] > 0
        assert {s["kind"] for s in run["samples"]} >= {"load", "cold", "single-line", "next-edit"}
        assert k["jump"]["n"] == 1 and k["jump"]["model_calls"] == 1
        single = [s for s in run["samples"] if s["kind"] == "single-line"]
        assert sum(s["final"] for s in single) == -(-len(single) // 2)  # --chunk 2: a pause every 2 keys
    assert r["ar"]["decode"] == "ar" and r["main"]["decode"] == "engine default"
    table = format_table(r)
    assert "single-line" in table and "AR/main" in table and "recomputed per call" in table
