"""Infill / rewrite calls → decode requests in the loaded model's own prompt format, and results back.

`Engine` picks its format once after loading (`pick_format`: the registry entry's, `engine.formats`;
our native layout for the default model and anything without an entry, so those prompts are exactly
`engine.templates`' output). A call becomes a `FormatRequest`: the tokens before the canvas, the
canvas, and — for in-place infilling of bidirectional models — the tokens *after* it, the format's
stop tokens and DreamOn's expand token. A format that cannot serve a call raises
`FormatNotSupported` (a ``ValueError`` whose message says why) before any decoding starts.
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.api import Call, InfillCall
from engine.decoding.echo import echo_for_edit, echo_for_fim
from engine.decoding.heal import supported as heal_supported
from engine.decoding.policy import resolve, rewrite_sampler, variant_sampler
from engine.decoding.stops import empty_line_scope
from engine.formats import FormatNotSupported, PromptFormat, for_model
from engine.templates import FimPrompt
from engine.types import STOP_RULE_KINDS, CanvasSpec, GenerateRequest, GenerateResult

if TYPE_CHECKING:
    from engine.decoding.steps import StepRunner


@dataclass
class FormatRequest(GenerateRequest):
    """A `GenerateRequest` with the rest of a `engine.formats.Layout`."""

    after: list[int] = field(default_factory=list)  # tokens after the canvas (in-place infilling)
    stop_ids: frozenset[int] = frozenset()  # tokens that end the output besides the tokenizer's ends
    expand_id: int | None = None  # DreamOn: variable-length canvas (engine.decoding.expand)
    # the layout's `reply`: the spans of a rewrite's text that make the new region
    reply: Callable[[str], list[tuple[int, int]]] | None = None
    heal: str = ""  # the layout's token healing: typed text the prompt left out (`engine.decoding.heal`)


def pick_format(tok: Any, meta: dict[str, Any], args: Any) -> PromptFormat:
    """The loaded model's format; native (our layout) without a registry entry. The native layout heals the
    cursor line's last piece where the model can (`engine.decoding.heal.supported`)."""
    return for_model(tok, meta, block_size=args.block_size, heal=heal_supported(args))


def _round(n: int, b: int) -> int:
    return -(-n // b) * b


LINE_FLOOR = 100  # characters a completed line may always reach
LINE_SLACK = 20  # ... and this many past the longest line of the code around it


def line_room(prompt: FimPrompt) -> int:
    """Characters a single-line completion may add before its line outgrows every line of the window
    around it (at least `LINE_FLOOR`) by `LINE_SLACK`: past that it is a degenerate line — ``()()()()…``,
    ``a, b, b, b, …`` — that would otherwise run to the token cap (64 steps, ~1.3 s on a 2-core CPU)."""
    longest = max((len(ln.expandtabs(4)) for ln in (prompt.prefix + prompt.suffix).split("\n")), default=0)
    line = prompt.prefix.rsplit("\n", 1)[-1].expandtabs(4)
    return max(8, max(LINE_FLOOR, longest) + LINE_SLACK - len(line))


def call_request(eng: StepRunner, c: Call) -> FormatRequest:
    b = eng.block(c.sampler)
    cfg = resolve(c.sampler, eng.sampler)
    fmt: PromptFormat = eng.format
    if isinstance(c, InfillCall):
        lay = fmt.fim(c.prompt, c.max_tokens)
        line = c.prompt.prefix.rsplit("\n", 1)[-1]
        scope = None if c.single_line or not cfg.stop_at_scope else empty_line_scope(c.prompt.prefix) \
            if line == "" else len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip(" "))
        lines = None if c.single_line else c.max_lines
        echo = echo_for_fim(c.prompt.prefix, c.prompt.suffix, c.prompt.path, c.single_line)
        # a multi-line middle: from the request, then its finished lines; a single line: from its first
        # token (a cold prefill is not its fault), then nothing (`budget_cut`)
        deadline = None if c.single_line or not c.budget_ms else time.monotonic() + c.budget_ms / 1e3
        line_budget = c.budget_ms / 1e3 if c.single_line and c.budget_ms else None
        if lay.in_place:  # the number of masks between prefix and suffix is part of the prompt
            spec = CanvasSpec(lay.canvas, single_line=c.single_line, scope_indent=scope, max_lines=lines,
                              stop_loops=not c.single_line, echo=echo, deadline=deadline,
                              decode_budget_s=line_budget)
        else:
            spec = CanvasSpec(_round(lay.canvas, b), single_line=c.single_line, keep=c.max_tokens,
                              scope_indent=scope, max_lines=lines, stop_loops=not c.single_line,
                              max_chars=line_room(c.prompt) if c.single_line else None, echo=echo,
                              deadline=deadline, decode_budget_s=line_budget)
    else:
        lay = fmt.edit(c.prompt, b)
        spec = CanvasSpec(_round(lay.canvas, b), stop_loops=True,
                          echo=echo_for_edit(c.prompt.region, c.prompt.after, c.prompt.path))
    if lay.in_place and eng.args.attention != "bidirectional":
        raise FormatNotSupported(f"{fmt.name}: in-place infilling needs a bidirectional model "
                                 f"(this one is {eng.args.attention})")
    # a greedy rewrite at width 1 with its region as drafts; a sampled alternative (drafts verify only
    # greedy tokens) keeps the engine's window
    sampler = c.sampler if isinstance(c, InfillCall) else \
        variant_sampler(cfg, c.variant) if c.variant else rewrite_sampler(c.sampler, cfg)
    return FormatRequest(lay.before, spec, sampler, c.cache_key, c.abort, after=list(lay.after),
                         stop_ids=lay.stop_ids, expand_id=lay.expand_id, reply=lay.reply,
                         heal=lay.heal)


