"""Token healing: the prompt's last piece of typed text chosen again by the model, among the tokens that spell it.

A prompt that ends inside what the tokenizer would make one token (``    retu`` before ``rn``, ``x.app`` before
``end``) asks the model to continue from a split it never saw in training: ``    return`` is always
``'   ', ' return'``, never ``'   ', ' ret', 'urn'``. A layout that ends in text the user typed (Qwen's FIM: the
cursor's line, `engine.formats.qwen`; our own layout's prefix, `engine.formats.native`) leaves out the line's
last pre-tokenizer piece (no token crosses a piece's start) and names its text (`engine.formats.Layout.heal`)
— except whitespace typed after text on the line (``return ``), which stays in the prompt as typed
(`engine.formats.typed_whitespace` says why).
After the prefill the model picks, greedily, among the tokens whose text starts with the piece or is a proper
prefix of it (then again for what is left), the picks are committed like prompt tokens, and the output's text
starts with what they add past the piece (``rn``). A token that would add a line break is not a choice: the
canvas starts on the cursor's line, where its stop rules expect it. A piece no whole token spells (a character
the vocabulary holds only as bytes) goes in as typed. (Guidance calls this token healing; llama.cpp's
``/infill`` does without it.)
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from engine.config import ModelArgs
    from engine.decoding.steps import DecodeJob, StepRunner


def supported(args: ModelArgs) -> bool:
    """Whether a model can heal: its canvas follows the prompt (block-causal, blocks counted from the canvas, so
    tokens committed after the prompt move the canvas without changing its blocks) and the logits at the
    prompt's last position choose the next token (shifted logits)."""
    return args.attention == "block_causal" and args.block_align == "canvas" and args.shifted_logits


def choices(eng: StepRunner, text: str) -> list[int]:
    """The tokens that may come next while ``text`` is still to be written: those starting with it (adding no
    line break) and those that are a proper prefix of it (the rest of ``text`` is then chosen again)."""
    tok = eng.tokenizer  # ``text`` is part of one line: a token starting with it adds a line break iff it holds one
    return tok.ids_starting_with(text, line_breaks=False) + tok.ids_of_prefixes(text)


def heal(eng: StepRunner, j: DecodeJob) -> None:
    """Choose and commit the healed token(s) after ``j``'s prefilled prompt (their KV, the slot's tokens, the last
    hidden state) and set ``j.healed`` to the text they add after ``j.heal``. Usually one token; two or more
    where the natural split puts part of ``j.heal`` in an earlier token (``'    '`` → ``'   '``, ``' return'``).
    What no whole token spells (a character the vocabulary has only as bytes) goes in as typed, unhealed. A pick
    without a choice (one token spells what is left) costs no logits; the picks go in with one forward per choice
    made after them, plus one (and a look-ahead, taken back, where a prefix of the piece competes with a token
    spelling all of it: `_choose`)."""
    t0 = time.perf_counter()
    assert j.last_hidden is not None and j.slot is not None
    n0 = len(j.prompt)
    j.slot.heal_from = (list(j.prompt), j.last_hidden.clone())  # where the next keystroke in this word starts
    rest, pending = j.heal, []  # picks not committed yet: a choice needs the logits after them, a forced pick not
    while rest:
        ids = choices(eng, rest)
        if not ids:  # no whole token spells it: as typed
            pending.extend(eng.tokenizer.encode(rest))
            break
        if len(ids) > 1:
            if pending:
                _commit(eng, j, pending)
                pending = []
            pick = _choose(eng, j, rest, ids)
        else:
            pick = ids[0]
        text = eng.tokenizer.texts()[pick]
        rest, j.healed = (rest[len(text):], "") if len(text) < len(rest) else ("", text[len(rest):])
        pending.append(pick)
    if pending:  # one forward for the last picks (the decoder's first step reads the hidden state after them)
        _commit(eng, j, pending)
    j.healed_ids = j.prompt[n0:]
    ms = (time.perf_counter() - t0) * 1e3
    j.timings["heal_ms"] = ms
    j.timings["prefill_ms"] = j.timings.get("prefill_ms", 0.0) + ms  # part of readying the prompt


