"""The GPU job's evaluation runs with only the GPU image's packages.

The image has torch, numpy, transformers, tokenizers, safetensors, pyyaml and tqdm — not pygls,
lsprotocol, msgspec, tree-sitter, GitPython, aiohttp, gguf or matplotlib. The job runs
``python -m evals humaneval-infill ...`` (engine runner); here that exact command runs in a subprocess with
those packages made unimportable by a meta-path blocker, on a tiny random model and a synthetic split.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

from engine.train.recipe.image_env import image_env

ROOT = Path(__file__).resolve().parents[1]


def blocked_env(d: Path, carried: dict[str, Path] | None = None) -> dict[str, str]:
    """Environment whose Python cannot import any of NOT_ON_IMAGE (a sitecustomize on PYTHONPATH), except
    ``carried`` packages from their carried folder (`engine.train.recipe.image_env`)."""
    env = image_env(d, ROOT, carried)
    env["OMP_NUM_THREADS"] = "1"
    return env


def synthetic_split(d: Path) -> Path:
    """A 3-task single-line split in HumanEval-infilling's format."""
    d.mkdir(parents=True, exist_ok=True)
    rows = [{"task_id": f"Synth/{i}", "entry_point": f"f{i}",
             "prompt": f"def f{i}(x):\n    \"\"\"Return x plus {i}.\"\"\"\n",
             "suffix": "    return y\n", "canonical_solution": f"    y = x + {i}\n",
             "test": f"def check(f):\n    assert f(1) == {1 + i}\n"} for i in range(3)]
    with gzip.open(d / "HumanEval-SingleLineInfilling.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    return d


def test_blocker_blocks(tmp_path: Path) -> None:
    env = blocked_env(tmp_path / "block")
    for name in ("lsprotocol", "pygls", "msgspec", "evals.lsp_client", "evals.cases"):
        r = subprocess.run([sys.executable, "-c", f"import {name}"], env=env, capture_output=True, text=True,
                           cwd=ROOT, timeout=120)
        assert r.returncode != 0 and "not on the GPU image" in r.stderr, (name, r.stderr[-500:])


def test_humaneval_engine_runner_needs_only_the_image_packages(tmp_path: Path) -> None:
    env = blocked_env(tmp_path / "block")
    data, out = synthetic_split(tmp_path / "data"), tmp_path / "report"
    cmd = [sys.executable, "-m", "evals", "humaneval-infill", "--model", "tiny-random", "--device", "cpu",
           "--split", "single-line", "--limit", "3", "--max-tokens", "16", "--data", str(data), "--out",
           str(out), "--no-progress", "--workers", "1"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "HumanEval-infilling single-line (engine)" in r.stdout
    rep = json.loads((out / "report.json").read_text())
    assert rep["summary"]["n"] == 3 and rep["summary"]["errors"] == 0
    assert rep["config"]["runner"] == "engine" and rep["config"]["model"] == "tiny-random"
    ids = [c["id"] for c in rep["cases"]]
    assert sorted(ids) == ["Synth/0", "Synth/1", "Synth/2"]
    assert (out / "summary.md").is_file() and not (out / "latency.png").exists()  # no matplotlib: no plot


def test_oracle_scores_the_synthetic_split(tmp_path: Path) -> None:
    """The harness under the blocker really scores: the canonical middles pass, so pass@1 is 1."""
    env = blocked_env(tmp_path / "block")
    data, out = synthetic_split(tmp_path / "data"), tmp_path / "oracle"
    r = subprocess.run([sys.executable, "-m", "evals", "humaneval-infill", "--oracle", "--data", str(data),
                        "--out", str(out), "--no-progress", "--workers", "1"],
                       env=env, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((out / "report.json").read_text())["summary"]["pass@1"] == 1.0
