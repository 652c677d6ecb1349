"""The GPU side's work dir (`engine.train.recipe.job` describes its layout): its paths, JSON read and written
atomically, whether a recorded job process still runs, and the error a recipe step raises."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

TERMINAL = ("done", "failed")


class RecipeError(RuntimeError):
    """A recipe step cannot run (nothing received yet, a job already running, ...)."""


class Work:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.parts, self.boot, self.corpus, self.run = (self.root / n for n in ("parts", "boot", "corpus", "run"))
        self.job, self.phase, self.log = self.root / "job.json", self.root / "phase.json", self.root / "job.log"


def read_json(path: Path) -> Any:
    """The JSON in ``path``; None when it is missing or not (yet) whole."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_json(path: Path, obj: Any) -> None:
    """``obj`` as JSON at ``path``, atomically (a reader never sees half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def alive(pid: int | None, name: bytes = b"gpu_recipe") -> bool:
    """Whether ``pid`` runs (not a zombie) and its command line holds ``name``."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z" and name in cmd
