"""Window decoding (engine.decoding.window): exact vs. a no-cache recomputation, AR at width 1, prompt-lookup
drafts change nothing, stop rules (keep, scope, give_up), the decode setting."""

from __future__ import annotations

import pytest
import torch

from engine import CanvasSpec, Engine, FimPrompt, SamplerConfig
from engine.api import InfillCall, RewriteCall
from engine.decoding.policy import parse_decode, resolve
from engine.decoding.sampler import Denoiser
from engine.decoding.stops import lines_cut, loop_cut, scope_cut, scope_rule, text_stop
from engine.decoding.window import Lookup
from engine.templates import EditPrompt

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def eng() -> Engine:
    return Engine.load("tiny-random", device="cpu")


def text_ids(n: int, seed: int = 0) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(32, 127, (n,), generator=g).tolist()


def denoiser(eng: Engine, spec: CanvasSpec, cfg: SamplerConfig) -> Denoiser:
    sp = eng.tokenizer.special
    return Denoiser(spec, cfg, mask_id=sp.mask, end_ids=sp.end_ids, block_size=eng.block_size,
                    suppress_ids=eng.suppressed_ids)


@torch.no_grad()
def reference_window(eng: Engine, prompt: list[int], spec: CanvasSpec, cfg: SamplerConfig, w: int) -> list[int]:
    """No KV cache: every step runs prompt + decided prefix (causal) + the window's masked inputs
    (seeing everything) and decides the window's first position plus the confident ones."""
    d = denoiser(eng, spec, cfg)
    n = len(prompt)
    while not d.finished:
        start = d.prefix
        d.set_window(start, start + w)
        lo, hi = d.block_range()
        seq = prompt + d.canvas[:start] + d.canvas[lo:lo + max(0, hi - lo - 1)]
        ctx, t = n + start, len(prompt) + start + max(0, hi - lo - 1)
        q = torch.arange(t)
        mask = torch.arange(t)[None, :] < torch.where(q < ctx, q + 1, torch.full_like(q, t))[:, None]
        h = eng.model(torch.tensor([seq]), mask=mask, logits_slice=slice(0, 0))[0]
        cand = d.candidates()
        d.step(eng.model.logits(h[[ctx + c - 1 for c in cand]][None])[0], cand, force_first=True)
    return d.output()[0]


@torch.no_grad()
def reference_ar(eng: Engine, prompt: list[int], n: int) -> list[int]:
    """Greedy left-to-right decoding with a plain causal forward over everything, every token."""
    out: list[int] = []
    sup = torch.tensor(eng.suppressed_ids)
    for _ in range(n):
        logits = eng.model(torch.tensor([prompt + out]), is_causal=True)[0, -1].float()
        out.append(int(logits.index_fill(0, sup, float("-inf")).argmax()))
    return out


@pytest.mark.parametrize("w", [1, 3, 8])
def test_window_decoding_equals_recompute(eng: Engine, w: int) -> None:
    prompt = text_ids(30, seed=w)
    spec = CanvasSpec(20, stop_at_end=False)
    cfg = SamplerConfig(window=w, speculate=0, threshold=0.05)  # low tau: several positions per step
    got = eng.generate(prompt, spec, cfg)
    assert got.tokens == reference_window(eng, prompt, spec, cfg, w) and len(got.tokens) == 20
    assert got.timings["decode_positions"] > 0


def test_width_one_is_autoregressive_and_drafts_change_nothing(eng: Engine) -> None:
    prompt = text_ids(12, seed=3) * 3  # repeats: the lookup has drafts to offer
    spec = CanvasSpec(24, stop_at_end=False)
    ar = eng.generate(prompt, spec, SamplerConfig(window=1, speculate=0))
    assert ar.tokens == reference_ar(eng, prompt, 24)
    assert ar.steps == 24 and ar.forwards == 24  # prefill + 23 (the first token needs no forward)
    spec_run = eng.generate(prompt, spec, SamplerConfig(window=1, speculate=6))
    assert spec_run.tokens == ar.tokens
    assert spec_run.timings["decode_drafted"] > 0 and spec_run.forwards <= ar.forwards