def _logprobs(eng: StepRunner, j: DecodeJob) -> torch.Tensor:
    """Log-probabilities of the next token after ``j``'s prompt (the whole vocabulary)."""
    assert j.last_hidden is not None
    return torch.log_softmax(eng.model.logits(j.last_hidden[None, None])[0, 0].float(), dim=-1)


def _choose(eng: StepRunner, j: DecodeJob, rest: str, ids: list[int]) -> int:
    """The next healed token among ``ids`` (`choices` for ``rest``). Greedy, except where the best is a proper
    prefix of ``rest`` and a token spelling all of it is also a choice: a prefix pick is a promise that the
    model goes on spelling ``rest`` next, which it may not want to (after a code fence, ``py`` beats
    ``python``, and then ``th`` is not what follows ``py``: the word came out ``pytht``). So the prefix's
    path is scored as a whole — its log-probability plus that of every token that could continue it (one
    look-ahead forward, taken back) — against the best whole token's."""
    lp = _logprobs(eng, j)
    toks = [(float(lp[i]), i, eng.tokenizer.texts()[i]) for i in ids]
    whole = max(((v, i) for v, i, t in toks if len(t) >= len(rest)), default=None)
    part = max(((v, i, t) for v, i, t in toks if len(t) < len(rest)), default=None)
    if whole is None or part is None or part[0] <= whole[0]:
        return max(toks)[1]
    after = rest[len(part[2]):]
    then = choices(eng, after) or eng.tokenizer.encode(after)[:1]  # no whole token spells it: as typed
    path = part[0] + _peek(eng, j, part[1], then)
    return part[1] if path > whole[0] else whole[1]


def _peek(eng: StepRunner, j: DecodeJob, pick: int, then: list[int]) -> float:
    """The log of the probability mass ``then`` holds after ``pick`` follows ``j``'s prompt: ``pick`` goes in
    with one forward, which is then taken back (the cache's length, the prompt, the hidden state)."""
    assert j.kv is not None and j.slot is not None
    saved = (j.kv.length, len(j.prompt), j.ctx, j.base, j.last_hidden, list(j.slot.tokens), j.slot.last_hidden)
    forward(eng, j, [pick])
    lp = _logprobs(eng, j)
    j.kv.length, n, j.ctx, j.base, j.last_hidden, j.slot.tokens, j.slot.last_hidden = saved
    del j.prompt[n:]
    return float(torch.logsumexp(lp[torch.tensor(then, device=lp.device)], dim=0))


def _commit(eng: StepRunner, j: DecodeJob, ids: list[int]) -> None:
    """Append ``ids`` to ``j``'s prompt as prompt, through the engine's prefill hook where it has one (an aligned
    engine encodes a prompt's last token by its policy, the others by its reference)."""
    hook = getattr(eng, "prefill_hook", None)
    if hook is None:
        forward(eng, j, ids)
    else:
        hook.extend(j, ids, lambda job, new: forward(eng, job, new))


def forward(eng: StepRunner, j: DecodeJob, ids: list[int]) -> None:
    """Append ``ids`` to ``j``'s prompt: their KV in its slot, the slot's tokens, the last hidden state."""
    assert j.kv is not None and j.slot is not None
    kv, at = j.kv, j.ctx
    kv.ensure(at + len(ids) + j.den.spec.length + eng.block_size)
    kv.length = at
    h = eng.model(torch.tensor([ids], device=eng.device), offset=at, cache=kv, is_causal=len(ids) > 1,
                  logits_slice=slice(0, 0))
    j.forwards += 1
    j.prompt.extend(ids)
    j.ctx = j.base = kv.length = at + len(ids)
    j.last_hidden = h[0, -1]
    j.slot.tokens, j.slot.last_hidden = list(j.prompt), j.last_hidden
