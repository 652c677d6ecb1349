"""`engine.tiers`: the recorded tier table and what ``--model default`` resolves to (fake measurements)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from engine import tiers
from engine.tiers import EMBEDDED, TierDataError, choose, parse

TYPING = {"inline_p50_ms": 300, "inline_p95_ms": 800, "next_edit_p50_ms": 1500}


def row(model: str, single: float | None, cpu: tuple[float, float, float] | None) -> dict[str, Any]:
    lat = None if cpu is None else dict(zip(("inline_p50_ms", "inline_p95_ms", "next_edit_p50_ms"), cpu, strict=True))
    return {"model": model, "what": model, "size": "1 MB", "context": 4096, "decoding": "x",
            "quality": None if single is None else {"single_line": single, "single_line_n": 100},
            "latency": {"cpu": lat, "cuda": None}}


def table(*rows: dict[str, Any]) -> tiers.Table:
    return parse({"typing_table": TYPING, "embedded": EMBEDDED, "tiers": list(rows)}, "fake.json")


FAKE = table(row(EMBEDDED, 0.26, (138, 461, 1222)),
             row("qwen2.5-coder-0.5b", 0.65, (900, 2000, 6000)),      # misses the CPU table
             row("qwen2.5-coder-1.5b", 0.70, None),                   # no CPU row: misses it
             row("fast-good", 0.40, (250, 700, 1400)),                # meets it
             row("unmeasured", None, None))


def have(*names: str):
    return lambda m: m in names


def test_cpu_picks_the_best_tier_that_meets_the_typing_table() -> None:
    c = choose("cpu", FAKE, have(EMBEDDED, "fast-good", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"))
    assert c.model == "fast-good"
    assert "qwen2.5-coder-0.5b: misses the CPU typing table (inline_p50_ms 900 > 300; inline_p95_ms 2,000 > 800;" \
        in c.reason
    assert "qwen2.5-coder-1.5b: misses the CPU typing table (no recorded CPU latency row)" in c.reason
    # without fast-good's weights: the embedded model, which meets the table itself
    c = choose("cpu", FAKE, have(EMBEDDED, "qwen2.5-coder-0.5b"))
    assert c.model == EMBEDDED and "fast-good: weights not on this machine" in c.reason


def test_gpu_picks_the_best_quality_whose_weights_are_here() -> None:
    assert choose("cuda", FAKE, have(EMBEDDED, "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")).model == "qwen2.5-coder-1.5b"
    c = choose("cuda", FAKE, have(EMBEDDED, "qwen2.5-coder-0.5b"))
    assert c.model == "qwen2.5-coder-0.5b"
    assert "qwen2.5-coder-1.5b: weights not on this machine (edit-server train fetch-base qwen2.5-coder-1.5b)" in c.reason
    assert choose("cuda", FAKE, have(EMBEDDED)).model == EMBEDDED
    # nothing measured fits and the embedded model's own files are gone: still the embedded model (the fallback)
    assert choose("cpu", table(row("qwen2.5-coder-0.5b", 0.65, None)), have()).model == EMBEDDED


def test_an_adapter_override_means_the_embedded_model() -> None:
    c = choose("cuda", FAKE, have(EMBEDDED, "qwen2.5-coder-1.5b"), adapter="/runs/x/adapter")
    assert c.model == EMBEDDED and "EDIT_SERVER_ADAPTER" in c.reason


def test_a_missing_fetched_file_falls_back_with_the_log_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # an empty cache: no parted base fetched
    monkeypatch.delenv("EDIT_SERVER_ADAPTER", raising=False)
    fake = table(row(EMBEDDED, 0.26, (138, 461, 1222)), row("qwen2.5-coder-0.5b", 0.65, (200, 500, 900)))
    monkeypatch.setattr(tiers, "load", lambda path=tiers.DATA: fake)
    with caplog.at_level(logging.INFO, logger="engine.tiers"):
        assert tiers.resolve_spec("default", "cpu") == EMBEDDED
    assert any("--model default -> smollm2-bd3 on cpu" in r.message and
               "qwen2.5-coder-0.5b: weights not on this machine" in r.message for r in caplog.records)
    # the file there (right size): it is picked; other specs pass through untouched
    p = tmp_path / "edit-server" / "base" / "Qwen2.5-Coder-0.5B-Instruct.gguf"
    p.parent.mkdir(parents=True)
    with open(p, "wb") as f:
        f.truncate(491_400_064)  # sparse
    assert tiers.resolve_spec("default", "cpu") == "qwen2.5-coder-0.5b"
    assert tiers.resolve_spec("tiny-random", "cpu") == "tiny-random"


def test_the_recorded_table_parses_and_the_embedded_model_is_the_cpu_default() -> None:
    t = tiers.load()
    names = [x.model for x in t.tiers]
    assert names[:3] == [EMBEDDED, "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
    emb = t.tiers[0]
    assert emb.quality is not None and emb.quality.single_line is not None
    # on the 2-core Xeon, measured as served (gate on), the Qwen block-diffusion tier meets the table: it is
    # the CPU default where its base was fetched; the embedded model where it was not. The untouched 0.5B meets
    # it too (the typed line after its middle token keeps the suffix's KV) and ranks between them; the 1.5B
    # does not
    assert t.typing.misses(emb.latency["cpu"]) is None
    assert choose("cpu", t, have(*names)).model == "qwen2.5-coder-0.5b-bd3"
    assert choose("cpu", t, have(EMBEDDED, "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")).model == "qwen2.5-coder-0.5b"
    assert choose("cpu", t, have(EMBEDDED, "qwen2.5-coder-1.5b")).model == EMBEDDED
    assert choose("cpu", t, have(EMBEDDED)).model == EMBEDDED
    for x in t.tiers:  # every recorded number names its machine and command
        for r in (x.quality, *x.latency.values()):
            assert r is None or (r.machine and r.command and r.row), (x.model, r)


@pytest.mark.parametrize("data, where", [
    ({"tiers": "x", "typing_table": TYPING}, "fake.json: field 'tiers'"),
    ({"tiers": [], "typing_table": {"inline_p50_ms": 1}}, "fake.json: typing_table"),
    ({"tiers": [{**row("a", 0.1, None), "quality": {"single_line": 0.1, "bogus": 1}}], "typing_table": TYPING},
     "fake.json: tiers[0] (a).quality: unknown field(s) bogus"),
    ({"tiers": [{**row("a", 0.1, None), "latency": {"cpu": [1]}}], "typing_table": TYPING},
     "fake.json: tiers[0] (a).latency.cpu: expected an object"),
])
def test_bad_data_names_file_and_field(data: dict[str, Any], where: str) -> None:
    with pytest.raises(TierDataError) as e:
        parse(data, "fake.json")
    assert where in str(e.value)


def test_models_json_has_the_rows_and_the_choice(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from edit_server.cli import main

    monkeypatch.delenv("EDIT_SERVER_ADAPTER", raising=False)
    monkeypatch.setattr(tiers, "available", lambda m: m == EMBEDDED)  # a machine that fetched no base
    assert main(["models", "--json", "--device", "cpu"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["default"]["model"] == EMBEDDED and out["default"]["device"] == "cpu"
    assert out["typing_table"]["inline_p50_ms"] == 300
    rows = {r["model"]: r for r in out["tiers"]}
    q = rows["qwen2.5-coder-0.5b"]
    assert q["quality"]["single_line"] == pytest.approx(0.61) and q["context"] == 32768  # int8, as served on a CPU
    assert q["latency"]["cpu"]["inline_p50_ms"] <= 300  # meets the table (the typed line after the middle token)
    assert rows["qwen2.5-coder-1.5b"]["latency"]["cpu"]["inline_p50_ms"] > 300  # its decode misses it
    assert q["quality_row"] and q["latency_row"]
    # its rewrites were never right: edit ∞, so its next edits are the rules' (fast: they meet that row)
    assert q["show_thresholds"]["edit"]["threshold"] == float("inf")
    assert q["latency"]["cpu"]["next_edit_p50_ms"] < 1500
    assert main(["models", "--device", "cpu"]) == 0
    text = capsys.readouterr().out
    assert f"{EMBEDDED}  <- default here" in text and "--model default -> smollm2-bd3 on cpu" in text
    monkeypatch.setattr(tiers, "available", lambda m: True)  # one that fetched the Qwen base
    assert main(["models", "--json", "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out)["default"]["model"] == "qwen2.5-coder-0.5b-bd3"


def test_bench_lsp_runs_an_autoregressive_base_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from edit_server.cli.bench_lsp import adapter_runs, autoregressive

    monkeypatch.delenv("EDIT_SERVER_ADAPTER", raising=False)
    assert autoregressive("qwen2.5-coder-0.5b", "cpu") and autoregressive("Qwen2.5-Coder-1.5B", "cpu")
    assert not autoregressive("default", "cpu") and not autoregressive(EMBEDDED, "cpu")
    args = argparse.Namespace(adapter=[], decode="", no_ar=False)
    assert list(adapter_runs(args)) == ["main", "ar"]


def test_models_resolves_for_a_gpu_without_one(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from edit_server.cli import main

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # nothing fetched: the embedded model
    monkeypatch.delenv("EDIT_SERVER_ADAPTER", raising=False)
    assert main(["models", "--json", "--device", "cuda"]) == 0
    out = json.loads(capsys.readouterr().out)["default"]
    assert out["model"] == EMBEDDED and out["device"] == "cuda"
    assert "qwen2.5-coder-0.5b: weights not on this machine" in out["reason"]
    assert "typing table" not in out["reason"]  # a GPU is not held to the CPU table


def test_a_shipped_adapter_tier_needs_its_adapter_and_its_base(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """qwen2.5-coder-0.5b-bd3 = the Qwen base (fetched into the cache) + our adapter in engine/weights."""
    from engine import default

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("EDIT_SERVER_ADAPTER", raising=False)
    weights = tmp_path / "weights"
    weights.mkdir()
    monkeypatch.setattr(default, "WEIGHTS", weights)
    name, stem = "qwen2.5-coder-0.5b-bd3", "qwen2_5-coder-0_5b-bd3"
    # adapters are named without a suffix and opened with Path.with_suffix: no dot in a stem
    assert all("." not in s.stem for s in tiers.SHIPPED.values())
    assert tiers.shipped_adapter(name) == weights / stem
    assert tiers.shipped_adapter(" Qwen2.5-Coder-0.5B-BD3 ") == weights / stem
    assert tiers.shipped_adapter(EMBEDDED) == weights / "default"
    assert tiers.shipped_adapter("qwen2.5-coder-0.5b") is None  # the untouched AR base: no adapter
    assert not tiers.available(name)
    (weights / f"{stem}.safetensors").write_bytes(b"x")
    assert not tiers.available(name)  # the adapter without its base
    p = tmp_path / "cache" / "edit-server" / "base" / "Qwen2.5-Coder-0.5B-Instruct.gguf"
    p.parent.mkdir(parents=True)
    with open(p, "wb") as f:
        f.truncate(491_400_064)
    assert tiers.available(name) and tiers.available("qwen2.5-coder-0.5b")
    # a run's adapter replaces the embedded model's only
    monkeypatch.setenv("EDIT_SERVER_ADAPTER", str(tmp_path / "run" / "adapter"))
    assert tiers.shipped_adapter(EMBEDDED) == tmp_path / "run" / "adapter"
    assert tiers.shipped_adapter(name) == weights / stem


def test_the_shipped_qwen_adapter_matches_its_tier_row() -> None:
    from engine.default import WEIGHTS

    meta = json.loads((WEIGHTS / "qwen2_5-coder-0_5b-bd3.json").read_text())
    assert meta["base"]["sha256"] == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert meta["trained_on"] == "NVIDIA H200" and meta["edit_layout"] == "file-history"
    assert (WEIGHTS / "qwen2_5-coder-0_5b-bd3.safetensors").stat().st_size < 20_000_000
    row = next(x for x in tiers.load().tiers if x.model == "qwen2.5-coder-0.5b-bd3")
    assert row.quality is not None and row.quality.single_line is not None and row.quality.command
