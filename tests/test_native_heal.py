"""Token healing in our own layout (`engine.formats.native`, `engine.decoding.heal`): a FIM prompt that ends inside
a word leaves the cursor line's last pre-tokenizer piece out, and the model spells it again with tokens of its
choosing after the middle token — where the model can heal (block-causal, canvas-aligned, shifted logits)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import torch
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers

from engine import Engine, FimPrompt
from engine.api import InfillCall
from engine.calls import call_request
from engine.config import preset
from engine.formats import HEAL_CHARS
from engine.model import Transformer
from engine.templates import render_fim
from engine.tokenizer import Tokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

WORD = "return"


def spelling_tokenizer(word: str) -> Tokenizer:
    """Byte-level BPE with GPT-2's pre-tokenizer and the merges that spell ``word`` (byte-level text: ``Ġ`` a
    space) one letter at a time: every prefix of it is a token."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    merges, piece = [], word[0]
    for ch in word[1:]:
        merges.append((piece, ch))
        piece += ch
        vocab[piece] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    hf = HFTokenizer(models.BPE(vocab=vocab, merges=merges))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens(["<|endoftext|>"])
    return Tokenizer.with_special_tokens(hf, eos_token="<|endoftext|>")


def merge_tokenizer() -> Tokenizer:
    """`` return`` spelled one letter at a time, so ``' retu'`` has choices: the tokens starting with it
    (`` retu``, `` retur``, `` return``) and its prefixes."""
    return spelling_tokenizer("Ġ" + WORD)


def engine(tok: Tokenizer, seed: int = 3, **kw: object) -> Engine:
    args = preset("tiny", vocab_size=tok.vocab_size, special_tokens=tok.special.as_dict(), **kw)
    return Engine(Transformer(args, init=False).init_random(seed), tok, name="tiny-heal", fast_cpu=False)


TOK = merge_tokenizer()
TYPED = FimPrompt("def f(x):\n    y = x\n    retu", "\n\nprint(f(1))\n", path="m.py")


def test_the_layout_leaves_the_last_piece_out_where_the_model_can_heal() -> None:
    eng = engine(TOK)
    assert TOK.encode("    retu")[-1] == TOK.hf.token_to_id("Ġretu")  # the typed word is one token
    lay = eng.format.fim(TYPED, 8)
    assert lay.heal == " retu" and lay.before == render_fim(TOK, replace(TYPED, prefix=TYPED.prefix[:-5])).ids
    # the rest of the line stays marked behind the prefix (spml); only the prefix ends earlier
    mid = FimPrompt("x = f(ab", ", c)\ny = 2\n", path="m.py")
    lay = eng.format.fim(mid, 8)
    assert lay.heal == "ab" and lay.before == render_fim(TOK, replace(mid, prefix="x = f(")).ids
    assert [label for label, _, _ in lay.parts][-2:] == ["rest", "middle"]
    # an indented empty line: its indentation is healed (the prompt then ends at the line start)
    indent = FimPrompt("def f(x):\n    ", "\n", path="m.py")
    lay = eng.format.fim(indent, 8)
    assert lay.heal == "    " and lay.before == render_fim(TOK, replace(indent, prefix="def f(x):\n")).ids
    # left as typed: a line start (every whole-line hole), a too long piece, and all of the line left of the
    # cursor with text right of it (without it the prefix would end at a line start, where spml renders that text
    # as the suffix's start: the suffix, first in the prompt, prefilled again)
    for prompt in (FimPrompt("def f(x):\n", "    return x\n"), FimPrompt("# " + "=" * (HEAL_CHARS + 1), "\n"),
                   FimPrompt("def f(x):\n    ", "return x\n"), FimPrompt("def f(x):\nre", "turn x\n")):
        lay = eng.format.fim(prompt, 8)
        assert lay.heal == "" and lay.before == render_fim(TOK, prompt).ids
    # a model that cannot heal (logits not shifted, blocks tiling the prompt, bidirectional) keeps the prompt
    for kw in ({"shifted_logits": False}, {"block_align": "absolute"}, {"attention": "bidirectional"}):
        other = engine(TOK, **kw)
        lay = other.format.fim(TYPED, 8)
        assert lay.heal == "" and lay.before == render_fim(TOK, TYPED).ids


def _allowed(tok: Tokenizer, rest: str) -> list[int]:
    """Healing's choices, found here by decoding every id alone: text starting with ``rest`` (no line break) or
    a proper prefix of it."""
    out = []
    for i in range(tok.hf.get_vocab_size(with_added_tokens=False)):
        t = tok.decode([i])
        if (t.startswith(rest) and "\n" not in t) or (t and len(t) < len(rest) and rest.startswith(t)):
            out.append(i)
    return out