def test_single_line_drafts_stop_at_the_line_end(eng: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A single-line canvas never verifies draft tokens after a newline (the answer is cut there)."""
    from engine.decoding.window import WindowDecoder

    nl = min(eng.newline_ids)
    seen: list[list[int]] = []
    real = WindowDecoder._speculate

    def spy(self: WindowDecoder, pending: list[int], draft: list[int]) -> None:
        seen.append(list(draft))
        real(self, pending, draft)

    monkeypatch.setattr(Lookup, "draft", lambda self, k: [65, nl, 66, 67][:k])
    monkeypatch.setattr(WindowDecoder, "_speculate", spy)
    prompt = text_ids(20, seed=8)
    eng.generate(prompt, CanvasSpec(16, single_line=True, stop_at_end=False),
                 SamplerConfig(window=1, speculate=6, single_line_speculate=6))
    assert [65, nl] in seen and all(nl not in d[:-1] for d in seen)  # nothing verified past a newline
    seen.clear()
    eng.generate(prompt, CanvasSpec(16, single_line=True, stop_at_end=False), SamplerConfig(window=1, speculate=6))
    # by default a single-line canvas verifies at most 2 drafts (single_line_speculate), cut at the newline
    assert seen and max(len(d) for d in seen) == 2 and all(nl not in d[:-1] for d in seen)
    eng.generate(prompt, CanvasSpec(16, stop_at_end=False), SamplerConfig(window=1, speculate=6))
    assert seen and max(seen, key=len) == [65, nl, 66, 67], seen[:4]


def test_adaptive_window_and_batch_equal_alone(eng: Engine) -> None:
    reqs = [text_ids(25, seed=s) for s in (5, 6)]
    spec = CanvasSpec(16, stop_at_end=False)
    cfg = SamplerConfig(window="adaptive", threshold=0.02)
    from engine import GenerateRequest

    batch = eng.generate_batch([GenerateRequest(p, spec, cfg) for p in reqs])
    alone = [eng.generate(p, spec, cfg) for p in reqs]
    assert [b.tokens for b in batch] == [a.tokens for a in alone]
    assert all(len(a.tokens) == 16 for a in alone)


def test_keep_limits_decoded_positions(eng: Engine) -> None:
    prompt = text_ids(20, seed=8)
    for window in ("block", 4):
        r = eng.generate(prompt, CanvasSpec(16, stop_at_end=False, keep=5), SamplerConfig(window=window))
        assert len(r.tokens) == 5 and r.finish_reason == "length"
        assert r.steps <= 5


def test_give_up_hook_stops(eng: Engine) -> None:
    seen: list[tuple[int, int]] = []

    def give_up(confs: list[float], left: int) -> bool:
        seen.append((len(confs), left))
        return len(confs) >= 3

    r = eng.generate(text_ids(20), CanvasSpec(16, stop_at_end=False), SamplerConfig(window=2, give_up=give_up))
    assert r.finish_reason == "gave_up" and 3 <= len(r.tokens) < 16
    assert seen[0][0] + seen[0][1] == 16


def test_scope_cut_matches_the_gate() -> None:
    from edit_server.selectivity.gate import _cut_at_scope_end

    cases = ["x = 1\n    y = 2\nz = 3\n", "a\n\n\n    b\n", "a\n        b\n    c\n  d", "a\n    b", "\tx\n\ty\nz"]
    for text in cases:
        for base in (0, 4):
            line_prefix = " " * base
            cut = scope_cut(text, base)
            mine = (text if cut is None else text[:cut]).rstrip("\n").count("\n")
            # the gate expands tabs first (the prefix is indented with spaces), then cuts
            want = _cut_at_scope_end(text.replace("\t", "    "), line_prefix).rstrip("\n").count("\n")
            assert mine == want, (text, base)
    assert scope_cut("if x:\n        a\n    b", 8) == len("if x:\n        a\n")
    assert scope_cut("a\n    ", 4) is None  # the next line's indent is not known yet


def test_an_empty_cursor_line_stays_inside_the_enclosing_function() -> None:
    """Nothing typed on the cursor's line: the block is the enclosing def's body — a middle may dedent
    inside it (``elif``, the closing ``return``) but never runs on past it (the instruct base's
    ``# Test the function …`` after HumanEval/2/L0 through the server)."""
    from edit_server.selectivity.gate import _cut_at_scope_end
    from engine.decoding.stops import empty_line_scope

    fn = "def f(numbers):\n    \"\"\"Doc.\"\"\"\n"
    assert empty_line_scope(fn) == 1
    assert empty_line_scope(fn + "    for c in numbers:\n        if c:\n") == 1  # the def, not the for
    assert empty_line_scope("class A:\n    def g(self):\n        x = 1\n") == 5  # the method
    assert empty_line_scope("class A:\n    def g(self):\n") == 5  # right after the header
    assert empty_line_scope("x = 1\n") == 0 and empty_line_scope("") == 0  # top level: nothing cut
    junk = "    return number - int(number)\n\n# Test the function\ndef check_function():\n"
    assert scope_cut(junk, empty_line_scope(fn)) == len("    return number - int(number)\n\n")
    ok = "            current_string.append(c)\n\n        elif c == ')':\n\n    return result\n"
    assert scope_cut(ok, empty_line_scope(fn + "    for c in numbers:\n        if c:\n")) is None
    for text, prefix in ((junk, fn), (ok, fn + "    for c in numbers:\n        if c:\n")):  # the gate agrees
        cut = scope_cut(text, empty_line_scope(prefix))
        assert _cut_at_scope_end(text, "", prefix).rstrip("\n") == (text if cut is None else text[:cut]).rstrip("\n")


def test_scope_rule_keeps_tokens_up_to_the_cut(eng: Engine) -> None:
    tok = eng.tokenizer
    ids = tok.encode("    y = 2\n    z = 3\nprint(y)\n")
    rule = scope_rule(tok.decode_content, 4)
    stop = rule(ids)
    assert stop is not None and stop[1] == "scope"
    k = stop[0]
    assert tok.decode_content(ids[:k]).startswith("    y = 2\n    z = 3\n")
    assert "print" not in tok.decode_content(ids[:k - 1])
    assert rule(tok.encode("    y = 2\n    z")) is None


def script_output(eng: Engine, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    """Every denoising step predicts ``text``'s tokens (then eom) with certainty."""
    tok = eng.tokenizer
    script = tok.encode(text)
    real = Denoiser.step

    def scripted(self: Denoiser, logits: torch.Tensor, rows: list[int] | None = None, **kw: object) -> int:
        cand = self.candidates() if rows is None else rows
        s, _ = self.block_range()
        fake = torch.full_like(logits, -30.0)
        for r, c in enumerate(cand):
            fake[r, script[s + c] if s + c < len(script) else tok.special.eom] = 30.0
        return real(self, fake, rows, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Denoiser, "step", scripted)


def test_infill_multi_line_stops_when_the_scope_closes(eng: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A canvas that leaves the cursor's block stops there (finish "scope")."""
    script_output(eng, monkeypatch, "x\n    y\nz = 1\nmore text that is never needed\n")
    r = eng.infill(FimPrompt("def f():\n    ", "\n"), max_tokens=40, sampler=SamplerConfig(window=4, speculate=0))
    assert r.finish_reason == "scope" and "more" not in r.text and r.text.startswith("x\n    y\n")
    off = eng.infill(FimPrompt("def f():\n    ", "\n"), max_tokens=40,
                     sampler=SamplerConfig(window=4, speculate=0, stop_at_scope=False))
    assert "more" in off.text


def test_line_cap_cuts_at_the_last_allowed_line() -> None:
    assert lines_cut("a\nb\nc\nd", 2) == len("a\nb")
    assert lines_cut("a\nb", 2) is None  # the second line may still grow
    assert lines_cut("\n    x\n    y\n", 2) == len("\n    x")  # the cursor line's rest counts as one
    assert text_stop("x\n    y\nz = 1\nw\n", 4, 10) == (len("x\n    y\n"), "scope")  # the scope closes first
    assert text_stop("x\n    y\n    z\n", 4, 2) == (len("x\n    y"), "scope")  # the cap comes first
    assert text_stop("x\n", None, None) is None and scope_rule(str, None, None) is None


def test_infill_multi_line_stops_at_max_lines(eng: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A canvas stops decoding once it holds ``max_lines`` lines (finish "scope"): fewer steps than
    the same request without the cap, the same text up to the cut."""
    script_output(eng, monkeypatch, "a = 1\n    b = 2\n    c = 3\n    d = 4\n    e = 5\n    f = 6\n")
    cfg = SamplerConfig(window=4, speculate=0, stop_at_scope=False)
    capped = eng.complete([InfillCall(FimPrompt("def f():\n    ", "\n"), max_tokens=60, sampler=cfg, max_lines=3)])[0]
    assert capped.finish_reason == "scope" and capped.text == "a = 1\n    b = 2\n    c = 3"
    full = eng.complete([InfillCall(FimPrompt("def f():\n    ", "\n"), max_tokens=60, sampler=cfg)])[0]
    assert full.text.startswith(capped.text + "\n    d = 4") and full.steps > capped.steps
    one = eng.complete([InfillCall(FimPrompt("def f():\n    ", "\n"), max_tokens=60, sampler=cfg,
                                   single_line=True, max_lines=3)])[0]
    assert one.text == "a = 1"  # single-line requests keep their own stop


def test_lookup_drafts_follow_the_last_ngram() -> None:
    lk = Lookup([1, 2, 3, 4, 5, 6, 1, 2])
    assert lk.draft(3) == [3, 4, 5]
    lk.push([3, 9])
    assert lk.draft(2) == []  # (2, 3, 9) / (3, 9) never seen before
    lk.push([5, 6])
    assert lk.draft(4) == [1, 2, 3, 9]  # the latest occurrence of (5, 6)
    assert Lookup([7]).draft(3) == []


def test_lookup_follows_the_rewritten_region_in_order() -> None:
    """A rewrite's drafts come from its region in order: its start before any output, then after the
    output's last n-gram's next occurrence there (not the latest occurrence anywhere)."""
    region = [1, 2, 3, 9, 1, 2, 3, 8, 5]
    lk = Lookup([40, 41, 1, 2, 3, 7, 42], aligned=region)
    assert lk.draft(3) == [1, 2, 3]  # no output yet: the region's start
    lk.push([1, 2, 3])
    assert lk.draft(2) == [9, 1]  # the first (1, 2, 3), not the prompt's latest (-> 7)
    lk.push([9, 1, 2, 3])
    assert lk.draft(4) == [8, 5]  # past the previous draft's point: the second (1, 2, 3)
    lk.push([6, 6])
    assert lk.draft(2) == []  # (3, 6, 6) / (6, 6) nowhere
    plain = Lookup([40, 41, 1, 2, 3, 7, 42])
    plain.push([1, 2, 3])
    assert plain.draft(2) == [7, 42]


def test_rewrites_draft_from_their_region(eng: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """The window decoder gives a rewrite's lookup the region's ids (the cursor mark left out), a FIM
    request none; greedy output is the same with and without drafts."""
    import engine.decoding.window as window

    seen: list[list[int] | None] = []
    real = window.Lookup.__init__

    def spy(self: window.Lookup, prompt: list[int], aligned: list[int] | None = None) -> None:
        seen.append(aligned)
        real(self, prompt, aligned)

    monkeypatch.setattr(window.Lookup, "__init__", spy)
    p = EditPrompt("def f():\n", "    return 1\n", "\n", 4)
    spec = eng.rewrite(p, sampler=SamplerConfig(window=1, speculate=8))
    sp = eng.tokenizer.special
    want = [t for t in eng.tokenizer.encode("    return 1\n") if t != sp.cursor]
    assert seen and seen[-1] is not None and sp.cursor not in seen[-1]
    assert eng.tokenizer.decode(seen[-1]) == eng.tokenizer.decode(want)
    plain = eng.rewrite(p, sampler=SamplerConfig(window=1, speculate=0))
    assert spec.tokens == plain.tokens
    eng.infill(FimPrompt("def f():\n    ", "\n"), max_tokens=8, sampler=SamplerConfig(window=1, speculate=8))
    assert seen[-1] is None


def test_rewrites_decode_at_width_one_with_region_drafts(eng: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rewrite whose call leaves the window open runs at width 1 with at least `REWRITE_SPECULATE`
    drafts (the engine's block or adaptive window duplicates and drops copied tokens); its output is the
    width-1 greedy one. A call that pins its window keeps it; a sampled alternative keeps the engine's."""
    import engine.decoding.window as window
    from engine.api import RewriteCall
    from engine.calls import call_request
    from engine.decoding.policy import REWRITE_SPECULATE, rewrite_sampler

    seen: list[tuple[object, int]] = []
    real = window.WindowDecoder.__init__

    def spy(self: window.WindowDecoder, e: object, job: object) -> None:
        real(self, e, job)  # type: ignore[arg-type]
        seen.append((self.wmax, self.spec_k))

    monkeypatch.setattr(window.WindowDecoder, "__init__", spy)
    p = EditPrompt("def f():\n", "    x = 1\n    return x\n", "\n", 4)
    got = eng.rewrite(p)
    assert seen == [(1, max(REWRITE_SPECULATE, eng.sampler.speculate or 0))]
    assert got.tokens == eng.rewrite(p, sampler=SamplerConfig(window=1, speculate=0)).tokens
    pinned = SamplerConfig(window=4, speculate=0)
    assert rewrite_sampler(pinned, eng.sampler) is pinned
    assert call_request(eng, RewriteCall(p, sampler=pinned)).sampler is pinned
    alt = call_request(eng, RewriteCall(p, variant=1)).sampler
    assert alt.window == eng.sampler.window and alt.temperature > 0
    base = SamplerConfig(window="block", speculate=0, threshold=0.7)
    asked = rewrite_sampler(None, base)
    assert (asked.window, asked.speculate, asked.threshold) == (1, REWRITE_SPECULATE, 0.7)


def test_decode_setting() -> None:
    assert parse_decode("ar") == {"window": 1, "speculate": 0}
    assert parse_decode("adaptive,spec=4") == {"window": "adaptive", "speculate": 4}
    assert parse_decode("8") == {"window": 8}
    with pytest.raises(ValueError):
        parse_decode("fast")
    base = SamplerConfig(window="adaptive", speculate=8)
    assert resolve(None, base) is base
    got = resolve(SamplerConfig(threshold=0.5, window=2), base)
    assert (got.threshold, got.window, got.speculate) == (0.5, 2, 8)


def test_loop_cut_finds_the_first_invented_loop() -> None:
    line = "    total = compute(a, b)\n"
    assert loop_cut("x = 1\n" + line * 3) == len("x = 1\n" + line)
    assert loop_cut("x = 1\n" + line * 2 + line[:-1]) is None  # the third may still grow
    assert loop_cut("x = 1\n" + line * 3, reference="y\n" + line * 3) is None  # the prompt holds it
    unit = "cfg: Config, "
    text = "f(" + unit * 5 + ")"
    assert loop_cut(text) == len("f(" + unit)
    assert loop_cut(text, reference=unit * 4) is not None  # four units: the text's run of five is new
    assert loop_cut(text, reference=unit * 5) is None
    for code in ("# " + "-" * 40 + "\n", "[0, 0, 0, 0, 0, 0, 0, 0]", "'" + "a" * 30 + "'", "\n\n\n\n", "x\n\n\n\ny"):
        assert loop_cut(code) is None, code
    # the earliest loop wins, whichever rule finds it
    assert loop_cut("a = b\n" * 3 + "self." * 5) == len("a = b\n")
    assert text_stop("x\n" + line * 3 + "y\n", None, None, "") == (len("x\n" + line), "loop")
    assert text_stop("x\n" + line * 3, None, None) is None  # no reference: loops are not asked for


def test_canvases_stop_at_a_loop(eng: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rewrites and multi-line completions stop at the first loop the prompt does not hold (finish
    "loop"): the gate would cut it there or drop the rewrite, so the rest is never decoded."""
    line = "    total = compute(a, b)\n"
    script_output(eng, monkeypatch, "x = 1\n" + line * 12)
    cfg = SamplerConfig(window=4, speculate=0)
    region = "    pass\n" * 30  # a canvas that would hold all 12 lines
    r = eng.rewrite(EditPrompt("def f():\n", region, "", 0), sampler=cfg)
    assert r.finish_reason == "loop" and r.text.startswith("x = 1\n" + line)
    assert r.text.count("compute") == 1 and r.steps < len(eng.tokenizer.encode(line * 12)) // 4
    f = eng.infill(FimPrompt("def f():\n    ", "\n"), max_tokens=120, sampler=cfg)
    assert f.finish_reason == "loop" and f.text.count("compute") == 1
    # the text after the region holds it (not as its first line: that would end the rewrite, engine.decoding.echo)
    held = eng.rewrite(EditPrompt("def f():\n", region, "# tail\n" + line * 12, 0), sampler=cfg)
    assert held.finish_reason != "loop" and held.text.count("compute") > 3
    [call] = eng.complete([RewriteCall(EditPrompt("def f():\n", region, "", 0), sampler=cfg)])
    assert call.finish_reason == "loop"


def test_single_lines_stop_when_they_outgrow_the_code_around_them(eng: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A single line longer than every line of the window (+ slack, at least LINE_FLOOR) is degenerate:
    decoding stops there (finish "long") instead of running to the token cap."""
    from engine.calls import LINE_FLOOR, LINE_SLACK, line_room

    p = FimPrompt("def f(a, b):\n    x = ", "\n    return x\n")
    assert line_room(p) == LINE_FLOOR + LINE_SLACK - len("    x = ")
    wide = FimPrompt("y = " + "z" * 150 + "\n    x = ", "\n")
    assert line_room(wide) == 154 + LINE_SLACK - len("    x = ")
    assert line_room(FimPrompt("\t" + "q" * 200, "")) == LINE_SLACK  # the cursor line is the longest one
    script_output(eng, monkeypatch, "()" * 200)
    cfg = SamplerConfig(window=4, speculate=0)
    r = eng.infill(p, max_tokens=400, single_line=True, sampler=cfg)
    room = line_room(p)
    assert r.finish_reason == "long" and room <= len(r.text) < room + 8
    assert r.steps <= len(eng.tokenizer.encode(r.text)) + 1 < 400  # stopped at the cap, not the canvas end
    ok = eng.infill(p, max_tokens=400, single_line=False, sampler=cfg)  # multi-line: the line caps instead
    assert ok.finish_reason != "long"


def test_a_single_line_past_its_budget_answers_nothing(eng: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A single-line call's ``budget_ms`` counts from its first decoded token; past it decoding stops with
    no text (finish "budget") — a line cut short is no suggestion. Within it the line is whole."""
    import engine.decoding.stops as stops

    clock = [0.0]

    def tick() -> float:  # every look at the clock is 0.1 s later
        clock[0] += 0.1
        return clock[0]

    script_output(eng, monkeypatch, "alpha + beta + gamma + delta + epsilon")
    p = FimPrompt("def f(a, b):\n    x = ", "\n    return x\n")
    cfg = SamplerConfig(window=1, speculate=0)
    whole = eng.complete([InfillCall(p, 40, True, cfg, budget_ms=60_000)])[0]
    assert whole.finish_reason != "budget" and whole.text.startswith("alpha + beta")
    monkeypatch.setattr(stops.time, "monotonic", tick)
    monkeypatch.setattr("engine.decoding.echo.time.monotonic", tick)
    cut = eng.complete([InfillCall(p, 40, True, cfg, budget_ms=300)])[0]
    assert cut.finish_reason == "budget" and cut.text == "" and cut.steps < whole.steps
