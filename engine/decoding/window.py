"""Window decoding for block-causal models: compute only the positions a step can use.

The trained layout denoises a whole 32-token block per step. On a CPU a step over T positions costs
about as much as T / 3 autoregressive steps (docs/PERFORMANCE.md), so when the model unmasks about
one token per step most of that work is wasted. Window mode instead keeps

* a *decided prefix* of the canvas, committed to the KV cache as it grows (clean tokens, causal —
  the commit of a finished block in the trained layout, one token at a time), and
* a *window* of ``W`` positions after it: the first is predicted from the last committed token's
  hidden state (shifted logits — no forward position needed), the others from the ``W - 1`` masked
  inputs that follow it (bidirectional among themselves, as a noisy block).

Each step decides the window's first position (plus every other one above the threshold), so a
step costs ``pending + W - 1`` positions and ``W = 1`` is exactly autoregressive decoding. The
adaptive policy halves ``W`` after a step that unmasked one token and doubles it when every window
position was confident. At ``W = 1``, prompt lookup drafts (the tokens that followed the last
n-gram where it occurs in the prompt or output) are verified in the same forward, causally: greedy
output is identical to plain ``W = 1`` decoding, but a copied span costs one forward.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from engine import options
from engine.types import FinishReason, SamplerConfig

if TYPE_CHECKING:
    from engine.caches.prefix import KVCache
    from engine.decoding.steps import Job, StepRunner

ENV = options.DECODE
NGRAM = (3, 2)  # prompt-lookup match lengths, longest first


def parse_decode(text: str) -> dict[str, Any]:
    """``EDIT_SERVER_DECODE`` value → SamplerConfig fields (``ar`` = window 1, no drafts)."""
    out: dict[str, Any] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part.startswith("spec="):
            out["speculate"] = int(part[5:])
        elif part == "ar":
            out.update(window=1, speculate=out.get("speculate", 0))
        elif part in ("block", "adaptive"):
            out["window"] = part
        elif part.isdigit() and int(part) > 0:
            out["window"] = int(part)
        else:
            raise ValueError(f"{ENV}={text!r}: expected block, adaptive, ar or a window size, "
                             "optionally followed by ,spec=K")
    return out


def default_sampler(device: torch.device, block_causal: bool) -> SamplerConfig:
    """The engine's default: adaptive window + drafts on a CPU, the trained block elsewhere;
    ``$EDIT_SERVER_DECODE`` overrides."""
    cpu = device.type == "cpu" and block_causal
    cfg = SamplerConfig(window="adaptive" if cpu else "block", speculate=8 if cpu else 0)
    env = options.env().decode
    return replace(cfg, **parse_decode(env)) if env else cfg


def want_fast_cpu(flag: bool | None, meta: dict[str, Any], device: torch.device, args: Any) -> bool:
    """The int8 CPU path (engine.cpu.fastcpu): ``flag``, else ``$EDIT_SERVER_FASTCPU`` (0/1), else on for
    checkpoints whose loader vouches for it (``meta["fast_cpu"]``: the default model, whose quality
    was measured with it), block-causal models on a CPU only."""
    if device.type != "cpu" or args is not None and args.attention != "block_causal":
        return False
    if flag is not None:
        return flag
    env = options.env().fast_cpu
    return env if env is not None else bool(meta.get("fast_cpu"))


def resolve(cfg: SamplerConfig | None, default: SamplerConfig) -> SamplerConfig:
    """``cfg`` with its engine-chosen fields (None) filled from ``default``."""
    if cfg is None:
        return default
    fill = {k: getattr(default, k) for k in ("window", "speculate") if getattr(cfg, k) is None}
    return replace(cfg, **fill) if fill else cfg


# ---- stop rules ----------------------------------------------------------------------------------
def _columns(line: str) -> int:
    n = 0
    for c in line:
        if c == " ":
            n += 1
        elif c == "\t":
            n += 4
        else:
            break
    return n


def scope_cut(text: str, base: int) -> int | None:
    """Character offset where a multi-line completion leaves the cursor's block: the start of the
    first non-blank line after the first that is indented less than ``base`` columns or follows
    two blank lines (the gate's cut, ``selectivity.gate``); None while it has not."""
    pos = text.find("\n")
    blanks = 0
    while pos >= 0:
        start = pos + 1
        end = text.find("\n", start)
        line = text[start:] if end < 0 else text[start:end]
        if line.strip():
            if _columns(line) < base or blanks >= 2:
                return start
            blanks = 0
        elif end >= 0:
            blanks += 1
        pos = end
    return None


def lines_cut(text: str, max_lines: int) -> int | None:
    """Character offset after the ``max_lines``-th line's newline (the output's last line ends there);
    None while the text has fewer line ends."""
    pos = -1
    for _ in range(max_lines):
        pos = text.find("\n", pos + 1)
        if pos < 0:
            return None
    return pos


# a unit of 1-40 characters repeated 4+ times in a row
_LOOP = re.compile(r"(.{1,40}?)\1{3,}", re.DOTALL)
LOOP_MIN_CHARS = 16  # an inline loop spans at least this many characters
LOOP_WORD_CHARS = 2  # ... and its unit holds this many word characters (not "----", "0, ", "aaaa")
LOOP_LINES = 3  # the same non-blank line this many times in a row


def loop_cut(text: str, reference: str = "") -> int | None:
    """Character offset after the first occurrence of the earliest loop in ``text`` that ``reference``
    (the code the model was shown: the prompt, the old region) does not contain, or None.

    A loop is the same non-blank line `LOOP_LINES` times in a row (complete lines: the last may still
    grow), or a unit of 1-40 characters with `LOOP_WORD_CHARS`+ word characters repeated 4+ times over
    `LOOP_MIN_CHARS`+ characters ("cfg: Config, cfg: Config, ...", "self.self.self.self."). Separators,
    runs of one character and number lists are code, not loops; so is any repetition the reference
    holds. The gate cuts a completion there (`selectivity.gate`) and the decoder stops there
    (`scope_rule`): what follows a loop is never shown."""
    cuts: list[int] = []
    lines, pos, run = text.split("\n")[:-1], 0, 0
    for i, ln in enumerate(lines):
        run = run + 1 if i and ln.strip() and ln == lines[i - 1] else 1
        if run == LOOP_LINES and (ln + "\n") * LOOP_LINES not in reference:
            first = pos - (LOOP_LINES - 1) * (len(ln) + 1)
            cuts.append(first + len(ln) + 1)
            break
        pos += len(ln) + 1
    for m in _LOOP.finditer(text):
        unit = m.group(1)
        if (len(m.group(0)) >= LOOP_MIN_CHARS and sum(c.isalnum() or c == "_" for c in unit) >= LOOP_WORD_CHARS
                and m.group(0) not in reference):
            cuts.append(m.start() + len(unit))
            break
    return min(cuts) if cuts else None


def text_stop(text: str, scope: int | None, max_lines: int | None,
              loops: str | None = None, max_chars: int | None = None) -> tuple[int, FinishReason] | None:
    """The earliest of the scope cut, the line cap, (``loops``: the reference text) a loop and the
    character cap, with its kind ("scope" / "loop" / "long"); None: none reached."""
    long = max_chars if max_chars is not None and len(text) > max_chars else None
    cuts: list[tuple[int, FinishReason]]
    cuts = [(c, k) for c, k in ((None if scope is None else scope_cut(text, scope), "scope"),
                                (None if not max_lines else lines_cut(text, max_lines), "scope"),
                                (None if loops is None else loop_cut(text, loops), "loop"),
                                (long, "long")) if c is not None]
    return min(cuts) if cuts else None


def scope_rule(decode: Callable[[list[int]], str], base: int | None, max_lines: int | None = None,
               loops: str | None = None, max_chars: int | None = None
               ) -> Callable[[list[int]], tuple[int, FinishReason] | None] | None:
    """Denoiser stop rule: (tokens to keep so the text reaches the scope cut, the line cap, the first
    loop or ``max_chars`` characters, its kind), or None; no rule when nothing is asked for. ``loops``:
    stop at loops that this reference text (the prompt's) does not hold."""
    if base is None and not max_lines and loops is None and max_chars is None:
        return None

    def rule(ids: list[int]) -> tuple[int, FinishReason] | None:
        stop = text_stop(decode(ids), base, max_lines, loops, max_chars)
        if stop is None:
            return None
        cut, kind = stop
        lo, hi = 1, len(ids)  # smallest k whose text covers the cut
        while lo < hi:
            mid = (lo + hi) // 2
            if len(decode(ids[:mid])) >= cut:
                hi = mid
            else:
                lo = mid + 1
        return lo, kind
    return rule


# ---- prompt lookup -------------------------------------------------------------------------------
class Lookup:
    """Drafts from the prompt and the output so far: after the latest earlier occurrence of the
    sequence's last n tokens, the tokens that followed it."""

    def __init__(self, prompt: list[int]) -> None:
        self.seq: list[int] = []
        self.index: dict[tuple[int, ...], int] = {}  # n-gram -> end of its latest occurrence
        self.push(prompt)

    def push(self, ids: list[int]) -> None:
        """Append ``ids``; every n-gram ending before the new last token is indexed (the tail's own
        n-gram would only point at itself)."""
        s, old = self.seq, len(self.seq)
        s.extend(ids)
        for end in range(max(1, old), len(s)):
            for n in NGRAM:
                if end >= n:
                    self.index[tuple(s[end - n:end])] = end

    def draft(self, k: int) -> list[int]:
        s = self.seq
        for n in NGRAM:
            end = self.index.get(tuple(s[-n:])) if len(s) >= n else None
            if end is not None:
                return s[end:end + k]
        return []


# ---- the loop ------------------------------------------------------------------------------------
def step_mask(ctx: int, pending: int, window: int, device: torch.device) -> Tensor | None:
    """(T, S) mask: pending tokens causal, window inputs see everything (None when not needed)."""
    t = pending + window
    if pending <= 1 and window == 0 or pending == 0:
        return None
    q = torch.arange(t, device=device)
    lim = torch.where(q < pending, ctx + q + 1, torch.full_like(q, ctx + t))
    return torch.arange(ctx + t, device=device)[None, :] < lim[:, None]


class WindowDecoder:
    """Decodes one job of `engine.Engine` in window mode (see the module docstring)."""

    def __init__(self, eng: StepRunner, job: Job) -> None:
        self.eng, self.j = eng, job
        den = job.den
        cfg = den.cfg
        self.shifted = eng.args.shifted_logits
        wmax = cfg.window_max or eng.block_size
        if den.spec.single_line:
            wmax = min(wmax, cfg.single_line_window)
        self.adaptive = cfg.window == "adaptive"
        self.wmax = max(1, wmax if self.adaptive else min(int(cfg.window or 1), wmax))  # type: ignore[arg-type]
        self.w = min(self.wmax, 2) if self.adaptive else self.wmax
        greedy = cfg.temperature <= 0 and cfg.strategy == "threshold"
        self.spec_k = int(cfg.speculate or 0) if greedy and self.shifted else 0
        if den.spec.single_line:
            self.spec_k = min(self.spec_k, cfg.single_line_speculate)
        self.lookup = Lookup(job.prompt) if self.spec_k else None
        self.stats = {"positions": 0.0, "drafted": 0.0, "accepted": 0.0}
        self.committed = 0  # canvas positions whose KV is in the cache

    def forward(self, ids: list[int], pending: int) -> Tensor:
        """Run ``ids`` (``pending`` clean tokens, then window inputs) over the cache at the job's
        context; commits the pending ones. Returns hidden states (T, dim)."""
        j, eng = self.j, self.eng
        kv: KVCache = j.kv
        kv.length = j.ctx
        mask = step_mask(j.ctx, pending, len(ids) - pending, eng.device)
        t = torch.tensor([ids], device=eng.device)
        h = eng.model(t, offset=j.ctx, cache=kv, mask=mask, logits_slice=slice(0, 0))[0]
        j.forwards += 1
        self.stats["positions"] += len(ids)
        if pending:
            j.last_hidden = h[pending - 1]
            j.ctx += pending
            kv.length = j.ctx
        return h[pending:]

    def run(self) -> None:
        j, den = self.j, self.j.den
        while not den.finished:
            if j.abort is not None and j.abort.aborted:
                den.abort()
                break
            start = den.prefix
            pending = den.canvas[self.committed:start]
            draft = self._draft() if self.w == 1 else []
            if draft:
                self._speculate(pending, draft)
            else:
                self._window_step(pending, start)
            if self.lookup is not None:
                self.lookup.push(den.canvas[start:den.prefix])
            give_up = den.cfg.give_up
            if give_up is not None and not den.finished and give_up(den.conf[:den.prefix],
                                                                   den.needed - den.prefix):
                den.finish = "gave_up"
        j.timings.update({f"decode_{k}": v for k, v in self.stats.items()})

    def _window_step(self, pending: list[int], start: int) -> None:
        j, den, eng = self.j, self.j.den, self.eng
        den.set_window(start, start + self.w)
        lo, hi = den.block_range()
        n_in = max(0, hi - lo - 1) if self.shifted else hi - lo
        ids = pending + den.canvas[lo:lo + n_in]
        hw = self.forward(ids, len(pending)) if ids else None
        self.committed = start
        cand = den.candidates()
        if self.shifted:
            assert j.last_hidden is not None
            hs = torch.stack([j.last_hidden if c == 0 else hw[c - 1] for c in cand])  # type: ignore[index]
        else:
            assert hw is not None
            hs = hw[cand]
        n = den.step(eng.model.logits(hs[None])[0], cand, force_first=True)
        eng.emit(j, n)
        if self.adaptive:
            if n <= 1 and self.w > 1:
                self.w = max(1, self.w // 2)
            elif den.confident >= len(cand):
                self.w = min(self.wmax, self.w * 2)

    def _draft(self) -> list[int]:
        if self.lookup is None:
            return []
        room = self.j.den.needed - self.j.den.prefix - 1
        draft = self.lookup.draft(min(self.spec_k, room)) if room > 0 else []
        if self.j.den.spec.single_line:  # what follows the line's end is cut: never verify it
            nl = self.eng.newline_ids
            end = next((i + 1 for i, t in enumerate(draft) if t in nl), len(draft))
            draft = draft[:end]
        return draft

    def _speculate(self, pending: list[int], draft: list[int]) -> None:
        """Verify ``draft`` (for the positions after the window's first) in one causal forward."""
        j, den, eng = self.j, self.j.den, self.eng
        start = den.prefix
        ids = pending + draft
        kv: KVCache = j.kv
        kv.length = j.ctx
        r = len(pending)
        t = torch.tensor([ids], device=eng.device)
        mask = step_mask(j.ctx, len(ids), 0, eng.device)
        h = eng.model(t, offset=j.ctx, cache=kv, mask=mask, logits_slice=slice(0, 0))[0]
        j.forwards += 1
        self.stats["positions"] += len(ids)
        self.stats["drafted"] += len(draft)
        prev = j.last_hidden if r == 0 else h[r - 1]
        hs = torch.cat([prev[None], h[r:]])  # predicts start .. start + len(draft)
        logits = eng.model.logits(hs[None])[0]
        sup = torch.tensor(den.suppress, device=logits.device)
        best = logits.float().index_fill(1, sup, float("-inf")).argmax(-1).tolist()
        a = 1
        while a <= len(draft) and draft[a - 1] == best[a - 1]:
            a += 1
        a = min(a, den.needed - start)
        den.set_window(start, start + a)
        n = den.step(logits[:a], list(range(a)), take_all=True)
        eng.emit(j, n)
        self.stats["accepted"] += a - 1
        # the accepted draft tokens' KV is exact (causal): commit them with the pending ones
        keep = r + a - 1
        if keep:
            j.last_hidden = h[keep - 1]
            j.ctx += keep
        kv.length = j.ctx
        self.committed = start + a - 1
