"""The GPU recipe's whole cycle, rehearsed on the CPU with the tiny model.

pack → receive → start (detached job) → SIGKILL mid-run → collect parts → keep → a fresh work dir (a new
machine, days later) → receive + resume → the loss curve continues and the final weights, optimizer
state and RNG equal those of an uninterrupted run with the same seed. The jobs run with the imports
the GPU image lacks blocked (pygls, msgspec, GitPython, gguf, ...).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from engine.tokenizer import Tokenizer
from engine.train.corpus import CorpusOptions, build_corpus
from engine.train.recipe import COMMIT_MAX, MiB
from engine.train.recipe.collect import back_limits, checkpoint_bytes, collect, export, keep, restore, resume
from engine.train.recipe.job import resolve_sources, start, status
from engine.train.recipe.pack import pack
from engine.train.recipe.parts import PartsError
from engine.train.recipe.receive import receive
from engine.train.recipe.workdir import RecipeError
from engine.train.train_state import latest_checkpoint, read_checkpoint
from engine.train.trainer import TrainConfig, train
from tests.test_train_smoke import synth_tree

NOT_ON_GPU = ("pygls", "lsprotocol", "msgspec", "git", "gitdb", "gguf", "cattrs", "aiohttp")
STEPS, SAVE_EVERY, KILL_AFTER = 32, 4, 8
CONFIG: dict[str, Any] = dict(model="tiny", seq_len=192, block_size=8, max_canvas=32, chars_per_token=1.0,
                              batch_size=2, steps=STEPS, lr=5e-3, embed_lr=5e-3, warmup=4, rank=4, alpha=8,
                              val_every=16, val_examples=2, save_every=SAVE_EVERY, threads=1,
                              mix={"fim": 0.5, "edit": 0.2, "noedit": 0.1, "continue": 0.2})


def _blocker(d: Path) -> dict[str, str]:
    """PYTHONPATH with a sitecustomize that makes the GPU image's missing packages unimportable."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "sitecustomize.py").write_text(
        "import sys\n"
        f"BLOCK = {set(NOT_ON_GPU)!r}\n"
        "class _Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in BLOCK:\n"
        "            raise ImportError(f'{name}: not on the GPU image')\n"
        "sys.meta_path.insert(0, _Block())\n")
    return {"PYTHONPATH": str(d)}


def _wait(work: Path, until: Any, timeout: float = 120.0) -> dict[str, Any]:
    t0 = time.time()
    while time.time() - t0 < timeout:
        st = status(work)
        if until(st):
            return st
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting; last status {status(work)}\n{_log(work)}")


def _log(work: Path) -> str:
    p = work / "job.log"
    return p.read_text(errors="replace")[-3000:] if p.is_file() else "(no log)"


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("pack")
    src = synth_tree(d / "src", 30)
    plan = pack(d / "pack", CONFIG, base=None, wheels=[], sources=[str(src)],
                corpus_options={"val_fraction": 0.1}, eval_limit=0, tree=0)
    assert len(plan["uploads"]) == 1 and plan["uploads"][0]["files"] == ["boot.tar.xz"]
    return d / "pack" / "up1", src