def call_result(eng: StepRunner, c: Call, res: GenerateResult, req: FormatRequest) -> GenerateResult:
    """``res`` as the call's answer: an infill cut to its tokens; a rewrite without the cursor token, its
    text through the format's ``reply`` (``req``: the call's request), the confidences of its changes."""
    if isinstance(c, InfillCall):
        if len(res.tokens) > c.max_tokens:
            res.tokens, res.confidences = res.tokens[:c.max_tokens], res.confidences[:c.max_tokens]
            res.text = res.lead + eng.text(res.tokens, c.single_line)
            res.finish_reason = "length"
        return res
    cur = eng.tokenizer.special.cursor
    keep = [i for i, t in enumerate(res.tokens) if t != cur]
    res.tokens = [res.tokens[i] for i in keep]
    res.confidences = [res.confidences[i] for i in keep]
    text = eng.text(res.tokens, False)  # the cursor marker decodes to nothing: a stop rule's cut holds
    res.text = text[:len(res.text)] if res.finish_reason in STOP_RULE_KINDS else text
    if req.reply is not None:
        _keep_spans(eng, res, req.reply(res.text))
    region = c.prompt.region
    res.changed = edit_confidences(eng.tokenizer.encode(region[:c.prompt.cursor]) +
                                   eng.tokenizer.encode(region[c.prompt.cursor:]), res.tokens, res.confidences)
    return res


def _keep_spans(eng: StepRunner, res: GenerateResult, spans: list[tuple[int, int]]) -> None:
    """``res`` cut to these spans of its text, with the tokens that decode into them (a token that straddles
    a span's edge stays): what the reply dropped — a re-typed marker — then neither shows nor counts as a
    change the gate scores."""
    if spans == [(0, len(res.text))]:
        return
    ends, top = [], 0
    for i in range(1, len(res.tokens) + 1):  # each token's end in the text (a split character: no advance)
        top = max(top, len(eng.text(res.tokens[:i], False)))
        ends.append(top)
    starts = [0, *ends[:-1]]
    keep = [i for i, (a, b) in enumerate(zip(starts, ends, strict=True))
            if any(a < e and b > s for s, e in spans)]
    res.tokens = [res.tokens[i] for i in keep]
    res.confidences = [res.confidences[i] for i in keep]
    res.text = "".join(res.text[s:e] for s, e in spans)


def edit_confidences(source: list[int], out: list[int], confidences: list[float]) -> list[float]:
    """The confidences of the output tokens that make the edit: those a token-level diff of ``out`` against
    ``source`` (the editable region) does not match. A rewrite copies most of its region at confidence ~1,
    so the mean over every token says little about the change; this is what the gate scores an edit on.
    A pure deletion has no new token: the token right after it (the one that skips ahead) stands for it,
    else the one before. An unchanged copy gives []."""
    picked: list[int] = []
    ops = difflib.SequenceMatcher(a=source, b=out, autojunk=False).get_opcodes()
    for tag, _, _, j1, j2 in ops:
        if tag in ("replace", "insert"):
            picked.extend(range(j1, j2))
        elif tag == "delete" and out:
            picked.append(min(j1, len(out) - 1))
    return [confidences[j] for j in sorted(set(picked))]
