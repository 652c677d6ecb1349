"""Fit a prompt into its budget when per-line counts are not exact: measure exactly (block sums, or
by rendering), then shrink the window until it fits or grow it while there is room."""

from __future__ import annotations

from edit_server.context.budget import TokenCounter
from edit_server.context.window import LineCosts, Window
from engine.tokens import TokenizerLike


def fit(counter: TokenCounter, tokenizer: TokenizerLike, rep, prompt, win: Window, make, window, render,
        costs: LineCosts, reserve: int = 0, grow: bool = True):
    """Per-line counts were not exact: measure the prompt exactly (block sums, else by rendering
    it); shrink the window until the prompt fits, or grow it while it fits with room to spare.

    ``reserve``: tokens a budget-cut window leaves free below the budget (a sticky build's room to type
    into), so growing aims at ``budget - reserve``. ``grow=False`` (a sticky build: its lines are
    fixed) only measures, and shrinks the window if the prompt is over the budget."""
    assert tokenizer is not None
    others = sum(r.used for r in rep.sources)
    goal = max(0, rep.budget - max(0, reserve))

    def measure(p) -> tuple[int, int]:
        if counter.exact_text:  # block sums: exact without encoding the whole prompt
            w = win
            wt = costs.exact(w.start_line, w.lo, tail=w.pre) + costs.exact(w.hi, w.end_line, head=w.suf)
            return rep.fixed + others + wt, wt
        rep.verified_by_render = True
        n = len(render(tokenizer, p).ids)
        return n, n - rep.fixed - others

    def rank(n: int) -> tuple[bool, int]:  # at or under the goal, largest first; else the smallest
        return (n <= goal, n if n <= goal else -n)

    best, tried = None, set()
    for _ in range(8):
        n, wt = measure(prompt)
        tried.add((win.start_line, win.end_line))
        fits = n <= rep.budget
        if fits and (best is None or rank(n) > rank(best[0])):
            best = (n, wt, prompt, win)
        truncated = win.start_line > 0 or win.end_line < len(costs.lines)
        if fits and (not grow or not truncated or 0 <= goal - n <= max(4, rep.budget // 100)):
            break
        step = goal - n if fits else -(n - rep.budget) - 4 - win.tokens // 100
        nxt = window(max(0, win.tokens + step))
        if (nxt.start_line, nxt.end_line) in tried:
            if not fits:  # no progress while over: drop to the cursor line's window
                nxt = window(0)
                if (nxt.start_line, nxt.end_line) in tried:
                    break
            else:
                break
        win, prompt = nxt, make(nxt)
    if best is None:
        raise ValueError(f"context budget {rep.budget} too small for this prompt")
    rep.total, rep.window.used, prompt, win = best
    rep.window_lines = (win.start_line, win.end_line)
    return prompt, win
