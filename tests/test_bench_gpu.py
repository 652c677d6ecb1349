"""`engine.train.recipe.bench_gpu` (issue 23 §2: every window measures the engine on the GPU), rehearsed on the CPU with
tiny shapes: the code path needs no CUDA; a 7B shape is sized on the meta device, never allocated here."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from engine.engine import Engine
from engine.model import Transformer
from engine.train.recipe.bench_gpu import main, model_bytes, random_engine

GiB = 1 << 30


def test_random_engine_builds_on_meta_and_matches_the_seeded_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    init = Transformer.__init__

    def spy(self: Transformer, *a: object, **k: object) -> None:
        init(self, *a, **k)  # type: ignore[arg-type]
        built.append(next(self.parameters()).device.type)

    monkeypatch.setattr(Transformer, "__init__", spy)
    eng = random_engine("tiny", "cpu", "fp32")
    assert built == ["meta"]  # the skeleton holds no memory: the weights are made once, on the device
    ref = Engine.load("random:tiny", device="cpu", dtype="fp32")
    a, b = eng.model.state_dict(), ref.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    bf = random_engine("tiny", "cpu", "bf16")
    assert {p.dtype for p in bf.model.parameters()} == {torch.bfloat16}
    shared = random_engine("tiny", cuda_graphs=False, model=eng.model)
    assert shared.model is eng.model


def test_the_7b_shape_fits_an_h100_in_bf16() -> None:
    n = model_bytes("Dream-org/Dream-Coder-v0-Instruct-7B")  # meta device: nothing allocated
    assert 14 * GiB < n < 16 * GiB
    kv_32k = 28 * 2 * 4 * 128 * 32768 * 2  # layers x (k, v) x kv heads x head dim x tokens x bf16
    assert n + 2 * kv_32k < 70 * GiB  # the H100's ~78 GiB, with room for activations and graphs
    assert model_bytes("smollm2-135m") < 300e6


def test_engine_bench_rehearsal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.set_num_threads(1)
    monkeypatch.delenv("DISABLE_CUPTI_LAZY_REINIT", raising=False)  # main sets it; restored after the test
    out = tmp_path / "engine.json"
    assert main(["engine", "--shapes", "tiny", "--prompts", "48", "--tokens", "8", "--device", "cpu",
                 "--budget-s", "900", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    rows = d["rows"]
    dec = [r for r in rows if r["what"] == "decode"]
    assert [r["graphs_asked"] for r in dec] == [False, True]  # the same weights, CUDA graphs off then on
    for r in dec:
        assert r["ar"]["tokens"] == 8 and r["diffusion"]["tokens"] == 8 and r["prompt"] == 48
        w1 = r["width1"]
        assert w1["tokens"] == 8 and w1["forwards"] >= 2 and w1["ms_per_forward"] > 0 and w1["drafted"] >= 0
        assert w1["ms_per_forward"] <= w1["decode_ms"] / 2  # per forward, not per call (a 7B row's forwards are long)
        assert r["cuda_graphs"] is False  # a CPU has none
    assert rows[0]["what"] == "load"
    pre = next(r for r in rows if r["what"] == "prefill")["rows"]
    # the warm edit made twice, the second timed: the first pays a new shape's one-off costs on a GPU
    assert [r["context"] for r in pre] == [48] and pre[0]["recomputed"] == 1
    assert pre[0]["warm_ms"] > 0 and pre[0]["warm_first_ms"] > 0
    assert os.environ.get("DISABLE_CUPTI_LAZY_REINIT") == "1"  # set before the profiler (pytorch#75504)
    assert d["skipped"] == [] and d["machine"]["device"] == "cpu"
    assert all(r["load_1m"] >= 0 for r in rows)
    prof = next(r for r in rows if r["what"] == "profile")  # where a decoded token's time goes
    assert prof["cuda_graphs"] is False  # eager steps: CUPTI and replayed graphs do not mix
    assert prof["prompt"] == 48 and set(prof) >= {"ar", "block", "width1"}
    ar = prof["ar"]
    assert ar["units"] == 16 and ar["aten_ops_per_unit"] > 20 and ar["syncs_per_unit"] >= 1  # int(argmax) each token
    assert ar["launches_per_unit"] == 0 and ar["top_device"] == []  # a CPU launches no kernels
    assert ar["top_host"][0]["self_ms"] > 0 and prof["width1"]["forwards"] >= 1


def test_engine_bench_keeps_to_its_budget(tmp_path: Path) -> None:
    out = tmp_path / "engine.json"
    assert main(["engine", "--shapes", "tiny,tiny", "--prompts", "32", "--tokens", "4", "--device", "cpu",
                 "--budget-s", "0", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert len(d["skipped"]) >= 2 and not any(r["what"] == "decode" for r in d["rows"])


def test_latency_rehearsal(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    out = tmp_path / "latency.json"
    assert main(["latency", "--model", "tiny-random", "--device", "cpu", "--positions", "3", "--budget-s", "900",
                 "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    for kind in ("single-line", "next-edit"):
        assert d[kind]["n"] == 3 and d[kind]["p50_ms"] > 0 and d[kind]["tokens_per_forward"] > 0
    assert {r["what"] for r in d["rows"]} == {"single-line", "next-edit"}


def test_the_bench_waits_out_the_corpus_build_on_its_own_clock(tmp_path: Path) -> None:
    """Rows measured while the window job builds its corpus on every core run several times slower: the bench
    waits while the job's phase is `corpus` (at most --quiet-wait-s) and records the phase beside each row."""
    from engine.train.recipe.bench_gpu import Report

    phase = tmp_path / "phase.json"
    phase.write_text(json.dumps({"phase": "corpus"}))
    rep = Report(None, {}, phase)
    rep.wait_quiet(0.6)
    assert 0.6 <= rep.data["waited_s"] < 2.0  # gave up at its limit: the build is still running
    phase.write_text(json.dumps({"phase": "wait-base"}))
    rep.wait_quiet(30.0)
    assert rep.data["waited_s"] < 1.0  # no wait once the build is done
    rep.add({"what": "load"})
    assert rep.data["rows"][0]["job_phase"] == "wait-base" and rep.elapsed() >= 0.6  # one clock for the budget
    plain = Report(None, {})  # the bench run by hand: no job beside it
    plain.add({"what": "load"})
    assert "job_phase" not in plain.data["rows"][0]


