"""The GPU pack's git edit sessions: ``git_repos`` (repositories, bundles or ``.jsonl.gz`` files on this
machine) extracted here — the GPU image has no GitPython and no repositories — into one compressed file in
the boot bundle, and the config pointed at it (the job runs in ``boot/code``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PACKED_NAME = "git/sessions.jsonl.gz"  # inside the boot bundle
# sessions per repository in the pack (a deterministic sample): 1,500 keeps all of five of the six training
# repositories and 61 % of httpx's 2,459 — 6,248 sessions, ~11 MB (a smaller
# pack is seen several times over by a long run: docs/TRAINING.md)
MAX_PER_REPO = 1500
HELDOUT_PER_REPO = 300  # the held-out repositories' sessions the pack carries for `engine.train.edit_tokens`


def stage_git_sessions(config: dict[str, Any], stage: Path, max_per_repo: int = MAX_PER_REPO) -> dict[str, Any]:
    """``config`` with ``git_repos`` replaced by the packed file (unchanged when it names none); writes
    ``stage/git/sessions.jsonl.gz`` and its report ``stage/git/report.json``."""
    from engine.git_history import ExtractReport, cap_sessions, extract_source, read_sessions, write_sessions

    srcs = [str(s) for s in config.get("git_repos") or []]
    if not srcs:
        return config
    sessions, reports = [], []
    for src in srcs:
        p = Path(src)
        if not p.exists():
            raise FileNotFoundError(f"training config git_repos: {src}: no such file or directory")
        rep = ExtractReport(repo=p.name)
        got = read_sessions(p) if p.name.endswith(".jsonl.gz") else extract_source(p, rep)
        kept = cap_sessions(got, max_per_repo, f"cap:{p.name}")
        reports.append({**rep.as_dict(), "source": p.name, "written": len(kept)})
        sessions += kept
    out = stage / PACKED_NAME
    n = write_sessions(out, sessions)
    (out.parent / "report.json").write_text(json.dumps({"sessions": n, "bytes": out.stat().st_size,
                                                        "sources": reports}, indent=1))
    return {**config, "git_repos": [f"../{PACKED_NAME}"]}


def build_heldout_sessions(repos: list[Path], out: Path, per_repo: int = HELDOUT_PER_REPO) -> Path:
    """The held-out repositories' sessions (a deterministic sample of ``per_repo`` each) in one ``.jsonl.gz``:
    the job's `engine.train.edit_tokens` reads them without git."""
    from engine.git_history import cap_sessions, extract_source, write_sessions

    sessions = []
    for p in repos:
        sessions += cap_sessions(extract_source(p), per_repo, f"heldout:{p.name}")
    write_sessions(out, sessions)
    return out
