"""Model output never carries U+FFFD: a UTF-8 character split by the end of the output (or invalid bytes
inside it) is decoded without the replacement character (engine/tokenizer.py `decode_content`)."""

from __future__ import annotations

from engine.tokenizer import Tokenizer

TOK = Tokenizer.byte_level()


def test_split_character_at_the_end_is_cut_before_it() -> None:
    ids = TOK.encode("a + é")
    assert len(TOK.encode("é")) == 2  # one token per byte: the last token alone is half a character
    assert TOK.decode(ids[:-1]).endswith("\ufffd")  # what the raw decode would show
    assert TOK.decode_content(ids[:-1]) == "a + "
    assert TOK.decode_content(TOK.encode("x = '😀")[:-1]) == "x = '"  # 4-byte character, 3 bytes kept


def test_invalid_bytes_inside_are_dropped_and_valid_text_is_kept() -> None:
    bad = TOK.encode("é")[1:]  # a lone continuation byte
    assert TOK.decode_content(TOK.encode("ab") + bad + TOK.encode("cd")) == "abcd"
    assert TOK.decode_content(TOK.encode("s = 'é中😀'")) == "s = 'é中😀'"
    assert TOK.decode_content([]) == ""


def test_engine_output_text_has_no_replacement_character() -> None:
    """The real tiny-random engine (random weights: random bytes) decodes through the same path."""
    from engine import Engine
    from engine.templates import FimPrompt

    eng = Engine.load("tiny-random", device="cpu")
    for i in range(3):
        r = eng.infill(FimPrompt(prefix=f"def f{i}(x):\n    return ", suffix="\n", path="a.py"), max_tokens=24)
        assert "\ufffd" not in r.text
