"""Verify forwards of a rewrite's prompt-lookup drafts, offline, on held-out next-edit replay cases.

Greedy window-1 decoding with drafts writes the same output whatever the drafts (a draft only saves
forwards), so the forwards a draft strategy needs can be counted without the model: the output is the
ideal rewrite (the case's editable region with the real pending hunks applied, or unchanged where no
edit is pending), the prompt the engine's edit prompt for that region. Prints forwards per strategy and
drafts per forward::

    python scripts/draft_sim.py ../shared/data/git/click.bundle ../shared/data/git/ky.bundle --cases 40
"""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.decoding.window import Lookup, rewrite_source
from engine.templates import EditPrompt, render_edit
from engine.textdiff import line_span
from evals.replay_sessions import SessionReplayOptions, session_cases


def verify_forwards(lk: Lookup, out: list[int], k: int) -> int:
    """Forwards to write ``out`` when each one verifies up to ``k`` drafts of ``lk``."""
    i = forwards = 0
    while i < len(out):
        room = len(out) - i - 1
        draft = lk.draft(min(k, room)) if room > 0 else []
        a = 1
        while a <= len(draft) and draft[a - 1] == out[i + a - 1]:
            a += 1
        a = min(a, len(out) - i)
        lk.push(out[i:i + a])
        i, forwards = i + a, forwards + 1
    return forwards


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("repos", nargs="+", type=Path)
    ap.add_argument("--cases", type=int, default=40, help="cases per repository")
    ap.add_argument("--model", default="default")
    a = ap.parse_args(argv)
    from engine import Engine

    tok = Engine.load(a.model, device="cpu").tokenizer
    sp = tok.special
    rows: list[tuple[list[int], list[int]]] = []
    for repo in a.repos:
        for c in session_cases(repo, SessionReplayOptions(cases=a.cases)):
            text, cur = c.files[c.path], c.cursor.offset
            lo, hi = line_span(text, cur, 6, 8)
            out_text = text[lo:hi]
            if c.expected:  # the region grows to the pending edit's span; the output has it applied
                e = c.expected[0]
                lo, hi = min(lo, e.start), max(hi, e.end)
                out_text = text[lo:e.start] + e.text + text[e.end:hi]
            p = EditPrompt(text[max(0, lo - 3000):lo], text[lo:hi], text[hi:hi + 2000], min(max(cur - lo, 0), hi - lo),
                           path=c.path)
            rows.append((render_edit(tok, p).ids, [*tok.encode(out_text), sp.eom]))
    total = sum(len(o) for _, o in rows)
    print(f"{len(rows)} cases, {total} output tokens")
    print("drafts per forward | latest occurrence: forwards | region-aligned: forwards")
    for k in (8, 16, 32):
        plain = sum(verify_forwards(Lookup(ids), out, k) for ids, out in rows)
        aligned = sum(verify_forwards(Lookup(ids, rewrite_source(ids, sp.region_start, sp.region_end, sp.cursor)),
                                      out, k) for ids, out in rows)
        print(f"{k:>18} | {plain:>27} | {aligned:>24}")


if __name__ == "__main__":
    main()
