"""Re-prefill tokens of consecutive next-edit requests per edit layout (`engine.templates` edit layouts).

For each pair of consecutive hunks of a real session (`engine.git_history`) where the second is near the
cursor the first left (the user goes on editing in the same region), two next-edit prompts are rendered:
after hunk ``k`` and after hunk ``k + 1``, with the same editable region (its end moved by what hunk
``k + 1`` changed inside it), the file around it, and the last ``history`` hunks. The re-prefill is what
the prefix KV cache cannot reuse: the second prompt's tokens after the longest prefix it shares with the
first. Token counts, not latency (the exact prefix cache reuses exactly the shared prefix).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.git_history import extract_source, states_of
from engine.git_replay import cursor_after, near_ks
from engine.templates import EDIT_LAYOUTS, EditPrompt, render_edit
from engine.textdiff import line_span, unified_diff


@dataclass
class PrefillOptions:
    pairs: int = 60  # per repository
    seed: int = 0
    before_chars: int = 3000
    after_chars: int = 1500
    history: int = 3


def _window(text: str, ra: int, rb: int, opts: PrefillOptions) -> tuple[str, str]:
    a = max(0, ra - opts.before_chars)
    if a:
        a = text.find("\n", a) + 1 or a
    b = min(len(text), rb + opts.after_chars)
    nl = text.rfind("\n", rb, b)
    return text[a:ra], text[rb: nl + 1 if nl >= rb else b]


def prompt_pairs(src: Path, opts: PrefillOptions) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(request after hunk k, request after hunk k+1) as EditPrompt fields, ``opts.pairs`` of them."""
    sessions = extract_source(src, trim=False)
    rng = random.Random(f"{opts.seed}:{src.name}")
    rng.shuffle(sessions)
    out = []
    for s in sessions:
        if len(out) >= opts.pairs:
            break
        states = states_of(s)
        ks = [k for k in near_ks(s, states) if k + 1 <= len(s.steps)]
        if not ks:
            continue
        k = rng.choice(ks)
        t0, t1 = states[k], states[k + 1]
        c0 = cursor_after(t0, s.steps[k - 1])
        ra, rb = line_span(t0, c0, 6, 8)
        a, b, text = s.steps[k]
        if a < ra or b > rb:  # the second hunk crosses the region: another region, not this comparison
            continue
        rb1 = rb + len(text) - (b - a)
        c1 = cursor_after(t1, s.steps[k])
        hist = [unified_diff(s.path, states[i], states[i + 1]) for i in range(len(states) - 1)]
        reqs = []
        for t, r_end, cur, n in ((t0, rb, c0, k), (t1, rb1, c1, k + 1)):
            before, after = _window(t, ra, r_end, opts)
            reqs.append({"before": before, "region": t[ra:r_end], "after": after,
                         "cursor": min(max(cur - ra, 0), r_end - ra), "path": s.path,
                         "history": tuple(h for h in hist[max(0, n - opts.history): n] if h)})
        out.append((reqs[0], reqs[1]))
    return out


def reprefill(tok: Any, pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """Per layout: mean prompt tokens and mean / median re-prefilled tokens of the second request."""
    out: dict[str, dict[str, float]] = {}
    for layout in EDIT_LAYOUTS:
        re_n, total = [], []
        for p0, p1 in pairs:
            a = render_edit(tok, EditPrompt(**p0, layout=layout)).ids  # type: ignore[arg-type]
            b = render_edit(tok, EditPrompt(**p1, layout=layout)).ids  # type: ignore[arg-type]
            n = 0
            while n < min(len(a), len(b)) and a[n] == b[n]:
                n += 1
            re_n.append(len(b) - n)
            total.append(len(b))
        s = sorted(re_n)
        out[layout] = {"pairs": len(pairs), "prompt_tokens_mean": sum(total) / max(1, len(total)),
                       "reprefill_mean": sum(re_n) / max(1, len(re_n)),
                       "reprefill_p50": float(s[len(s) // 2]) if s else 0.0}
    return out