def test_the_warm_prefill_edits_the_last_token_twice_to_different_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """A BPE vocabulary holds "xyz" as one token (Qwen's: 28854): the two warm edits must still differ, else the
    second, the one reported, re-sends the first's prompt."""
    from engine.bench import prefill_cold_warm

    torch.set_num_threads(1)
    eng = random_engine("tiny", "cpu", "fp32")
    encode = eng.tokenizer.encode
    monkeypatch.setattr(eng.tokenizer, "encode", lambda s: [120] if s == "xyz" else encode(s))
    seen: list[int] = []
    generate = eng.generate

    def spy(prompt: list[int], *a: object, **k: object) -> object:
        seen.append(prompt[-1])
        return generate(prompt, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(eng, "generate", spy)
    (row,) = prefill_cold_warm(eng, [40])
    assert len(seen) == 4  # the warm-up, cold, the first warm edit, the timed one
    assert len({seen[1], seen[2], seen[3]}) == 3 and row["recomputed"] == 1


def test_latency_times_cuda_graphs_on_then_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the engine has captured steps (CUDA; here the static step uncaptured), the latency run times
    them and the eager steps in turn at each position over the same loaded weights, and reports both."""
    from engine.decoding.graphs import StepGraphs
    from engine.engine import Engine

    torch.set_num_threads(1)
    load = Engine.load

    def with_graphs(*a, **kw):  # type: ignore[no-untyped-def]
        eng = load(*a, **kw)
        eng.graphs = StepGraphs(eng.model, eng.kv_dtype, eng.device, capture=False)
        return eng

    monkeypatch.setattr(Engine, "load", with_graphs)
    out = tmp_path / "latency.json"
    assert main(["latency", "--model", "tiny-random", "--device", "cpu", "--positions", "2",
                 "--budget-s", "900", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["single-line"]["cuda_graphs"] == "on" and d["single-line (graphs off)"]["n"] == 2
    assert d["next-edit"]["n"] == 2 and d["next-edit (graphs off)"]["cuda_graphs"] == "off"
    assert [r["cuda_graphs"] for r in d["rows"]] == ["on", "off"] * 4  # paired at each position
    assert d["graphs"]["replayed"] > 4  # the "on" rows' decode steps ran static
    assert d["same_output"] == {"pairs": 4, "same": 4}  # and answered what the eager steps answer
