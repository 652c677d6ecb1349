"""The Qwen2.5-Coder GPU window (issue 24 item 5, issue 23 §2), on the tiny quantized qwen2 GGUF:

- the tied-output copy (output.weight dropped, every other byte kept) loads tied, with the pinned file's
  provenance, and equals the full file with its output tied;
- base-parts → upload folders → receive (join + verify + header) round trip; a damaged part is refused
  naming the part and the field; a wrong file is refused by the header check;
- training, the exported adapter JSON and serving agree on ``tied_output`` (merged logits = LoRA logits;
  the untied head would give others); the job's eval command runs on that adapter with only the GPU image's
  packages (gguf carried);
- `plan --base`: every command ≤ 64 MiB with the tree measured from a fake tree, the total within the
  budget, the collect within what one command returns, the Qwen speed an estimate until recorded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.loading import base
from engine.loading.gguf_file import load_gguf
from engine.loading.tied import base_file, tie_output, tied_name
from engine.model import Transformer
from engine.train.recipe import BACK_FILES, BACK_TOTAL, UPLOAD_LIMIT, MiB
from engine.train.recipe import base_parts as bp
from engine.train.recipe.receive import receive
from engine.train.recipe.workdir import RecipeError
from tests import qwen_util as Qw
from tests.test_evals_minimal_image import ROOT, blocked_env, synthetic_split

NAME = "qwen2.5-coder-0.5b"


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("qw") / "tiny-qwen.gguf"
    Qw.write_qwen_gguf(path, Qw.tiny_qwen2().state_dict())
    return path


@pytest.fixture
def pinned(full: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, base.PartedBase]:
    """The tiny file as the pinned 0.5B base, in a cache dir that `default_cache_dir` returns."""
    data = full.read_bytes()
    spec = dataclasses.replace(base.PARTED[NAME], size=len(data), sha256=hashlib.sha256(data).hexdigest(),
                               layers=Qw.LAYERS)
    monkeypatch.setitem(base.PARTED, NAME, spec)
    cache = tmp_path / "cache" / "edit-server" / "base"
    cache.mkdir(parents=True)
    (cache / spec.file).write_bytes(data)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert base.default_cache_dir() == cache
    return cache, spec


def test_tied_copy_drops_only_the_output(pinned: tuple[Path, base.PartedBase]) -> None:
    cache, spec = pinned
    info = bp.tied_base(NAME)
    tied = Path(info["path"])
    assert tied.name == tied_name(spec) == "Qwen2.5-Coder-0.5B-Instruct.tied-output.gguf"
    from gguf import GGUFReader

    src, got = GGUFReader(str(cache / spec.file)), GGUFReader(str(tied))
    out = next(t for t in src.tensors if t.name == "output.weight")
    assert {t.name for t in src.tensors} - {t.name for t in got.tensors} == {"output.weight"}
    assert info["size"] < spec.size - out.n_bytes + 4096  # the output's bytes are gone (header grows a little)
    assert info["sha256"] == hashlib.sha256(tied.read_bytes()).hexdigest() and info["from_sha256"] == spec.sha256
    assert bp.tied_base(NAME)["seconds"] == 0.0  # cached beside the pinned file (its .json stamp)
    a, b = tie_output(load_gguf(cache / spec.file)), load_gguf(tied)
    assert a.args.tie_embeddings and b.args.tie_embeddings and "lm_head.weight" not in b.state_dict
    assert sorted(a.state_dict) == sorted(b.state_dict)
    assert all(torch.equal(a.state_dict[k], b.state_dict[k]) for k in a.state_dict)
    assert b.meta["base"]["sha256"] == spec.sha256 and b.meta["base"]["derived"]["dropped"] == "output.weight"
    assert b.meta["tied_output"] is True
    # serving and training resolve the same file: the pinned one when cached, else the tied copy
    assert base_file(NAME, tied=True) == cache / spec.file
    (cache / spec.file).unlink()
    assert base_file(NAME, tied=True) == tied
    # the autoregressive tier loads from the tied copy too where it is the only one (a GPU window's machine)
    from engine.loading.ar_base import load_ar_base

    ar = load_ar_base(NAME, cache, use_cache=False)
    assert ar.meta["tied_output"] is True and "output tied to the embedding" in ar.meta["label"]
    assert ar.args.tie_embeddings and sorted(ar.state_dict) == sorted(b.state_dict)


def _fake_tree(root: Path, sizes: dict[str, int]) -> Path:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    for name, n in sizes.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x" * n)
    (root / ".gitignore").write_text("/runs/\n")
    return root


def test_parts_round_trip_and_damage(pinned: tuple[Path, base.PartedBase], tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    cache, spec = pinned
    tree = _fake_tree(tmp_path / "repo", {"engine/a.py": 1000, "engine/weights/gpu-ckpt/p.part000": 300_000,
                                          "engine/weights/default.safetensors": 100_000, "README.md": 500})
    measured = bp.window_tree_bytes(tree)
    assert measured == 1000 + 500 + len("/runs/\n")  # the held paths do not travel in the window
    limit = measured + bp.MARGIN + 300_000  # room for 300 KB per upload: the 0.87 MB copy needs 3
    out = tmp_path / "parts"
    res = bp.base_parts(NAME, out, tree=measured, upload_limit=limit)
    assert res["capacity"] == 300_000 and len(res["uploads"]) == 3
    assert all(u["bytes"] <= res["capacity"] for u in res["uploads"])
    man = json.loads((out / "up1" / "manifest.json").read_text())
    (entry,) = man["files"]
    assert entry["install"] == "base" and entry["compressed"] is False and entry["tied_output"] is True
    assert all(len(p["sha256"]) == 64 for p in entry["parts"]) and entry["size"] == res["base"]["size"]
    # the GPU side: another cache (the machine starts bare), the parts received upload by upload
    gpu_cache = tmp_path / "gpu-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(gpu_cache))
    work = tmp_path / "work"
    bad = out / "up2" / entry["parts"][1]["name"]
    good = bad.read_bytes()
    bad.write_bytes(good[:100] + bytes([good[100] ^ 1]) + good[101:])  # one bit flipped in transfer
    assert receive(work, [out / "up1"])["waiting"][0]["missing"] == 2
    with pytest.raises(RecipeError, match=rf"{bad.name}: sha256 \w+… is not the manifest's sha256"):
        receive(work, [out / "up2"])
    bad.write_bytes(good[:-1])
    with pytest.raises(RecipeError, match=rf"{bad.name}: size \d+ bytes, the manifest's size is"):
        receive(work, [out / "up2"])
    bad.write_bytes(good)  # uploaded again
    receive(work, [out / "up2"])
    got = receive(work, [out / "up3"])
    assert got["installed"] == [entry["name"]] and not got["waiting"]
    installed = gpu_cache / "edit-server" / "base" / tied_name(spec)
    assert hashlib.sha256(installed.read_bytes()).hexdigest() == entry["sha256"]
    assert not list((work / "parts").glob("*.part*"))  # parts go once installed


def test_install_refuses_a_file_without_the_tied_header(pinned: tuple[Path, base.PartedBase],
                                                        tmp_path: Path) -> None:
    cache, spec = pinned
    wrong = tmp_path / "wrong.gguf"
    shutil.copyfile(cache / spec.file, wrong)  # the full file: hashes fine, but it has the output tensor
    entry = {"base": NAME, "raw_name": tied_name(spec)}
    with pytest.raises(base.FetchError, match=r"tensor list differs: .*unexpected \['output.weight'\]"):
        bp.install_base(entry, wrong)
    assert not (cache / tied_name(spec)).exists()


def _tied_adapter(pinned: tuple[Path, base.PartedBase], d: Path) -> tuple[Path, torch.nn.Module]:
    """What the trainer exports for the tied model (load_model + LoRA + trained rows), 1 LoRA step's worth
    of random change."""
    from engine.train.lora import apply_lora, mark_trainable, save_adapter
    from engine.train.trainer import TrainConfig, base_vocab, export_meta, load_model

    model, tok, meta = load_model(TrainConfig(model=NAME, tied_output=True, block_size=8), torch.device("cpu"),
                                  torch.float32)
    assert model.lm_head is None and meta["tied_output"] is True  # trained with the embedding as output
    first = base_vocab(tok)
    apply_lora(model, 4, 8)
    torch.manual_seed(1)
    with torch.no_grad():
        for g in mark_trainable(model, first):
            for p in g["params"]:
                if p.shape[0] == model.args.vocab_size:
                    p[first:] += 0.5 * torch.randn_like(p[first:])
                else:
                    p.add_(torch.randn_like(p) * 0.05)
    summary = {"val": [], "tokens": 0, "steps": 1}
    corpus = type("C", (), {"index": {}})()
    js = export_meta(TrainConfig(model=NAME, tied_output=True, block_size=8, rank=4, alpha=8), tok, meta, summary,
                     torch.device("cpu"), corpus)
    assert js["tied_output"] is True and js["base"]["file"] == pinned[1].file
    save_adapter(d / "ad", model, first, js)
    return d / "ad", model


def test_tied_adapter_serves_as_it_was_trained(pinned: tuple[Path, base.PartedBase], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.default import base_path, load_default

    cache, spec = pinned
    path, lora = _tied_adapter(pinned, tmp_path)
    assert base_path(path) == cache / spec.file  # the adapter names its base
    ck = load_default(path)  # the full pinned file (untied in the file) + tied_output → tied
    assert ck.args.tie_embeddings and "lm_head.weight" not in ck.state_dict
    assert ck.name == "Qwen2.5-Coder-0.5B-Instruct block-diffusion"
    merged = Transformer(ck.args)
    merged.load_state_dict(ck.state_dict)
    ids = torch.randint(0, Qw.VOCAB, (1, 12))
    ids[0, -1] = ck.tokenizer.special.fim_middle
    with torch.no_grad():
        want = lora(ids, is_causal=True)
        assert torch.allclose(merged(ids, is_causal=True), want, atol=1e-4)
        # the untied head of the file: the trained rows (eom, pad, mask, ...) would not be the output's
        js = json.loads(path.with_suffix(".json").read_text())
        js["tied_output"] = False
        path.with_suffix(".json").write_text(json.dumps(js))
        untied = load_default(path)
        assert not untied.args.tie_embeddings
        m2 = Transformer(untied.args)
        m2.load_state_dict(untied.state_dict)
        eom = ck.tokenizer.special.eom
        assert not torch.allclose(m2(ids, is_causal=True)[..., eom], want[..., eom], atol=1e-3)


def test_job_eval_runs_the_tied_qwen_adapter_with_image_packages(pinned: tuple[Path, base.PartedBase],
                                                                  tmp_path: Path) -> None:
    """``python -m evals humaneval-infill --model default`` as the job runs it on the GPU: the adapter of a
    tied Qwen, only the tied copy in the machine's cache, gguf only from the carried (vendored) folder."""
    import gguf

    cache, spec = pinned
    path, _ = _tied_adapter(pinned, tmp_path)
    gpu = tmp_path / "gpu-cache"
    (gpu / "edit-server" / "base").mkdir(parents=True)
    shutil.copyfile(bp.tied_base(NAME)["path"], gpu / "edit-server" / "base" / tied_name(spec))
    vendor = tmp_path / "vendor"
    shutil.copytree(Path(gguf.__file__).parent, vendor / "gguf", ignore=shutil.ignore_patterns("__pycache__"))
    env = blocked_env(tmp_path / "block", carried={"gguf": vendor})
    env.update(XDG_CACHE_HOME=str(gpu), EDIT_SERVER_ADAPTER=str(path),
               EDIT_SERVER_MERGED_CACHE=str(tmp_path / "merged"))
    r = subprocess.run([sys.executable, "-c", "import gguf; print(gguf.__file__)"], env=env, capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith(str(vendor)), r.stderr[-500:]
    data, out = synthetic_split(tmp_path / "data"), tmp_path / "report"
    cmd = [sys.executable, "-m", "evals", "humaneval-infill", "--model", "default", "--device", "cpu",
           "--split", "single-line", "--limit", "2", "--max-tokens", "8", "--data", str(data), "--out", str(out),
           "--no-progress", "--workers", "1"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads((out / "report.json").read_text())
    assert rep["summary"]["n"] == 2 and rep["summary"]["errors"] == 0


# ---- the plan --------------------------------------------------------------------------------
def _table(tmp_path: Path) -> dict:
    from engine.train.recipe.throughput import load_throughput

    table = json.loads(json.dumps(load_throughput()))
    table.pop("models", None)  # the estimated path (before a kind's first Qwen window); the recorded one below
    return table


def test_the_recorded_qwen_speed_is_the_h200_measurement() -> None:
    from engine.train.recipe.throughput import load_throughput, seconds_per_step

    cfg = json.loads((ROOT / "engine" / "train" / "configs" / "gpu_qwen05b_bd3.json").read_text())
    s, is_est = seconds_per_step("nvidia-h200", load_throughput(), model=NAME, config=cfg)
    assert not is_est and 1.2 < s < 1.3  # throughput.json's H200 row (rewrite canvases to 256)


@pytest.mark.parametrize(("kind", "budget"), [("nvidia-h200", 900), ("nvidia-h100-x1", 900), ("nvidia-h200", 600)])
def test_qwen_plan_fits_the_budget_and_the_limits(tmp_path: Path, kind: str, budget: float) -> None:
    from engine.train.recipe.base_window import base_window

    tree = _fake_tree(tmp_path / "repo", {"engine/a.py": 2_000_000, "engine/weights/gpu-ckpt/p": 29_000_000,
                                          "engine/weights/default.safetensors": 9_600_000, "docs/x.md": 600_000})
    measured = bp.window_tree_bytes(tree)
    assert measured == 2_600_000 + len("/runs/\n")
    cfg = ROOT / "engine" / "train" / "configs" / "gpu_qwen05b_bd3.json"
    p = base_window(NAME, budget, kind, pack=tmp_path / "no-pack", tree=measured, config=cfg, table=_table(tmp_path))
    cmds = p["commands"]
    assert all(c["upload_bytes"] <= UPLOAD_LIMIT for c in cmds)
    assert all(c["upload_bytes"] - measured <= p["capacity"] for c in cmds)
    assert p["total_s"] <= budget - 30 + 1e-6 and cmds[-1]["end_s"] <= budget
    assert sum(c["seconds"] for c in cmds) < p["total_s"]  # plus start, uploads and gaps
    assert all(b["start_s"] >= a["end_s"] for a, b in zip(cmds, cmds[1:], strict=False))
    assert p["max_gap_s"] <= 30 and all(c["seconds"] <= 600 for c in cmds)
    ups = [c for c in cmds if any("gpu-pack-qwen/up" in x for x in c["carry"])]
    assert sum(c["upload_bytes"] - measured for c in ups) >= p["base_bytes"]  # the whole base goes up
    assert p["s_per_step_estimate"] and p["model"] == NAME and p["steps"] > 0
    assert p["collect"]["files"] <= BACK_FILES and p["collect"]["bytes"] <= BACK_TOTAL
    assert "start --window-start" in cmds[0]["command"] and "resume" not in cmds[0]["command"]


def test_qwen_plan_uses_the_measured_speed_once_recorded(tmp_path: Path) -> None:
    from engine.train.recipe.base_window import base_window
    from engine.train.recipe.throughput import record_throughput, seconds_per_step

    path = tmp_path / "t.json"
    path.write_text(json.dumps(_table(tmp_path)))
    cfg = json.loads((ROOT / "engine" / "train" / "configs" / "gpu_qwen05b_bd3.json").read_text())
    table = json.loads(path.read_text())
    est, is_est = seconds_per_step("nvidia-h200", table, model=NAME, config=cfg)
    smol = seconds_per_step("nvidia-h200", table)[0]
    assert is_est and 2.0 < est / smol < 4.0  # 0.5B vs 135M: ≈ 2.9x the FLOPs per step
    assert record_throughput({"kind": "nvidia-h200", "model": NAME, "s_per_step": 1.25, "tok_s": 27000,
                              "tokens_per_step": 34000, "measured": "test"}, path)
    table = json.loads(path.read_text())
    assert seconds_per_step("nvidia-h200", table, model=NAME, config=cfg) == (1.25, False)
    assert seconds_per_step("nvidia-h200", table)[0] == smol  # SmolLM2's entry untouched
    p1 = base_window(NAME, 900, "nvidia-h200", pack=tmp_path / "none", tree=3_000_000, config=cfg, table=table)
    assert not p1["s_per_step_estimate"] and p1["steps"] == int(p1["train_s"] / 1.25)


def test_plan_cli_prints_the_qwen_window(capsys: pytest.CaptureFixture[str]) -> None:
    from engine.train.gpu_recipe import main

    assert main(["plan", "--base", NAME, "--budget-s", "900", "--kind", "nvidia-h200", "--tree-bytes",
                 "3000000"]) == 0
    out = capsys.readouterr().out
    assert "mv engine/weights/gpu-ckpt ../edit-server-window-hold/" in out  # before, and back after
    assert "mv ../edit-server-window-hold/gpu-ckpt engine/weights/gpu-ckpt" in out
    assert out.count("run(command=") >= 6 and "carry=['runs/gpu-pack-qwen/up1']" in out
    assert "model qwen2.5-coder-0.5b (1.259 s/step)" in out  # the H200's measured speed (throughput.json)
    assert "warm restart from engine/weights/gpu-ckpt-qwen2.5-coder-0.5b (step " in out
    assert "mv engine/weights/qwen2_5-coder-0_5b-bd3.safetensors ../edit-server-window-hold/" in out
    assert "uploads at 25 MiB/s, machine start 35 s" in out and "collect: checkpoint" in out


def test_collect_must_fit_one_command() -> None:
    from engine.train.recipe.base_window import collect_fits

    cfg = json.loads((ROOT / "engine" / "train" / "configs" / "gpu_qwen05b_bd3.json").read_text())
    assert collect_fits(cfg)["files"] <= BACK_FILES
    with pytest.raises(ValueError, match="does not come back from one command"):
        collect_fits({**cfg, "rank": 16})
    assert np.isfinite(collect_fits(cfg)["bytes"] / MiB)


def test_base_parts_cli(pinned: tuple[Path, base.PartedBase], tmp_path: Path,
                        capsys: pytest.CaptureFixture[str]) -> None:
    from engine.train.gpu_recipe import main

    out = tmp_path / "bp"
    assert main(["base-parts", NAME, "--out", str(out), "--tree-bytes", "1000", "--upload-limit",
                 str(1000 + bp.MARGIN + 400_000)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["capacity"] == 400_000 and len(res["uploads"]) == 3 and res["base"]["file"] == tied_name(pinned[1])
    assert sorted(p.name for p in out.iterdir()) == ["up1", "up2", "up3"]
    assert main(["base-parts", "qwen9", "--out", str(out)]) == 1  # unknown base: one JSON error line
    assert "unknown base 'qwen9'" in capsys.readouterr().out


def test_hold_commands_take_the_weights_out_of_the_tree_and_the_index_and_back(tmp_path: Path) -> None:
    """The window's tree neither holds the held files nor lists them as tracked (however the device tool
    enumerates it); afterwards git sees exactly what it saw before."""
    import subprocess

    repo = tmp_path / "repo"
    (repo / "engine/weights/gpu-ckpt").mkdir(parents=True)
    (repo / "engine/weights/gpu-ckpt/part-0").write_bytes(b"\1" * 1000)
    (repo / "engine/weights/default.safetensors").write_bytes(b"\2" * 500)
    (repo / "engine/weights/new-ckpt").mkdir()
    (repo / "engine/weights/new-ckpt/p").write_bytes(b"\3" * 300)  # kept, not yet committed
    (repo / "code.py").write_text("x = 1\n")

    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *a], capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    git("add", "code.py", "engine/weights/gpu-ckpt", "engine/weights/default.safetensors")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "init")
    status = git("status", "--short")
    assert status == "?? engine/weights/new-ckpt/\n"
    hold = ("engine/weights/gpu-ckpt", "engine/weights/default.safetensors", "engine/weights/new-ckpt")
    before, after = bp.hold_commands(hold, "../hold")
    subprocess.run(before, shell=True, cwd=repo, check=True)
    assert git("ls-files", "-co", "--exclude-standard").split() == ["code.py"]
    assert not (repo / "engine/weights/gpu-ckpt").exists() and (tmp_path / "hold/gpu-ckpt/part-0").is_file()
    assert bp.window_tree_bytes(repo, hold=()) == 6  # code.py alone travels
    subprocess.run(after, shell=True, cwd=repo, check=True, capture_output=True)
    assert git("status", "--short") == status
    assert (repo / "engine/weights/gpu-ckpt/part-0").read_bytes() == b"\1" * 1000
    assert not (tmp_path / "hold").exists()
    assert bp.hold_commands((), "../hold") == ("", "")


def test_a_kto_window_without_training_carries_the_shipped_adapter(capsys: pytest.CaptureFixture[str]) -> None:
    """`plan --base … --parts kto,bench`: no warm restart, no checkpoint collect; the shipped Qwen adapter
    (held out of the tree with the other weights) is copied to `.devcarry/adapter` before the window and
    carried by the KTO command, whose `align-start` aligns that copy; after the window `align-export`."""
    from engine.train.gpu_recipe import main
    from engine.train.recipe.base_window import KTO_CARRY, shipped_adapter_of

    shipped = shipped_adapter_of(NAME)
    assert shipped is not None and shipped.name == "qwen2_5-coder-0_5b-bd3"
    assert main(["plan", "--base", NAME, "--budget-s", "900", "--kind", "nvidia-h200", "--tree-bytes", "3000000",
                 "--parts", "kto,bench"]) == 0
    out = capsys.readouterr().out
    assert "no training in this window" in out and "warm restart" not in out and "collect: checkpoint" not in out
    assert f"cp engine/weights/{shipped.name}.safetensors engine/weights/{shipped.name}.json {KTO_CARRY}/" in out
    assert f"align-start --adapter {KTO_CARRY}/{shipped.name} --set " in out
    assert f"carry=['{KTO_CARRY}']" in out and out.count(f"carry=['{KTO_CARRY}']") == 1
    assert "align-export <files_at>" in out and "start --window-start" not in out
    size = sum(shipped.with_suffix(x).stat().st_size for x in (".safetensors", ".json"))
    kto_line = next(ln for ln in out.splitlines() if "KTO on the" in ln)
    assert float(kto_line.split()[4]) >= (3_000_000 + size) / MiB - 0.1  # the copy goes up with that command
