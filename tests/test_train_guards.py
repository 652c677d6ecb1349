"""Training's numerical guards: a non-finite step never reaches the weights, a run of them stops the
loop with the last finite weights, and training on CUDA turns the cuDNN attention backward off."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import engine.train.trainer as trainer_mod
from engine.tokenizer import Tokenizer
from engine.train import guards
from engine.train.corpus import build_corpus
from engine.train.guards import StepGuard, attention_for_training
from engine.train.lora import load_adapter
from tests.test_train_smoke import _cfg, synth_tree


def _model_and_opt() -> tuple[torch.nn.Linear, torch.optim.Optimizer]:
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 3)
    return lin, torch.optim.AdamW(lin.parameters(), lr=0.1)


def _backward(lin: torch.nn.Linear, scale: float) -> None:
    (lin(torch.ones(2, 4)).sum() * scale).backward()


def test_finite_gradient_steps_and_is_clipped() -> None:
    lin, opt = _model_and_opt()
    before = lin.weight.detach().clone()
    g = StepGuard(opt, lin.parameters(), max_norm=1.0)
    _backward(lin, 100.0)
    norm = g.step(1)
    assert norm > 100.0  # the pre-clip norm is reported
    assert not torch.equal(lin.weight, before)
    assert (g.skipped, g.in_row, g.diverged) == (0, 0, False)
    assert all(p.grad is None for p in lin.parameters())


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_gradient_is_skipped_and_counted(bad: float) -> None:
    lin, opt = _model_and_opt()
    g = StepGuard(opt, lin.parameters(), max_norm=1.0, max_in_row=3)
    _backward(lin, 1.0)
    g.step(1)
    after_good = lin.weight.detach().clone()
    state = {k: v.clone() for k, v in opt.state[lin.weight].items()}
    _backward(lin, bad)
    assert not math.isfinite(g.step(2))
    assert torch.equal(lin.weight, after_good)  # the update never happened
    assert all(torch.equal(opt.state[lin.weight][k], v) for k, v in state.items())  # nor the moments'
    assert (g.skipped, g.in_row, g.diverged) == (1, 1, False)
    _backward(lin, 1.0)
    g.step(3)  # a finite step resets the run
    assert (g.skipped, g.in_row) == (1, 0)
    for s in range(3):
        _backward(lin, bad)
        g.step(4 + s)
    assert (g.skipped, g.in_row, g.diverged) == (4, 3, True)
    assert torch.isfinite(lin.weight).all()


def test_attention_for_training_turns_cudnn_off_on_cuda_only(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []
    monkeypatch.setattr(torch.backends.cuda, "cudnn_sdp_enabled", lambda: True)
    monkeypatch.setattr(torch.backends.cuda, "enable_cudnn_sdp", calls.append)
    assert attention_for_training(torch.device("cpu")) is False
    assert calls == []
    assert attention_for_training(torch.device("cuda")) is True
    assert calls == [False]
    monkeypatch.setattr(torch.backends.cuda, "cudnn_sdp_enabled", lambda: False)
    assert attention_for_training(torch.device("cuda")) is False  # already off: nothing to do
    assert calls == [False]
    assert guards.__doc__ and "196678" in guards.__doc__


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("corpus")
    build_corpus([synth_tree(d / "src", 12)], d / "out", Tokenizer.byte_level(), tokenizer_name="byte")
    return d / "out"


def test_training_skips_a_nan_step_and_stops_when_diverged(corpus: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    real = trainer_mod.bd3_loss
    calls = {"n": 0}
    poison = {3} | set(range(9, 40))  # one bad batch, then every batch from the 9th on (grad_accum 1)

    def flaky(model: torch.nn.Module, batch: object) -> tuple[torch.Tensor, dict]:
        loss, m = real(model, batch)
        if model.training:
            calls["n"] += 1
            if calls["n"] in poison:
                return loss * float("nan"), {**m, "loss": float("nan")}
        return loss, m

    monkeypatch.setattr(trainer_mod, "bd3_loss", flaky)
    monkeypatch.setattr(trainer_mod, "StepGuard",
                        lambda opt, params: StepGuard(opt, params, max_in_row=4))
    s = trainer_mod.train(_cfg(corpus, tmp_path / "run", steps=30, val_every=100, save_every=100),
                          progress=False)
    assert s["steps"] == 12  # steps 9..12 non-finite: 4 in a row → stopped after step 12
    assert s["diverged"] is True and s["skipped_steps"] == 5
    norms = [h["grad_norm"] for h in s["history"]]
    assert [i + 1 for i, n in enumerate(norms) if not math.isfinite(n)] == [3, 9, 10, 11, 12]
    assert math.isfinite(s["val"][-1]["loss"])  # the last finite weights were kept and exported
    tensors, _ = load_adapter(tmp_path / "run" / "adapter")
    assert all(torch.isfinite(t).all() for t in tensors.values())
