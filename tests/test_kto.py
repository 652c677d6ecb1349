"""KTO: loss vs a hand computation, λ from the class balance, shared-mask ELBO rewards, the stacked
LoRA at run time (AlignedEngine + RewardScorer agree with the trainer), and a tiny end-to-end run."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch

from engine.engine import Engine
from engine.loading.adapter import AdapterError
from engine.loading.stacked import AlignedEngine, attach, save_stacked
from engine.reward import RewardScorer, canvas_for
from engine.specs import random_checkpoint
from engine.templates import FimPrompt, render_fim
from engine.train.kto.elbo import logp, make_elbo_batch
from engine.train.kto.loss import class_weights, kl_reference, kto_loss
from engine.train.kto.records import Record, prompt_to_dict, write_set
from engine.train.kto.trainer import Kto, KtoConfig, load_reference, train_kto


def sig(x: float) -> float:
    return 1 / (1 + math.exp(-x))


# ---- the objective ------------------------------------------------------------------------------
def test_kto_loss_matches_a_hand_computed_example() -> None:
    r = torch.tensor([1.0, -0.5, 0.2], requires_grad=True)
    desirable = torch.tensor([True, False, False])
    r_mis = torch.tensor([0.4, -0.2, 0.1], requires_grad=True)  # mismatched pairs: mean 0.1
    z0 = kl_reference(r_mis)
    assert not z0.requires_grad and float(z0) == pytest.approx(0.1)
    beta, lam_d, lam_u = 0.5, 1.0, 0.8
    loss, m = kto_loss(r, z0, desirable, beta, lam_d, lam_u)
    want = ((1 - sig(0.5 * (1.0 - 0.1))) + 0.8 * (1 - sig(0.5 * (0.1 + 0.5))) + 0.8 * (1 - sig(0.5 * (0.1 - 0.2)))) / 3
    assert loss.item() == pytest.approx(want, abs=1e-6)
    assert m["r_desirable"] == pytest.approx(1.0) and m["r_undesirable"] == pytest.approx(-0.15)
    loss.backward()
    assert r_mis.grad is None  # z0 is not back-propagated
    s = sig(0.45)  # d/dr of the desirable term: -β λ_D σ'(β (r - z0)) / 3
    assert float(r.grad[0]) == pytest.approx(-0.5 * s * (1 - s) / 3, abs=1e-6)
    s = sig(0.3)  # undesirable: +β λ_U σ'(β (z0 - r)) / 3
    assert float(r.grad[1]) == pytest.approx(0.5 * 0.8 * s * (1 - s) / 3, abs=1e-6)
    # a negative KL estimate is clamped at 0
    z0 = kl_reference(torch.tensor([-0.3, -0.1]))
    assert float(z0) == 0.0
    loss0, _ = kto_loss(torch.tensor([0.2]), z0, torch.tensor([True]), 1.0, 1.0, 1.0)
    assert float(loss0) == pytest.approx(1 - sig(0.2), abs=1e-6)


def test_lambdas_follow_the_class_balance() -> None:
    lam_d, lam_u = class_weights(30, 90)  # 1 desirable per 3 undesirable
    assert max(lam_d, lam_u) == 1.0 and lam_d * 30 / (lam_u * 90) == pytest.approx(1.0)
    lam_d, lam_u = class_weights(90, 30, ratio=4 / 3)
    assert lam_d * 90 / (lam_u * 30) == pytest.approx(4 / 3) and lam_u == 1.0 and lam_d < 1
    assert class_weights(50, 50) == (1.0, 1.0)
    with pytest.raises(ValueError, match="4/3"):
        class_weights(10, 10, ratio=2.0)


# ---- shared-mask ELBO rewards --------------------------------------------------------------------
def tiny_model() -> tuple[torch.nn.Module, object]:
    ck = random_checkpoint("tiny")
    from engine.model import Transformer

    m = Transformer(ck.args, init=False)
    m.load_state_dict(ck.state_dict, assign=True)
    return m.eval(), ck.tokenizer


def randomize(model: torch.nn.Module, seed: int = 1, std: float = 0.3) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * std)
            elif ".lora_A" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def example(tok: object, prefix: str = "def f(x):\n    return ", middle: str = "x + 1") -> tuple[list[int], list[int]]:
    ids = render_fim(tok, FimPrompt(prefix, "\n", path="a.py")).ids  # type: ignore[arg-type]
    sp = tok.special  # type: ignore[attr-defined]
    return ids, canvas_for(tok.encode(middle), sp.eom, sp.pad, 8, True)  # type: ignore[attr-defined]


def test_shared_masks_give_r_zero_when_policy_equals_reference() -> None:
    model, tok = tiny_model()
    state = attach(model, 4, 8.0, ("q_proj", "v_proj", "down_proj"))  # B = 0: policy == reference
    pairs = [example(tok), example(tok, "y = ", "[1, 2, 3]")]
    eb = make_elbo_batch(pairs, 8, tok.special.mask, tok.special.pad, torch.Generator().manual_seed(0), samples=2)
    with torch.no_grad():
        with state.use(False):
            ref = logp(model, eb)
        with state.use(True, eb.rows):
            pol = logp(model, eb)
    assert torch.equal(pol - ref, torch.zeros(2)) and bool((ref < 0).all())
    # the same model under *different* masks: the ELBO noise does not cancel
    eb2 = make_elbo_batch(pairs, 8, tok.special.mask, tok.special.pad, torch.Generator().manual_seed(1), samples=2)
    with torch.no_grad():
        assert not torch.equal(logp(model, eb2), ref)
    # a non-zero LoRA gives r != 0, and only from the prompt's last token on
    randomize(model)
    kto = Kto(model, tok, KtoConfig(samples=1), state)
    r = kto.rewards(pairs, torch.Generator().manual_seed(0), grad=False)
    assert bool((r.abs() > 1e-4).all())


def test_z0_comes_from_mismatched_pairs_and_is_detached(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.train.kto.trainer as trainer

    seen: list[torch.Tensor] = []
    monkeypatch.setattr(trainer, "kl_reference", lambda r: seen.append(r) or kl_reference(r))
    model, tok = tiny_model()
    state = attach(model, 4, 8.0, ("q_proj", "v_proj", "down_proj"))
    randomize(model)
    pairs = [example(tok), example(tok, "y = ", "[1, 2, 3]"), example(tok, "z = f(", "a, b)")]
    kto = Kto(model, tok, KtoConfig(samples=1, beta=1.0), state)
    loss, m = kto.step_loss(pairs, [True, False, True], torch.Generator().manual_seed(3), (1.0, 1.0))
    gen = torch.Generator().manual_seed(3)  # the step's draws, in order: the batch, then its z0 pairs
    r = kto.rewards(pairs, gen, grad=False)
    mismatched = [(pairs[i][0], pairs[(i + 1) % 3][1]) for i in range(3)]  # prompt i, completion i + 1
    r_mis = kto.rewards(mismatched, gen, grad=False)
    assert len(seen) == 1 and not seen[0].requires_grad
    assert torch.allclose(seen[0], r_mis, atol=1e-5) and not torch.allclose(seen[0], r, atol=1e-3)
    assert m["z0"] == max(0.0, float(r_mis.mean()))  # clamped (these mismatched pairs: below 0)
    loss.backward()
    grads = [p.grad for n, p in model.named_parameters() if ".lora_" in n]
    assert any(g is not None and bool(g.abs().sum() > 0) for g in grads)


# ---- self-play ------------------------------------------------------------------------------------
class ScriptedPlayer:
    """Plays badly at FIM (empty output) and keeps every region as it is (right only for no-edit)."""

    def __init__(self, tok: object) -> None:
        self.tokenizer = tok

    def _res(self, text: str) -> object:
        from engine.types import GenerateResult

        return GenerateResult(text, [1] * len(text), [0.5] * len(text), 1, 1, 1, 0, "eom")

    def infill(self, prompt: FimPrompt, **kw: object) -> object:
        return self._res("")

    def rewrite(self, prompt: object, **kw: object) -> object:
        return self._res(prompt.region)  # type: ignore[attr-defined]


def test_self_play_labels_by_exact_match_adds_truths_and_keeps_files_apart() -> None:
    from engine.train.corpus import Doc
    from engine.train.kto.selfplay import SelfPlayConfig, self_play

    _, tok = tiny_model()
    body = "".join(f"def f{i}(a, b):\n    total = a + b * {i}\n    return total - {i}\n\n\n" for i in range(12))
    docs = [Doc(f"pkg/m{j}.py", "python", body.replace("total", f"t{j}"), 0) for j in range(3)]
    recs = self_play(ScriptedPlayer(tok), docs, "heldout", SelfPlayConfig(n=24, seed=1))
    plays = [r for r in recs if r.source == "selfplay"]
    truths = {r.id.split(":", 1)[1]: r for r in recs if r.source == "selfplay-truth"}
    kinds = {r.kind for r in plays}
    assert len(plays) >= 18 and kinds == {"fim", "edit", "noedit"}, kinds  # a few tasks cannot be made
    for r in plays:
        assert r.group in {d.path for d in docs} and r.split == "heldout"
        assert r.label == (r.kind == "noedit")  # only keeping an untouched region is right
        t = truths.get(r.id.split(":", 1)[1])
        assert (t is None) == r.label  # a miss adds the truth as desirable, for the same prompt and file
        if t is not None:
            assert t.label and t.prompt == r.prompt and t.group == r.group and t.completion == r.meta["truth"]


# ---- run time: AlignedEngine + RewardScorer -----------------------------------------------------
def write_stacked(tmp: Path, seed: int = 1, std: float = 0.3, z0: float = 0.05,
                  layers: list[int] | None = None) -> Path:
    model, tok = tiny_model()
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    attach(model, 4, 8.0, tuple(targets), layers=layers)
    randomize(model, seed, std)
    path = tmp / "kto-test"
    save_stacked(path, model, {"lora": {"rank": 4, "alpha": 8.0, "targets": targets, "layers": layers},
                                "special_tokens": tok.special.as_dict(), "z0": z0,
                                "elbo": {"t_min": 0.1, "pad_to_block": False}})
    return path


def aligned(tmp: Path, **kw: float) -> AlignedEngine:
    return AlignedEngine.from_engine(Engine.from_checkpoint(random_checkpoint("tiny"), device="cpu"),
                                     write_stacked(tmp, **kw))


def test_reward_scorer_is_the_trainers_estimator(tmp_path: Path) -> None:
    eng = aligned(tmp_path)
    scorer = RewardScorer(eng)
    prompt = FimPrompt("def f(x):\n    return ", "\n", path="a.py")
    ids = render_fim(eng.tokenizer, prompt).ids
    comp = eng.tokenizer.encode("x * 2 + 1")
    rw = scorer.score_ids(ids, comp)  # no cached prompt: its own reference prefill
    assert not rw.cached and rw.n_tokens == len(comp) + 1 and rw.adapter.endswith("kto-test")
    # the trainer's full BD3 layout with the same noise (same seed) gives the same r
    kto = Kto(eng.model, eng.tokenizer, KtoConfig(samples=1, t_min=0.1), eng.lora)
    sp = eng.tokenizer.special
    r = kto.rewards([(ids, canvas_for(comp, sp.eom, sp.pad, 8))], torch.Generator().manual_seed(0), grad=False)
    assert rw.r == pytest.approx(float(r[0]), abs=1e-4) and abs(rw.r) > 1e-3
    scorer.pad_to_block = True  # older adapters: canvas padded to whole blocks, same agreement
    rp = scorer.score_ids(ids, comp)
    r = kto.rewards([(ids, canvas_for(comp, sp.eom, sp.pad, 8, True))], torch.Generator().manual_seed(0), grad=False)
    assert rp.r == pytest.approx(float(r[0]), abs=1e-4) and rp.r != pytest.approx(rw.r, abs=1e-3)
    scorer.pad_to_block = False
    assert rw.score == pytest.approx((rw.r - 0.05) / rw.n_tokens)
    # after a generation the scorer reuses the cached prompt: same reward, and the cache stays valid
    start = FimPrompt("def f(x):\n    return x\n", "\n", path="a.py")  # a line start: nothing healed
    res = eng.infill(start, max_tokens=16, cache_key="doc")
    a = scorer.score_fim(start, res, cache_key="doc")
    b = scorer.score_ids(render_fim(eng.tokenizer, start).ids, res.tokens)
    assert not res.lead_tokens and a.cached and a.r == pytest.approx(b.r, abs=1e-4)
    again = eng.infill(start, max_tokens=16, cache_key="doc")
    assert again.tokens == res.tokens and again.cached_tokens == len(render_fim(eng.tokenizer, start).ids)
    # a healed prompt (its typed word chosen again after the middle token): the slot holds the layout
    # without it, then the healed tokens, encoded as a prompt's are (the reference all but the last token,
    # `ReferencePrefill.extend`) — the scorer reads it cached and agrees with its own reference prefill
    word = FimPrompt("def f(x):\n    return", "\n", path="a.py")
    res = eng.infill(word, max_tokens=16, cache_key="doc2")
    healed = eng.format.fim(word).before + res.lead_tokens
    assert eng.tokenizer.decode(res.lead_tokens).startswith(" return")
    assert healed != render_fim(eng.tokenizer, word).ids
    a = scorer.score_fim(word, res, cache_key="doc2")
    b = scorer.score_ids(healed, res.tokens)
    assert a.cached and not b.cached and a.r == pytest.approx(b.r, abs=1e-4)


def test_top_layer_adapter_runs_the_layers_below_once_with_the_same_reward(tmp_path: Path) -> None:
    eng = AlignedEngine.from_engine(Engine.from_checkpoint(random_checkpoint("tiny"), device="cpu"),
                                    write_stacked(tmp_path, layers=[1]))  # LoRA on the top layer only
    scorer = RewardScorer(eng)
    assert scorer.fork == 1
    prompt = FimPrompt("def f(x):\n    return", "\n", path="a.py")
    res = eng.infill(prompt, max_tokens=16, cache_key="doc")
    ids = eng.format.fim(prompt).before + res.lead_tokens  # the prompt as generated: its typed word healed
    assert res.lead_tokens and ids != render_fim(eng.tokenizer, prompt).ids
    forked = scorer.score_fim(prompt, res, cache_key="doc")  # the engine's cached prompt
    cold = scorer.score_ids(ids, res.tokens)  # its own reference prefill
    scorer.fork = 0  # both rows through every layer
    full = scorer.score_ids(ids, res.tokens)
    kto = Kto(eng.model, eng.tokenizer, KtoConfig(samples=1, t_min=0.1), eng.lora)
    sp = eng.tokenizer.special
    r = kto.rewards([(ids, canvas_for(res.tokens, sp.eom, sp.pad, 8))], torch.Generator().manual_seed(0),
                    grad=False)
    assert forked.cached and abs(full.r) > 1e-3
    # Forking runs the top layer on other tensor shapes than the full pass, so float32 sums round
    # differently (~1e-5 on a reward near 2); a wrongly skipped or repeated layer moves r by far more.
    for got in (forked, cold):
        assert got.r == pytest.approx(full.r, abs=1e-4) and got.logp_ref == pytest.approx(full.logp_ref, abs=1e-4)
    assert full.r == pytest.approx(float(r[0]), abs=1e-4)


def test_aligned_engine_prefix_cache_is_exact(tmp_path: Path) -> None:
    eng = aligned(tmp_path)
    fresh = aligned(tmp_path / "b")  # same adapter weights (same seed)
    from engine.types import CanvasSpec

    a, b = [5, 6, 7, 8, 9, 10], [5, 6, 7, 8, 9, 10, 11, 12, 13]  # a is a strict prefix of b
    eng.generate(a, CanvasSpec(16), cache_key="k")
    warm = eng.generate(b, CanvasSpec(16), cache_key="k")  # must not reuse a's policy last row
    cold = fresh.generate(b, CanvasSpec(16))
    assert warm.cached_tokens == len(a) - 1
    assert warm.tokens == cold.tokens and warm.confidences == pytest.approx(cold.confidences, abs=1e-5)
    hit = eng.generate(b, CanvasSpec(16), cache_key="k")
    assert hit.tokens == cold.tokens and hit.confidences == pytest.approx(cold.confidences, abs=1e-5)


def test_zero_lora_generates_like_the_reference_and_bad_adapters_fail_cleanly(tmp_path: Path) -> None:
    plain = Engine.from_checkpoint(random_checkpoint("tiny"), device="cpu")
    prompt = FimPrompt("for i in range(", "):\n    pass\n", path="a.py")
    want = plain.infill(prompt, max_tokens=16)
    zero = aligned(tmp_path, std=0.0)
    got = zero.infill(prompt, max_tokens=16)
    assert got.tokens == want.tokens and got.confidences == pytest.approx(want.confidences, abs=1e-6)
    rw = RewardScorer(zero).score_fim(prompt, got)
    assert rw.r == 0.0  # policy == reference on the same masks
    path = write_stacked(tmp_path / "c")
    st = Path(f"{path}.json")
    st.write_text(st.read_text().replace('"rank": 4', '"rank": 8'))
    eng = Engine.from_checkpoint(random_checkpoint("tiny"), device="cpu")
    with pytest.raises(AdapterError, match="wrong shape"):
        AlignedEngine.from_engine(eng, path)
    assert not any("lora" in n for n, _ in eng.model.named_parameters())  # the model was not touched


# ---- a tiny end-to-end run ----------------------------------------------------------------------
def synthetic_set(out: Path, n: int = 48, seed: int = 0) -> Path:
    """Desirable: ``x = <digit>`` completions; undesirable: ``x = "<word>"`` (one file per example)."""
    rng = random.Random(seed)
    recs = []
    for i in range(n):
        prompt = prompt_to_dict(FimPrompt(f"def f{i}():\n    x = ", "\n    return x\n", path=f"m{i}.py"))
        good = rng.random() < 0.4
        comp = str(rng.randint(0, 9)) if good else f'"{rng.choice(["abc", "hello", "zz"])}"'
        recs.append(Record(f"s{i}", "selfplay", "fim", good, f"m{i}.py", prompt, comp,
                           split="heldout" if i % 6 == 0 else "train"))
    write_set(out, recs)
    return out


def test_tiny_kto_run_lowers_the_loss_raises_the_margin_and_resumes(tmp_path: Path) -> None:
    data = synthetic_set(tmp_path / "data")
    cfg = KtoConfig(model="tiny-random", data=str(data), out=str(tmp_path / "a" / "kto"), steps=30, batch_size=4,
                    lr=2e-2, beta=1.0, rank=4, alpha=8.0, max_prompt=64, max_canvas=16, eval_every=30,
                    save_every=10, threads=1, device="cpu", eval_examples=24)
    s = train_kto(cfg, progress=False)
    live = json.loads((tmp_path / "a" / "kto.progress.json").read_text())  # what `align-status` reads
    assert (live["step"], live["steps"], live["ckpt_step"]) == (30, 30, 30)
    assert live["monitor"] == s["monitor"][-1]
    assert live["z0"] == s["history"][-1]["z0"] and live["eta_s"] == 0
    first, last = s["monitor"][0], s["monitor"][-1]
    assert last["loss"] < first["loss"] - 0.02, (first, last)
    assert last["margin"] > first["margin"] + 0.5, (first, last)
    assert s["desirable"] + s["undesirable"] == 40 and 0 < s["lambda"][0] <= 1
    # λ_D, λ_U are the class balance's (λ_D n_D = λ_U n_U at ratio 1), recorded in the adapter
    assert s["lambda"] == class_weights(s["desirable"], s["undesirable"]) and s["lambda"] != (1.0, 1.0)
    meta = json.loads(Path(f"{cfg.out}.json").read_text())
    assert (meta["data"]["lambda_d"], meta["data"]["lambda_u"]) == s["lambda"]
    assert Path(s["adapter"]).is_file() and Path(f"{cfg.out}.json").is_file()
    # resumable: 10 steps + resume to 30 == 30 steps
    cfg2 = KtoConfig(**{**cfg.__dict__, "out": str(tmp_path / "b" / "kto"), "stop_at": 10})
    train_kto(cfg2, progress=False)  # interrupted after step 10
    cfg2.stop_at = 0
    s2 = train_kto(cfg2, resume=True, progress=False)
    from safetensors.torch import load_file

    w1, w2 = load_file(s["adapter"]), load_file(s2["adapter"])
    assert all(torch.allclose(w1[k], w2[k], atol=1e-6) for k in w1)
    # the trained adapter loads at run time; its reward orders the classes like the trainer's
    eng = AlignedEngine.from_engine(Engine.from_checkpoint(random_checkpoint("tiny"), device="cpu"), cfg.out)
    scorer = RewardScorer(eng)
    p = FimPrompt("def g():\n    x = ", "\n    return x\n", path="t.py")
    assert scorer.score_text(p, "7").score > scorer.score_text(p, '"hello"').score


def test_reference_loader_freezes_the_model() -> None:
    model, tok, info = load_reference(KtoConfig(model="tiny-random", device="cpu"))
    assert not any(p.requires_grad for p in model.parameters()) and info["spec"] == "tiny-random"


def test_reward_and_trainer_render_edits_in_the_adapters_order(tmp_path: Path) -> None:
    """A tier trained with the history after the file (`edit_layout: file-history`, the Qwen tier) generates
    from that order; the scorer must score the same prompt — the engine's cached slot, not a re-prefill of
    the history-first order it never saw (no edit would reuse the cache, and the reward would cost most of
    the generation) — and the KTO trainer must train on it."""
    from dataclasses import replace

    from engine.templates import EditPrompt, render_edit
    from engine.train.kto.records import to_example

    ck = random_checkpoint("tiny")
    ck.meta["edit_layout"] = "file-history"
    eng = AlignedEngine.from_engine(Engine.from_checkpoint(ck, device="cpu"), write_stacked(tmp_path))
    scorer = RewardScorer(eng)
    prompt = EditPrompt("import os\n", "x = 1\ny = x + 1\n", "print(y)\n", 6, path="a.py",
                        history=("--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-z = 1\n+x = 1\n",))
    assert prompt.layout == "history-file"  # what the server sends; the adapter's order replaces it
    file_first = render_edit(eng.tokenizer, replace(prompt, layout="file-history")).ids
    assert file_first != render_edit(eng.tokenizer, prompt).ids
    assert eng.format.edit(prompt).before == file_first == scorer.render(prompt)
    res = eng.rewrite(prompt, cache_key="doc")
    got = scorer.score_edit(prompt, res, cache_key="doc")
    cold = scorer.score_ids(file_first, res.tokens)
    assert got.cached and not cold.cached and got.r == pytest.approx(cold.r, abs=1e-4)
    rec = Record(id="r1", kind="edit", prompt=prompt_to_dict(prompt), completion="x = 2\ny = x + 1\n", label=True,
                 source="test", group="a.py", split="train")
    ex = to_example(eng.tokenizer, rec, 8, 4096, 256, order=(None, "file-history"))
    assert ex is not None and ex[0] == file_first
    plain = to_example(eng.tokenizer, rec, 8, 4096, 256)
    assert plain is not None and plain[0] == render_edit(eng.tokenizer, prompt).ids


def test_kto_keeps_the_step_with_the_lowest_held_out_loss(tmp_path: Path) -> None:
    """The monitor reports the data's held-out split beside the training sample, and the adapter written is
    the monitored step with the lowest held-out loss (a run that overfits has its train monitor fall
    while the reward inverts on new outputs). That step's adapter is what a run stopped there writes;
    `keep_best=False` writes the last step's."""
    from safetensors.torch import load_file

    data = synthetic_set(tmp_path / "data")
    base = dict(model="tiny-random", data=str(data), steps=24, batch_size=4, lr=3e-2, beta=1.0, rank=4, alpha=8.0,
                max_prompt=64, max_canvas=16, eval_every=4, save_every=4, threads=1, device="cpu",
                eval_examples=24)
    s = train_kto(KtoConfig(**base, out=str(tmp_path / "a" / "kto")), progress=False)
    monitored = s["monitor"][1:]
    assert [v["step"] for v in monitored] == [4, 8, 12, 16, 20, 24] and all("heldout" in v for v in s["monitor"])
    want = min(monitored, key=lambda v: v["heldout"]["loss"])
    meta = json.loads((tmp_path / "a" / "kto.json").read_text())
    assert s["chosen"]["step"] == want["step"] == meta["monitor"]["chosen"]["step"]
    stopped = train_kto(KtoConfig(**base, out=str(tmp_path / "b" / "kto"), stop_at=want["step"]), progress=False)
    last = train_kto(KtoConfig(**base, out=str(tmp_path / "c" / "kto"), keep_best=False), progress=False)
    w, w_stop, w_last = (load_file(x["adapter"]) for x in (s, stopped, last))
    assert all(torch.allclose(w[k], w_stop[k], atol=1e-6) for k in w)
    assert last["chosen"] == {"step": 24, "by": "the last step"}
    assert (want["step"] == 24) == all(torch.allclose(w[k], w_last[k], atol=1e-6) for k in w)