def test_cycle_kill_collect_resume_equals_uninterrupted(packed: tuple[Path, Path], tmp_path: Path) -> None:
    torch.set_num_threads(1)
    up, src = packed
    env = _blocker(tmp_path / "block")
    # -- window 1: receive, start, killed mid-run (the machine taken back) --------------------------
    w1 = tmp_path / "gpu1"
    assert receive(w1, [up])["installed"] == ["boot.tar.xz"]
    pid = start(w1, env=env)["pid"]
    os.killpg(pid, signal.SIGSTOP)  # the job runs only in short slices: the kill lands mid-run for sure
    with pytest.raises(RecipeError, match="already running"):
        start(w1, env=env)
    t0 = time.time()
    while (st := status(w1))["running"] and (st["ckpt_step"] or 0) < KILL_AFTER and time.time() - t0 < 120:
        os.killpg(pid, signal.SIGCONT)
        time.sleep(0.05)
        os.killpg(pid, signal.SIGSTOP)
    assert st["running"] and st["phase"] == "train", f"no checkpoint before the kill: {st}\n{_log(w1)}"
    os.killpg(pid, signal.SIGKILL)
    st = _wait(w1, lambda s: not s["running"], 20)
    assert st["phase"] == "died (train)" and KILL_AFTER <= st["ckpt_step"] < STEPS
    # -- collect as every poll does, keep here -----------------------------------------------------
    got = collect(w1, tmp_path / "out1", part_bytes=40_000)
    assert got["warnings"] == [] and got["checkpoint"]["parts"] >= 2
    assert [d.name for d in (tmp_path / "out1").glob("ckpt-*")] == [got["checkpoint"]["dir"]]
    parts = sorted((tmp_path / "out1" / got["checkpoint"]["dir"]).glob("*.part*"))
    assert len(parts) == got["checkpoint"]["parts"] and all(p.stat().st_size <= 40_000 for p in parts)
    step = got["checkpoint"]["step"]
    assert step >= st["ckpt_step"] and step % SAVE_EVERY == 0
    kept = keep(tmp_path / "out1", tmp_path / "weights" / "gpu-ckpt")
    assert kept["kept"] and kept["step"] == step and kept["committable"]
    bad = tmp_path / "bad"
    shutil.copytree(tmp_path / "out1", bad)
    part = next(bad.glob("ckpt-*/*.part001"))
    part.write_bytes(b"x" + part.read_bytes()[1:])
    with pytest.raises(PartsError, match="sha256"):
        restore(bad, tmp_path / "gpu-bad")
    # -- window 2: a fresh work dir, the same pack, the kept parts ------------------------------------
    w2 = tmp_path / "gpu2"
    receive(w2, [up])
    resume(tmp_path / "weights" / "gpu-ckpt", w2, env=env)
    st2 = _wait(w2, lambda s: not s["running"], 120)
    assert st2["phase"] == "done" and st2["step"] == STEPS, f"{st2}\n{_log(w2)}"
    resumed = json.loads((w2 / "run" / "summary.json").read_text())
    assert resumed["resumed_from"] == step
    # -- the same run without interruption, in this process ----------------------------------------
    ref_corpus = tmp_path / "ref-corpus"
    build_corpus(resolve_sources([str(src)]), ref_corpus, Tokenizer.byte_level(), tokenizer_name="byte",
                 opts=CorpusOptions(val_fraction=0.1))
    assert json.loads((ref_corpus / "index.json").read_text())["digest"] == \
        json.loads((w2 / "corpus" / "index.json").read_text())["digest"]
    ref = train(TrainConfig.from_dict({**CONFIG, "corpus": str(ref_corpus), "out": str(tmp_path / "ref")}),
                progress=False)
    assert [h["step"] for h in resumed["history"]] == list(range(1, STEPS + 1))
    ref_loss, res_loss = [h["loss"] for h in ref["history"]], [h["loss"] for h in resumed["history"]]
    assert res_loss == ref_loss, (ref_loss, res_loss)
    assert res_loss[step:] != res_loss[:STEPS - step]  # a real curve, not a constant
    val = {v["step"]: v["loss"] for v in resumed["val"]}  # + one at the resume step
    assert [val[v["step"]] for v in ref["val"]] == [v["loss"] for v in ref["val"]] and len(ref["val"]) == 3
    a = load_file(str(tmp_path / "ref" / "adapter.safetensors"))
    b = load_file(str(w2 / "run" / "adapter.safetensors"))
    assert sorted(a) == sorted(b) and len(a) > 10
    assert all(torch.equal(a[k], b[k]) for k in a)
    ta, sa = read_checkpoint(latest_checkpoint(tmp_path / "ref" / "ckpt"))
    tb, sb = read_checkpoint(latest_checkpoint(w2 / "run" / "ckpt"))
    assert sa["step"] == sb["step"] == STEPS and sa["stream_rng"] == sb["stream_rng"]
    assert sorted(ta) == sorted(tb) and all(torch.equal(ta[k], tb[k]) for k in ta)  # optimizer + RNG too
    assert abs(sum(t.numel() * t.element_size() for k, t in ta.items() if not k.startswith("rng/"))
               - checkpoint_bytes(CONFIG)) < 1024  # + a 4-byte AdamW step per parameter
    # -- after the last poll: the adapter comes out of the collected checkpoint ---------------------
    from engine.train.gpu_recipe import main

    collect(w1, tmp_path / "out2")  # an older step there first: the poll's collect replaces it
    assert main(["poll", "--work", str(w2), "--wait", "0", "--to", str(tmp_path / "out2")]) == 0
    assert [d.name for d in (tmp_path / "out2").glob("ckpt-*")] == [f"ckpt-{STEPS:06d}"]
    final = json.loads((tmp_path / "out2" / "status.json").read_text())
    assert final["status"]["phase"] == "done" and [s for s, _ in final["loss_curve"]] == list(range(1, STEPS + 1))
    st_js, meta_js = export(tmp_path / "out2", tmp_path / "exported" / "default")
    c = load_file(str(st_js))
    assert all(torch.equal(a[k], c[k]) for k in a) and sorted(a) == sorted(c)
    assert json.loads(meta_js.read_text())["lora"]["rank"] == CONFIG["rank"]


