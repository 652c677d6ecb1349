"""Task generators: spans valid, templates round-trip, no-edit targets equal inputs."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from engine.templates import EditPrompt, FimPrompt, render_edit, render_fim, strip_canvas
from engine.tokenizer import Tokenizer
from engine.train.corpus import Corpus, CorpusOptions, build_corpus, normalise
from engine.train.syntax_spans import syntax_spans
from engine.train.tasks import Budget, make_continuation, make_fim
from engine.train.tasks_edit import (
    GENERATORS,
    Site,
    apply_sites,
    make_edit,
    make_noedit,
    session_example,
    synth_sites,
)

TOK = Tokenizer.byte_level()
BUDGET = Budget(max_len=1024, block_size=16, max_canvas=512, chars_per_token=1.0)
CODE = '''import os
import math


def area(radius, scale):
    """Area of a circle."""
    value = math.pi * radius ** 2
    return value * scale


def total(items, scale):
    result = 0
    for item in items:
        result += area(item, scale)
    return result


def main():
    path = os.path.join("data", "input.txt")
    print(total([1, 2, 3], 2), path)
    print(area(4, 2))
'''


def _canvas_text(ex) -> str:
    return TOK.decode(strip_canvas(TOK, ex.target))


@pytest.mark.parametrize("how", ["chars", "line", "lines", "syntax"])
@pytest.mark.parametrize("layout", ["spml", "spm", "psm"])
def test_fim_span_and_template_round_trip(how: str, layout: str) -> None:
    rng = random.Random(3)
    made = 0
    for _ in range(20):
        ex = make_fim(TOK, CODE, "geo.py", "python", rng, BUDGET, how=how, layout=layout)
        if ex is None:
            continue
        made += 1
        m = ex.meta
        # the span is a real piece of the file, and prefix + middle + suffix is contiguous text of it
        assert m["prefix"] + m["middle"] + m["suffix"] in CODE and m["middle"]
        # the prompt is exactly the runtime template; the target is middle + eom + pads
        assert ex.prompt == render_fim(TOK, FimPrompt(m["prefix"], m["suffix"], path="geo.py", layout=layout)).ids
        assert _canvas_text(ex) == m["middle"]
        assert len(ex.target) % BUDGET.block_size == 0
        assert TOK.special.eom in ex.target
        assert len(ex) <= BUDGET.max_len
    assert made >= 10


def test_line_spans_include_the_cursor_mid_line_with_the_rest_of_the_line_after_it() -> None:
    from engine.train.tasks import GAP_REST, line_gap, pick_span

    line = "    result += area(item, scale)\n"
    rng = random.Random(0)
    for a in (4, 11, 20, 27):
        b = line_gap(line, a, rng)
        assert b is not None and a < b < len(line) - 1 and len(line) - 1 - b <= GAP_REST
        assert not (line[b - 1].isalnum() and line[b].isalnum())  # a token boundary
    assert line_gap("x\n", 1, rng) is None
    kinds = {"gap": 0, "to-eol": 0, "whole": 0}
    for seed in range(300):
        a, b = pick_span(CODE, "python", "line", random.Random(seed), 200)
        ls, le = CODE.rfind("\n", 0, a) + 1, CODE.find("\n", a)
        whole = not CODE[ls:a].strip()
        kinds["gap" if b < le else "whole" if whole else "to-eol"] += 1
        assert ls <= a < b <= le  # one line's piece
    assert all(n >= 50 for n in kinds.values()), kinds


def test_syntax_spans_cover_kinds_and_are_nodes() -> None:
    spans = syntax_spans(CODE, "python")
    kinds = {s.kind for s in spans}
    assert {"expression", "statement", "block", "arguments"} <= kinds
    for s in spans:
        piece = CODE[s.start:s.end]
        assert piece.strip() and piece == piece.strip() or s.kind == "block"
    args = [CODE[s.start:s.end] for s in spans if s.kind == "arguments"]
    assert "(item, scale)" in args
    assert syntax_spans("x = 1\n", "cobol") == []


def test_continuation_has_empty_suffix() -> None:
    ex = make_continuation(TOK, CODE, "geo.py", random.Random(0), BUDGET)
    assert ex is not None and ex.meta["suffix"] == ""
    assert CODE.startswith(ex.meta["prefix"] + ex.meta["middle"]) or (ex.meta["prefix"] + ex.meta["middle"]) in CODE


def test_apply_sites_and_rename_session() -> None:
    assert apply_sites("abc def abc", [Site(0, 3, "xy"), Site(8, 11, "xy")]) == "xy def xy"
    orig = CODE
    sites = [Site(m, m + len("scale"), "factor") for m in _all(orig, "scale")]
    pending = 0
    for seed in range(12):
        ex = session_example(TOK, orig, sites, list(range(len(sites))), "geo.py", random.Random(seed),
                             BUDGET, "rename", k=1)
        assert ex is not None
        p: EditPrompt = ex.meta["prompt"]
        assert ex.prompt == render_edit(TOK, p).ids
        assert "-def area(radius, scale):" in p.history[-1] and "+def area(radius, factor):" in p.history[-1]
        assert "factor" in p.region[: p.cursor]  # the cursor sits after the applied rename
        # the target renames every remaining occurrence inside the region, nothing else
        new = ex.meta["new_region"]
        assert _canvas_text(ex) == new
        assert "scale" not in new and new.replace("factor", "scale") == p.region.replace("factor", "scale")
        pending += "scale" in p.region
        assert ex.kind == ("edit:rename" if "scale" in p.region else "noedit:rename")
    assert pending >= 2


def _all(text: str, word: str) -> list[int]:
    out, i = [], text.find(word)
    while i >= 0:
        out.append(i)
        i = text.find(word, i + 1)
    return out


def test_session_fully_applied_is_noedit() -> None:
    sites = [Site(m, m + 5, "factor") for m in _all(CODE, "scale")]
    ex = session_example(TOK, CODE, sites, list(range(len(sites))), "geo.py", random.Random(2), BUDGET,
                         "rename", k=len(sites))
    assert ex is not None and ex.kind == "noedit:rename"
    assert ex.meta["new_region"] == ex.meta["region"] == ex.meta["prompt"].region
    assert _canvas_text(ex) == ex.meta["region"]


@pytest.mark.parametrize("kind", GENERATORS)
def test_every_edit_generator_makes_valid_examples(kind: str) -> None:
    rng = random.Random(5)
    made = edits = 0
    for _ in range(25):
        ex = make_edit(TOK, CODE, "geo.py", rng, BUDGET, kind=kind)
        if ex is None:
            continue
        made += 1
        p = ex.meta["prompt"]
        assert ex.prompt == render_edit(TOK, p).ids
        assert 0 <= p.cursor <= len(p.region)
        assert _canvas_text(ex) == ex.meta["new_region"]
        # the document the model sees is real text: before + region + after is a window of it
        if ex.kind.startswith("noedit"):
            assert ex.meta["new_region"] == p.region
        else:
            edits += 1
            assert ex.meta["new_region"] != p.region
    assert made >= 5 and edits >= 1, (made, edits)


def test_signature_and_import_sites() -> None:
    rng = random.Random(0)
    orig, sites, order = synth_sites(CODE, "signature", rng)
    done = apply_sites(orig, sites)
    name = next(n for n in ("area", "total", "main") if f"def {n}(" in done and f"def {n}(" in CODE)
    assert "=None)" in done.split("\n\n\n")[1] or "=None)" in done
    assert done.count(", ") > CODE.count(", ") and name
    orig, sites, _ = synth_sites(CODE, "import", random.Random(1))
    assert apply_sites(orig, sites) == CODE and orig != CODE


def test_noedit_target_equals_region() -> None:
    rng = random.Random(9)
    for _ in range(10):
        ex = make_noedit(TOK, CODE, "geo.py", rng, BUDGET)
        if ex is None:
            continue
        assert ex.kind == "noedit:random" and not ex.meta["prompt"].history
        assert _canvas_text(ex) == ex.meta["prompt"].region


def test_corpus_filters_dedups_holds_out_and_is_deterministic(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "node_modules").mkdir(parents=True)
    (src / "node_modules" / "dep.js").write_text("var x = 1;\n" * 50)
    for i in range(30):
        (src / f"m{i}.py").write_text(CODE.replace("area", f"area{i}"))
    (src / "dup.py").write_text(CODE.replace("area", "area0"))  # exact duplicate of m0
    (src / "near.py").write_text(CODE.replace("area", "area1").replace("    ", "  "))  # near dup of m1
    (src / "gen.py").write_text("# Code generated by protoc. DO NOT EDIT.\n" + CODE)
    (src / "min.js").write_text("var a=1;" * 400)
    (src / "bin.py").write_bytes(b"\0\1\2" * 200)
    (src / "tiny.py").write_text("x = 1\n")
    opts = CorpusOptions(val_fraction=0.2)
    idx = build_corpus([src], tmp_path / "c1", TOK, tokenizer_name="byte", opts=opts)
    st = idx["stats"]["rejected"]
    assert st == {"duplicate": 1, "near_duplicate": 1, "generated": 1, "minified": 1, "binary": 1, "small": 1}
    assert idx["docs"]["train"] + idx["docs"]["val"] == 30 and idx["docs"]["val"] > 0
    c = Corpus(tmp_path / "c1")
    docs = c.docs("train") + c.docs("val")
    assert all(d.text == normalise(d.text) for d in docs)
    assert not {d.path for d in c.docs("train")} & {d.path for d in c.docs("val")}
    toks = c.tokens("train")
    assert toks.dtype.name == "uint16" and len(toks) == idx["tokens"]["train"]
    assert TOK.decode(toks[: docs[0].n_tokens].tolist()) == c.docs("train")[0].text
    build_corpus([src], tmp_path / "c2", TOK, tokenizer_name="byte", opts=opts)
    for f in sorted((tmp_path / "c1").iterdir()):
        assert f.read_bytes() == (tmp_path / "c2" / f.name).read_bytes(), f.name


def test_generators_survive_awkward_lines() -> None:
    """Regression: deeply indented one-character lines (`)`) crashed finish_line mid-training."""
    text = "def f(\n" + "".join(f"            a{i},\n                )\n" for i in range(30)) + "):\n    pass\n"
    rng = random.Random(0)
    for _ in range(300):
        for kind in GENERATORS:
            synth_sites(text, kind, rng)
        make_edit(TOK, text, "w.py", rng, BUDGET)
        make_noedit(TOK, text, "w.py", rng, BUDGET)
