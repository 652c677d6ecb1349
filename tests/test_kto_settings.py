"""The KTO gate's target precision as a server setting (``gate.ktoTargetPrecision``) and the trainer's
``--top-layers`` default (8: the reward's coupled pair runs the layers below the LoRA once)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from edit_server.cli.align_common import AlignOutcome, fit, save
from edit_server.core.requests import FimRequest
from edit_server.core.settings import Gate, Settings, resolve
from edit_server.selectivity import kto_gate
from edit_server.selectivity.select import fim_result
from engine.reward import Reward


def outcomes() -> list[AlignOutcome]:
    """Scores -2.0 … 1.9 per kind; the higher the score the likelier accepted (all from 1.0 on, every
    other one from 0 on, none below): precision rises with the threshold."""
    out = []
    for k in ("fim", "edit"):
        for i, x in enumerate(range(-20, 20)):
            out.append(AlignOutcome(f"{k}{i}", k, x / 10, x >= 10 or (x >= 0 and x % 2 == 0)))
    return out


def reward(adapter: Path, score: float) -> Reward:
    return Reward(score, 0.0, 5, 0.0, 0.0, 1.0, True, str(adapter))


def test_target_precision_setting_repicks_the_reward_threshold(tmp_path: Path) -> None:
    adapter = tmp_path / "kto"
    cal = fit(outcomes(), 0.6, 10)
    save(cal, kto_gate.calibration_path(adapter), 0.6)
    rc = kto_gate.calibration_for(adapter)
    assert rc is not None and rc.curves["fim"] and rc.threshold("fim") == cal["fim"].threshold
    low, high = rc.threshold("fim", 0.55), rc.threshold("fim", 0.95)
    assert low < high < float("inf"), (low, high)
    assert rc.threshold("fim", 1.0) >= high and rc.threshold("fim", 0.0) == cal["fim"].threshold
    mid = reward(adapter, (low + high) / 2)
    doc = "def f(a, b):\n    return \n"
    req = FimRequest("file:///a.py", "/w/a.py", doc, 1, len(doc) - 1)

    def shown(target: float) -> bool:
        s = Settings(gate=Gate(calibration="off", kto=str(adapter), kto_target_precision=target))
        sug = fim_result(req, "a + b", [0.99] * 3, s, mid)
        assert sug is not None and sug.reason in ("ok", "low reward")
        return sug.show

    assert shown(0.55) and not shown(0.95)  # the setting moves the threshold; confidences play no part
    assert shown(0.0) == (mid.score >= cal["fim"].threshold)  # 0 = as calibrated
    # a calibration file from before the setting (no curve): its fitted threshold, whatever the target
    old = tmp_path / "old"
    body = json.loads(kto_gate.calibration_path(adapter).read_text())
    for v in body["kinds"].values():
        del v["curve"]
    kto_gate.calibration_path(old).write_text(json.dumps(body))
    oc = kto_gate.calibration_for(old)
    assert oc is not None and oc.threshold("fim", 0.95) == oc.threshold("fim", 0.55) == cal["fim"].threshold


def test_target_precision_is_range_validated_and_camel_cased() -> None:
    s, bad = resolve({"gate": {"ktoTargetPrecision": 0.8}})
    assert bad == [] and s.gate.kto_target_precision == 0.8
    s2, bad = resolve({"gate": {"ktoTargetPrecision": 1.5, "threshold": 0.7}})
    assert len(bad) == 1 and bad[0].startswith("gate.ktoTargetPrecision") and s2.gate.kto_target_precision == 0.0
    assert s2.gate.threshold == 0.7  # the other key still applies
    assert resolve({"gate": {"ktoTargetPrecision": -0.1}})[1]


def test_top_layers_default_is_8_in_the_cli_and_the_trainer(tmp_path: Path) -> None:
    """A model with more than 8 layers gets LoRA on its last 8 only unless ``--top-layers 0`` asks for all."""
    from edit_server.cli.align_kto import register_cli
    from engine.train.kto.trainer import KtoConfig, train_kto
    from tests.test_kto import synthetic_set

    p = argparse.ArgumentParser()
    register_cli(p.add_subparsers())
    args = p.parse_args(["kto", "--data", "d", "--out", "o"])
    assert args.top_layers == KtoConfig().top_layers == 8
    assert p.parse_args(["kto", "--top-layers", "0"]).top_layers == 0
    config = tmp_path / "config.json"  # a tiny Llama with 10 layers
    config.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 32, "num_hidden_layers": 10,
                                  "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 64,
                                  "vocab_size": 300, "max_position_embeddings": 1024, "tie_word_embeddings": True}))
    data = synthetic_set(tmp_path / "data", n=12)
    from safetensors.torch import load_file

    layers = {}
    for top in (None, 0):
        kw = {} if top is None else {"top_layers": top}
        cfg = KtoConfig(model=f"random:{config}", data=str(data), out=str(tmp_path / f"a{top}" / "kto"), steps=1,
                        batch_size=2, rank=2, alpha=4.0, max_prompt=32, max_canvas=8, eval_examples=2, threads=1,
                        device="cpu", **kw)
        s = train_kto(cfg, progress=False)
        layers[top] = sorted({int(k.split(".")[2]) for k in load_file(s["adapter"])})
    assert layers[None] == list(range(2, 10)) and layers[0] == list(range(10))


def test_top_layer_adapter_learns_as_well_as_all_layers_on_the_tiny_run(tmp_path: Path) -> None:
    """Why the default could move to the top layers: on the tiny end-to-end run (test_kto's, 2 layers) a LoRA
    on the top half lowers the loss and raises the reward margin as much as one on every layer."""
    from engine.train.kto.trainer import KtoConfig, train_kto
    from tests.test_kto import synthetic_set

    data = synthetic_set(tmp_path / "data")
    last = {}
    for top in (1, 0):
        cfg = KtoConfig(model="tiny-random", data=str(data), out=str(tmp_path / f"a{top}" / "kto"), steps=30,
                        batch_size=4, lr=2e-2, beta=1.0, rank=4, alpha=8.0, max_prompt=64, max_canvas=16,
                        eval_every=30, save_every=30, threads=1, device="cpu", eval_examples=24, top_layers=top)
        s = train_kto(cfg, progress=False)
        first, last[top] = s["monitor"][0], s["monitor"][-1]
        assert last[top]["loss"] < first["loss"] - 0.1 and last[top]["margin"] > first["margin"] + 2.0, (top, s)
    assert last[1]["loss"] <= last[0]["loss"] + 0.02 and last[1]["margin"] >= 0.9 * last[0]["margin"], last