def test_the_engine_heals_with_the_models_choice_then_decodes_as_from_that_prompt() -> None:
    eng = engine(TOK)
    req = call_request(eng, InfillCall(TYPED, 8))
    assert req.heal == " retu"
    # the reference: the model's own greedy choice among the allowed tokens, one full forward per choice
    ids, rest, picks = list(req.prompt_tokens), req.heal, []
    with torch.no_grad():
        while rest:
            logits = eng.model(torch.tensor([ids + picks]))[0, -1]
            allowed = _allowed(TOK, rest)
            pick = max(allowed, key=lambda i: float(logits[i]))
            if not picks:  # the constraint matters here: the unconstrained choice is another token
                assert int(logits.argmax()) not in allowed
            picks.append(pick)
            text = TOK.decode([pick])
            rest = rest[len(text):] if len(text) < len(rest) else ""
    lead = TOK.decode(picks)[len(" retu"):]
    res = eng.generate_batch([req])[0]
    assert res.lead_tokens == picks and res.lead == lead and res.text.startswith(lead)
    # ... and the canvas decodes as it would after a prompt that ended with those tokens
    plain = eng.generate_batch([replace(req, prompt_tokens=ids + picks, heal="", cache_key=None)])[0]
    assert res.tokens == plain.tokens and res.text == lead + plain.text and plain.lead == ""
    assert res.prompt_tokens == len(ids) + len(picks)
    # another keystroke in the same word (``retur`` → ``retu``, a backspace) leaves the prompt before the piece as it
    # was: its KV and the hidden state healing started from are kept (`Slot.heal_from`), nothing is prefilled
    # again, and the answer is the one computed from scratch
    again = eng.infill(replace(TYPED, prefix=TYPED.prefix + "r"), max_tokens=8, cache_key="doc")
    typed = eng.infill(TYPED, max_tokens=8, cache_key="doc")
    assert again.cached_tokens == 0 and typed.cached_tokens == len(ids)
    assert (typed.tokens, typed.lead, typed.lead_tokens) == (res.tokens, res.lead, res.lead_tokens)
    assert typed.forwards == res.forwards - 1  # the prompt's last token: not run again


def test_a_healed_single_line_past_its_budget_answers_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past its budget a single line answers "" (finish "budget"): the healed piece of the word alone, with no
    decoded token behind it, is not an answer (it had no confidence to gate on: score 0)."""
    import engine.decoding.echo as echo
    import engine.decoding.stops as stops

    eng = engine(TOK)
    whole = eng.complete([InfillCall(TYPED, 8, single_line=True, budget_ms=60_000)])[0]
    assert whole.lead and whole.text.startswith(whole.lead) and whole.finish_reason != "budget"
    clock = [0.0]

    def tick() -> float:  # every look at the clock is 0.1 s later
        clock[0] += 0.1
        return clock[0]

    monkeypatch.setattr(stops.time, "monotonic", tick)
    monkeypatch.setattr(echo.time, "monotonic", tick)
    cut = eng.complete([InfillCall(TYPED, 8, single_line=True, budget_ms=100)])[0]
    assert cut.finish_reason == "budget" and cut.text == "" and cut.lead == whole.lead


# -- the choice between a prefix of the piece and a token spelling all of it ------------------------------

class _ScriptedModel:
    """A model whose next-token logits depend only on the prompt's last token (``table``; else flat): the
    hidden state it returns is that token id."""

    def __init__(self, vocab: int, table: dict[int, dict[int, float]]) -> None:
        self.vocab, self.table = vocab, table

    def __call__(self, ids: torch.Tensor, **_: object) -> torch.Tensor:
        return ids.float()[..., None]

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(1, 1, self.vocab)
        for i, v in self.table.get(int(h.flatten()[0]), {}).items():
            out[0, 0, i] = v
        return out


class _KV:
    def __init__(self, length: int) -> None:
        self.length = length

    def ensure(self, n: int) -> None:
        pass


def _job(prompt: list[int]) -> Any:
    from types import SimpleNamespace

    last = torch.tensor([float(prompt[-1])])
    slot = SimpleNamespace(tokens=list(prompt), last_hidden=last, heal_from=None)
    return SimpleNamespace(prompt=list(prompt), kv=_KV(len(prompt)), slot=slot, ctx=len(prompt), base=len(prompt),
                           last_hidden=last, forwards=0, den=SimpleNamespace(spec=SimpleNamespace(length=8)),
                           timings={}, heal="pyth", healed="", healed_ids=[])


def test_a_prefix_pick_must_be_worth_its_whole_path() -> None:
    from types import SimpleNamespace

    from engine.decoding import heal

    tok = spelling_tokenizer("python")
    tid = tok.hf.token_to_id
    fence, nl = tid("`"), tid("Ċ")
    tok_choices = {tok.texts()[i] for i in heal.choices(SimpleNamespace(tokenizer=tok), "pyth")}
    assert {"pyth", "pytho", "python", "p", "py", "pyt"} <= tok_choices
    # after the fence "py" beats "python" — but after "py" a line break is what comes, not "th…"
    table = {fence: {tid("py"): 9.0, tid("python"): 8.0}, tid("py"): {nl: 12.0}}
    eng = SimpleNamespace(tokenizer=tok, model=_ScriptedModel(tok.vocab_size, table), block_size=4,
                          device=torch.device("cpu"))
    j = _job([tid("x"), fence])
    heal.heal(eng, j)
    assert tok.decode(j.healed_ids) == "python" and j.healed == "on"
    assert j.forwards == 2  # the look-ahead after "py", then the pick
    # where "py" is followed by what spells the rest, the prefix path wins, and the word is still "pyth…"
    table[tid("py")] = {tid("t"): 12.0}
    j = _job([tid("x"), fence])
    heal.heal(eng, j)
    assert [tok.decode([i]) for i in j.healed_ids] == ["py", "t", "h"] and j.healed == ""
    # the look-ahead is taken back: the state after it is the state before it
    j = _job([tid("x"), fence])
    before = (list(j.prompt), j.kv.length, j.ctx, j.base, list(j.slot.tokens))
    assert heal._peek(eng, j, tid("py"), [tid("t")]) > -1.0
    assert (list(j.prompt), j.kv.length, j.ctx, j.base, list(j.slot.tokens)) == before
    assert int(j.last_hidden[0]) == fence and int(j.slot.last_hidden[0]) == fence
