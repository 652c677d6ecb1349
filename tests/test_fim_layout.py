"""The ``spml`` FIM prompt order: the rest of the cursor's line goes behind the prefix, so moving the
cursor along its line, Enter at its end and auto-closed brackets re-prefill that line only."""

from __future__ import annotations

import pytest

from engine import Engine
from engine.templates import DEFAULT_FIM_LAYOUT, FimPrompt, Section, render_fim
from engine.tokenizer import Tokenizer

TOK = Tokenizer.byte_level()
SECTIONS = (Section("definition", "lib.py", "def area(w, h):\n    return w * h\n"),)
BODY = "".join(f"    total_{i} = area({i}, scale) + offset\n" for i in range(30))
TEXT = f"def main(scale, offset):\n{BODY}    return total_0\n"


def _prompt(text: str, cursor: int, layout: str) -> list[int]:
    p = FimPrompt(text[:cursor], text[cursor:], path="geo.py", sections=SECTIONS, layout=layout)  # type: ignore[arg-type]
    return render_fim(TOK, p).ids


def _lcp(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _recomputed(before: tuple[str, int], after: tuple[str, int], layout: str) -> int:
    """Prompt tokens after the longest common prefix: what the prefix KV cache must prefill again."""
    old, new = _prompt(*before, layout), _prompt(*after, layout)
    return len(new) - _lcp(old, new)


def test_spml_is_the_default_and_renders_the_line_rest_behind_the_prefix() -> None:
    assert DEFAULT_FIM_LAYOUT == "spml" and FimPrompt("", "").layout == "spml"
    sp = TOK.special
    r = render_fim(TOK, FimPrompt("x = f(a", ", b)\ny = 2\n", path="m.py"))
    labels = [label for label, _, _ in r.parts]
    assert labels == ["header", "suffix", "prefix", "rest", "middle"]
    span = {label: r.ids[s:e] for label, s, e in r.parts}
    assert span["suffix"] == [sp.fim_suffix, *TOK.encode("\ny = 2\n")]
    assert span["prefix"] == [sp.fim_prefix, *TOK.encode("x = f(a")]
    assert span["rest"] == [sp.cursor, *TOK.encode(", b)")]
    assert r.ids[-1] == sp.fim_middle
    # no line end in the suffix: all of it is the cursor line's rest
    r = render_fim(TOK, FimPrompt("print(", ")", path="m.py"))
    assert [label for label, _, _ in r.parts][-4:] == ["suffix", "prefix", "rest", "middle"]
    assert r.ids[r.parts[-4][1]:r.parts[-4][2]] == [sp.fim_suffix]


@pytest.mark.parametrize("prefix,suffix", [("def f():\n    return ", "\n\nprint(f())\n"), ("x = 1", ""),
                                           ("a\n", "\nb\n"), ("def f():\n", "    return 1\n"), ("", "x = 1\n")])
def test_spml_equals_spm_at_a_line_end_or_start(prefix: str, suffix: str) -> None:
    """A request at a line end (empty line, end of line, end of file) or a line start (a whole-line
    hole: HumanEval-infilling's single- and multi-line splits) renders exactly as ``spm``: the prompts
    of models trained on ``spm`` do not change there."""
    spml = render_fim(TOK, FimPrompt(prefix, suffix, path="m.py", sections=SECTIONS))
    spm = render_fim(TOK, FimPrompt(prefix, suffix, path="m.py", sections=SECTIONS, layout="spm"))
    assert spml.ids == spm.ids


def test_cursor_moves_on_its_line_and_enter_reprefill_one_line() -> None:
    line = "    total_7 = area(7, scale) + offset\n"
    start = TEXT.index(line)
    mid = start + line.index(" + offset")  # typing mid-line (single-line requests)
    end = start + len(line) - 1  # the same line's end
    enter = TEXT[:end] + "\n    " + TEXT[end:]  # Enter there, indented: a multi-line request
    window = len(_prompt(TEXT, mid, "spm")) - len(_prompt("", 0, "spm"))
    assert window > 1000
    # spm: the suffix comes first and starts at the cursor, so each of these re-prefills the window
    assert _recomputed((TEXT, mid), (TEXT, end), "spm") > window // 2
    assert _recomputed((TEXT, mid), (enter, end + 5), "spm") > window // 2
    # spml: only the cursor line's rest and what follows the old cursor on it
    assert _recomputed((TEXT, mid), (TEXT, end), "spml") <= len(" + offset") + 2
    assert _recomputed((TEXT, mid), (enter, end + 5), "spml") <= len(" + offset\n    ") + 2


def test_auto_closed_bracket_reprefills_the_line_rest_only() -> None:
    start = TEXT.index("    total_3 = ")
    cur = start + len("    total_3 = ")
    typed = TEXT[:cur] + "max()" + TEXT[cur:]  # "max(" typed, the editor closed the bracket
    assert _recomputed((TEXT, cur), (typed, cur + 4), "spm") > 1000
    assert _recomputed((TEXT, cur), (typed, cur + 4), "spml") <= len("max()area(3, scale) + offset") + 3


def test_engine_reuses_the_prefix_cache_after_enter() -> None:
    """End to end through the engine's prefix cache (tiny random model): the request after Enter at
    the end of the line reuses every prompt token up to the old cursor."""
    eng = Engine.load("tiny-random", device="cpu")
    line = "    total_2 = area(2, scale) + offset\n"
    start = TEXT.index(line)
    mid, end = start + line.index(" + offset"), start + len(line) - 1
    enter = TEXT[:end] + "\n    " + TEXT[end:]
    a = FimPrompt(TEXT[:mid], TEXT[mid:], path="geo.py")
    b = FimPrompt(enter[:end + 5], enter[end + 5:], path="geo.py")
    eng.infill(a, max_tokens=4, cache_key="geo")
    res = eng.infill(b, max_tokens=4, cache_key="geo")
    block = eng.block_size
    assert res.prompt_tokens - res.cached_tokens <= len(eng.tokenizer.encode(" + offset\n    ")) + 2 + block
    assert res.cached_tokens > res.prompt_tokens // 2
