"""Resumable per-case results: ``<out>/results.jsonl`` (one finished case per line) + ``config.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_records(path: Path) -> dict[str, dict[str, Any]]:
    """id -> record of a ``results.jsonl``; a line cut by a crash (or without an id) is skipped: its case
    is redone by a resumed run."""
    out: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and "id" in rec:
            out[str(rec["id"])] = rec
    return out


class ResultStore:
    """Append-only JSONL of finished cases. Re-running with the same ``--out`` skips finished ids;
    a different configuration (model, split, sampler, ...) is refused unless ``fresh``."""

    def __init__(self, out: Path, config: dict[str, Any], *, fresh: bool = False) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.path = out / "results.jsonl"
        cfg_path = out / "config.json"
        if fresh:
            self.path.unlink(missing_ok=True)
        elif cfg_path.is_file() and self.path.is_file():
            old = json.loads(cfg_path.read_text())
            if old != json.loads(json.dumps(config)):
                raise ValueError(f"{out} holds results of another configuration ({cfg_path}); "
                                 "use another --out or --fresh")
        cfg_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        self.records = read_records(self.path) if self.path.is_file() else {}

    def done(self, case_id: str) -> bool:
        return case_id in self.records

    def add(self, record: dict[str, Any]) -> None:
        self.records[record["id"]] = record
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")


def compare_runs(first: Path, second: Path) -> tuple[int, list[tuple[str, str]]]:
    """Two runs' ``results.jsonl``, case by case over the ids both hold: (cases alike, [(id, what differs:
    "suggestion", "prompt" or both)]). ``prompt_digest`` tells whether the server built the same prompt; a
    run recorded before digests existed compares by suggestion only."""
    def load(d: Path) -> dict[str, dict[str, Any]]:
        path = d / "results.jsonl" if d.is_dir() else d
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no results (a run's --out directory or its results.jsonl)")
        return read_records(path)

    a, b = load(first), load(second)
    same, diffs = 0, []
    for case_id in (i for i in a if i in b):
        x, y = a[case_id], b[case_id]
        what = [k for k, differs in (("suggestion", x.get("suggestion") != y.get("suggestion")),
                                     ("prompt", x.get("prompt_digest") != y.get("prompt_digest"))) if differs]
        if what:
            diffs.append((case_id, " and ".join(what)))
        else:
            same += 1
    return same, diffs
