"""HumanEval-infilling data (OpenAI, MIT) from ``<shared>/data/humaneval-infilling``."""

from __future__ import annotations

import gzip
import json
import random
from dataclasses import dataclass
from pathlib import Path

from engine import options

SPLITS: dict[str, str] = {
    "single-line": "HumanEval-SingleLineInfilling.jsonl.gz",
    "multi-line": "HumanEval-MultiLineInfilling.jsonl.gz",
    "random-span": "HumanEval-RandomSpanInfilling.jsonl.gz",
    "random-span-light": "HumanEval-RandomSpanInfillingLight.jsonl.gz",
}
# default canvas length (tokens) per split; canonical middles are far shorter in almost all tasks
MAX_TOKENS: dict[str, int] = {"single-line": 64, "multi-line": 256, "random-span": 128,
                              "random-span-light": 128}


@dataclass(frozen=True)
class InfillTask:
    task_id: str
    prompt: str  # text before the hole
    suffix: str  # text after the hole
    canonical_solution: str
    test: str
    entry_point: str

    def program(self, middle: str) -> str:
        """The program whose success is pass@1: prompt + middle + suffix + test + check(entry)."""
        return f"{self.prompt}{middle}{self.suffix}\n{self.test}\ncheck({self.entry_point})\n"


def shared_dir() -> Path:
    """``$EDIT_SERVER_SHARED`` or ``<repo>/../shared``."""
    env = options.env().shared
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent.parent / "shared"


def default_data_dir() -> Path:
    return shared_dir() / "data" / "humaneval-infilling"


def load_humaneval(split: str, data_dir: Path | None = None, *, limit: int | None = None,
                   seed: int | None = None) -> list[InfillTask]:
    """Tasks of one split, in file order (or a seeded shuffle when ``seed`` is given), first ``limit``."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    path = (data_dir or default_data_dir()) / SPLITS[split]
    if not path.is_file():
        raise FileNotFoundError(f"HumanEval-infilling split {split!r} not found: {path} "
                                "(pass --data DIR or set EDIT_SERVER_SHARED)")
    tasks: list[InfillTask] = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            d = json.loads(line)
            try:
                tasks.append(InfillTask(d["task_id"], d["prompt"], d["suffix"], d["canonical_solution"],
                                        d["test"], d["entry_point"]))
            except KeyError as e:
                raise ValueError(f"{path}:{lineno}: missing field {e}") from None
    if seed is not None:
        random.Random(seed).shuffle(tasks)
    return tasks[:limit] if limit is not None else tasks
