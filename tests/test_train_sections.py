"""Context sections in training prompts (engine.train.sections): drawn from the document's directory, a
definition of a name it uses first, inside the token room, rendered as the server renders them."""

from __future__ import annotations

import random
from dataclasses import dataclass

from engine.templates import FimPrompt, render_fim
from engine.tokenizer import Tokenizer
from engine.train.sections import Neighbours
from engine.train.stream import ExampleStream
from engine.train.tasks import Budget, make_fim

TOK = Tokenizer.byte_level()


@dataclass
class D:
    path: str
    text: str
    lang: str = "python"
    n_tokens: int = 0


MAIN = "from pkg.util import scale\n\n\ndef area(r):\n    v = 3.14 * r * r\n    return scale(v)\n\n\n" \
       "def total(xs):\n    out = 0\n    for x in xs:\n        out += area(x)\n    return out\n"
UTIL = "import os\n\n\ndef unrelated():\n    return os.sep\n\n\ndef scale(v):\n    return v * 2\n"
OTHER = "def elsewhere():\n    return 1\n"
DOCS = [D("pkg/main.py", MAIN), D("pkg/util.py", UTIL), D("lib/other.py", OTHER)]


def test_sections_come_from_the_directory_and_prefer_names_in_use() -> None:
    nb = Neighbours(DOCS)
    kinds = set()
    for seed in range(40):
        secs = nb.draw(0, TOK, random.Random(seed), 400)
        assert secs and all(s.path == "pkg/util.py" for s in secs)  # never another directory, never itself
        for s in secs:
            kinds.add(s.kind)
            if s.kind == "definition":
                assert s.text == "def scale(v):\n    return v * 2\n"  # the one main.py uses, not `unrelated`
            else:
                assert s.kind == "open_file" and s.text.startswith("import os\n")
    assert kinds == {"definition", "open_file"}
    assert nb.draw(2, TOK, random.Random(0), 400) == ()  # alone in its directory
    assert nb.draw(0, TOK, random.Random(0), 5) == ()  # no room


def test_fim_prompt_carries_the_sections_within_its_budget() -> None:
    budget = Budget(max_len=512, block_size=16, max_canvas=64, chars_per_token=1.0)
    secs = Neighbours(DOCS).draw(0, TOK, random.Random(1), budget.max_len // 4)
    assert secs
    made = 0
    for seed in range(20):
        ex = make_fim(TOK, MAIN, "pkg/main.py", "python", random.Random(seed), budget, how="line", sections=secs)
        if ex is None:
            continue
        made += 1
        m = ex.meta
        assert m["sections"] == len(secs) and len(ex) <= budget.max_len
        assert ex.prompt == render_fim(TOK, FimPrompt(m["prefix"], m["suffix"], path="pkg/main.py",
                                                      sections=secs)).ids
    assert made >= 10


def test_the_stream_puts_sections_in_its_share_of_fim_prompts() -> None:
    def share(s: float) -> float:
        stream = ExampleStream(DOCS, TOK, Budget(512, 16, 64, 1.0, 0, s), {"fim": 1.0}, seed=3)
        exs = [ex for ex in stream.take(60) if ex.meta.get("path") == "pkg/main.py"]  # util.py's fit less often
        return sum(ex.meta["sections"] > 0 for ex in exs) / len(exs)

    assert share(0.0) == 0.0
    assert 0.25 < share(0.5) < 0.8
    assert share(1.0) > 0.9


def test_a_long_section_is_cut_to_whole_lines_that_fit() -> None:
    from engine.templates import Section
    from engine.train.sections import fit, rendered_tokens

    s = Section("definition", "pkg/long.py", "".join(f"line_{i} = {i}\n" for i in range(50)))
    assert fit(TOK, s, 10_000) is s  # fits whole
    cut = fit(TOK, s, 120)
    assert cut is not None and rendered_tokens(TOK, cut) <= 120 and s.text.startswith(cut.text)
    assert cut.text.endswith("\n") and cut.text.count("\n") >= 3
    assert fit(TOK, s, 30) is None  # not even three lines
    short = Section("open_file", "a.py", "x = 1\n")
    assert fit(TOK, short, 100) is short
