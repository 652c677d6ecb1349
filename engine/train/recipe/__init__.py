"""The GPU training recipe as a resumable pipeline (``python -m engine.train.gpu_recipe STAGE``).

A GPU is lent rarely and briefly (15 minutes of device time in all, ≤ 10 minutes per command, ≤ 64 MiB
uploaded per command including the working tree, ≤ 8 files of ≤ 16 MiB back, nothing kept afterwards;
`recipe.plan` plans a window to the second, `recipe.window` keeps its clock on the machine). So:

- `pack` (here): code snapshot + tokenizer + vendored pure-Python packages + tree-sitter wheels +
  HumanEval data + the corpus recipe (``boot.tar.xz``) and the base GGUF (xz), cut into upload folders
  that each fit beside the working tree. `parts` does the cutting, with sha256 per part and per file.
- `receive` (GPU): copy an upload's parts into the work dir; each file is joined, verified and unpacked
  as soon as all its parts are there (the boot bundle comes first, so `start` can follow at once).
- `start` (GPU): one detached (setsid) job — corpus from the machine's own stdlib + site-packages →
  wait for the base → train (resuming from the newest checkpoint) → export → HumanEval sample.
- `status`: one JSON line. `stop`: checkpoint + export now, then the job evaluates.
- `collect` (GPU, every poll): the newest checkpoint (LoRA + optimizer + RNG + loss curve, one
  safetensors file) in ≤ 15 MiB parts + sha256 manifest, status.json and the log tail, into ``$OUT``.
- `keep` (here): verify collected parts and store them under ``engine/weights/gpu-ckpt`` (committable; a
  parted base's under ``engine/weights/gpu-ckpt-<base>``, `keep_dir`).
- `resume` (GPU, any later window): verify + join kept parts into a fresh work dir, then `start`.
- `align-*` (`align`): the KTO alignment stage — the same start / status / poll / collect / resume discipline for a
  detached job that runs `python -m edit_server align data|kto` (engine never imports edit_server).
"""

from __future__ import annotations

from pathlib import Path

from engine import options

MiB = 1 << 20
UPLOAD_LIMIT = 64 * MiB  # per device command: working tree + carried paths
PART_MAX = 60_000_000  # one uploaded part
COLLECT_PART = 15 * MiB  # one collected checkpoint part (≤ 16 MiB per file comes back)
BACK_FILES, BACK_FILE_MAX, BACK_TOTAL = 8, 16 * MiB, 64 * MiB  # what comes back from one command
COMMIT_MAX = 50_000_000  # a checkpoint kept under engine/weights/
ROOT = Path(__file__).resolve().parents[3]
KEEP_DIR = ROOT / "engine" / "weights" / "gpu-ckpt"  # SmolLM2's (the default model's) kept checkpoint
KEEP_PREFIX = "gpu-ckpt-"  # + a parted base's name: that base's kept checkpoint, beside SmolLM2's
PACK_DIR = ROOT / "runs" / "gpu-pack"


def keep_dir(model: str | None, root: Path = ROOT) -> Path:
    """Where a kept checkpoint of a run on ``model`` lives: ``engine/weights/gpu-ckpt`` for SmolLM2 (``base``)
    and anything that is not a parted base, ``engine/weights/gpu-ckpt-<base>`` for a parted base
    (``qwen2.5-coder-0.5b``) — never over another base's."""
    from engine.loading.base import PARTED

    name = str(model or "base").strip().lower()
    weights = root / "engine" / "weights"
    return weights / f"{KEEP_PREFIX}{name}" if name in PARTED else weights / KEEP_DIR.name


def default_work() -> Path:
    """The GPU machine's work dir: outside the repository copy, which each command re-syncs."""
    return Path(options.env().gpu_work or Path.home() / "edit-server-gpu")