def test_pack_cuts_base_across_uploads_and_receive_installs_it(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    base = tmp_path / "fake-base.gguf"
    base.write_bytes(os.urandom(2 * MiB))  # incompressible: xz keeps its size
    tok = Tokenizer.byte_level()
    monkeypatch.setattr("engine.train.recipe.pack.base_tokenizer",
                        lambda _p: (tok.hf.to_str(), tok.token_text(tok.special.eos)))
    plan = pack(tmp_path / "pack", {"model": "base", "rank": 8}, base=base, wheels=[], eval_limit=0,
                upload_limit=MiB, tree=MiB // 4, margin=0)
    ups = plan["uploads"]
    packed = sum(f["size"] for f in json.loads((tmp_path / "pack" / "up1" / "manifest.json").read_text())["files"])
    assert plan["capacity"] == 3 * MiB // 4 and len(ups) == -(-packed // plan["capacity"]) >= 3
    assert all(u["bytes"] <= plan["capacity"] for u in ups) and "boot.tar.xz" in ups[0]["files"]
    w = tmp_path / "gpu"
    first = receive(w, [tmp_path / "pack" / "up1"])
    assert "boot.tar.xz" in first["installed"] and first["waiting"][0]["file"] == "base.gguf.xz"
    recipe = json.loads((w / "boot" / "recipe.json").read_text())
    assert recipe["tokenizer"]["eos"] == "<|endoftext|>" and (w / "boot" / "tokenizer.json").is_file()
    assert Tokenizer.from_file(w / "boot" / "tokenizer.json", eos_token="<|endoftext|>").encode("ab") == \
        tok.encode("ab")
    damaged = tmp_path / "damaged"
    shutil.copytree(tmp_path / "pack" / f"up{len(ups)}", damaged)
    for p in damaged.glob("*.part*"):
        p.write_bytes(p.read_bytes()[::-1])
    for k in range(2, len(ups)):
        assert receive(w, [tmp_path / "pack" / f"up{k}"])["waiting"]
    with pytest.raises(RecipeError, match=r"damaged parts refused .*part\d+: sha256 \w+… is not the manifest's"):
        receive(w, [damaged])  # damaged parts are not taken: named, with the field that differs
    last = receive(w, [tmp_path / "pack" / f"up{len(ups)}"])
    assert last["waiting"] == [] and last["installed"] == ["boot.tar.xz", "base.gguf.xz"]
    assert (tmp_path / "cache" / "edit-server" / "base" / base.name).read_bytes() == base.read_bytes()


def test_gpu_config_checkpoint_is_committable_and_comes_back_in_one_poll() -> None:
    from engine.train.gpu_recipe import CONFIG as GPU_CONFIG
    from engine.train.recipe import BACK_FILES, BACK_TOTAL, COLLECT_PART

    cfg = json.loads(GPU_CONFIG.read_text())
    n = checkpoint_bytes(cfg) + 2 * MiB  # + header (loss history) and slack
    assert n <= COMMIT_MAX and n <= BACK_TOTAL - MiB
    assert -(-n // COLLECT_PART) + 3 <= BACK_FILES  # parts + manifest + status.json + job.log


def test_bf16_autocast_keeps_fp32_master_weights(packed: tuple[Path, Path], tmp_path: Path) -> None:
    torch.set_num_threads(1)
    _, src = packed
    build_corpus([src], tmp_path / "c", Tokenizer.byte_level(), tokenizer_name="byte")
    cfg = TrainConfig.from_dict({**CONFIG, "steps": 2, "dtype": "bf16", "corpus": str(tmp_path / "c"),
                                 "out": str(tmp_path / "r")})
    s = train(cfg, progress=False)
    assert s["steps"] == 2 and s["val"][-1]["loss"] > 0
    tensors, _ = read_checkpoint(latest_checkpoint(tmp_path / "r" / "ckpt"))
    moments = [t for k, t in tensors.items() if k.startswith("optim/") and k.endswith("exp_avg")]
    assert moments and all(t.dtype == torch.float32 for t in moments)


def test_status_is_one_json_line_and_back_limits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.train.gpu_recipe import main

    assert main(["status", "--work", str(tmp_path / "nothing")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["phase"] == "not started"
    assert main(["start", "--work", str(tmp_path / "nothing")]) == 1
    assert "not received yet" in json.loads(capsys.readouterr().out)["error"]
    for i in range(9):
        (tmp_path / "out" / "a" / "b").mkdir(parents=True, exist_ok=True)
        (tmp_path / "out" / ("a/b" if i == 0 else "") / f"f{i}").write_bytes(b"x")
    warn = back_limits(tmp_path / "out")
    assert len(warn) == 1 and "9 files" in warn[0]
    (tmp_path / "out" / "a" / "b" / "c").mkdir()
    (tmp_path / "out" / "a" / "b" / "c" / "deep").write_bytes(b"x")
    assert any("too deep" in x for x in back_limits(tmp_path / "out"))


def test_fim_examples_take_the_prompt_order_from_the_templates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Training renders FIM with FimPrompt's default layout (the server's), never an order of its own."""
    import dataclasses

    import engine.train.tasks as tasks
    from engine.templates import FimPrompt, render_fim
    from engine.train.corpus import Doc
    from engine.train.stream import ExampleStream

    tok = Tokenizer.byte_level()
    text = "".join(f"def f{i}(a, b):\n    return a + b * {i}\n\n\n" for i in range(12))
    docs = [Doc("m.py", "python", text, len(text))]
    budget = TrainConfig(seq_len=400, block_size=8, max_canvas=48, chars_per_token=1.0).budget()

    def fim_examples() -> list:
        stream = ExampleStream(docs, tok, budget, {"fim": 0.7, "continue": 0.3}, seed=3)
        return stream.take(24)

    def rendered(m: dict, **kw: str) -> list[int]:
        return render_fim(tok, FimPrompt(m["prefix"], m["suffix"], path=m["path"], **kw)).ids

    exs = fim_examples()
    assert {e.kind.split(":")[0] for e in exs} == {"fim", "continue"}
    assert all(e.prompt == rendered(e.meta) for e in exs)
    other = "psm" if FimPrompt("", "").layout != "psm" else "spm"  # differs whenever the suffix is not empty
    monkeypatch.setattr(tasks, "FimPrompt", dataclasses.make_dataclass(
        "Other", [("layout", str, dataclasses.field(default=other))], bases=(FimPrompt,), frozen=True))
    swapped = [e for e in fim_examples() if e.kind.startswith("fim") and e.meta["suffix"]]
    assert swapped and all(e.prompt == rendered(e.meta, layout=other) != rendered(e.meta) for e in swapped)
