"""KTO data set: desirable / undesirable (prompt, completion) records, JSONL, split by group.

A data directory (``edit-server align data --out DIR``) holds ``train.jsonl``, ``heldout.jsonl`` and
``summary.json``. A record's prompt is the structured `FimPrompt` / `EditPrompt` (what the context
builder sent the model, already redacted), re-rendered with `engine.templates` at training time, so
training and serving use one layout. ``group`` is the file or repository the example comes from: the
split is by group, so no file is on both sides (eval data marked held out is never trained on).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.templates import EditPrompt, FimPrompt, Section, canvas_target, render_trained
from engine.tokens import TokenizerLike

KINDS = ("fim", "edit", "noedit")


@dataclass
class Record:
    id: str
    source: str  # feedback | eval | humaneval | selfplay | selfplay-truth | eval-truth | ...
    kind: str  # fim | edit | noedit
    label: bool  # True = desirable
    group: str  # file / repository: the split key
    prompt: dict[str, Any]  # prompt_to_dict(FimPrompt | EditPrompt)
    completion: str  # the model's output (or the truth) as text
    split: str = ""  # "train" | "heldout"; "" = decided by assign_splits
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Record:
        return cls(**{k: d[k] for k in ("id", "source", "kind", "label", "group", "prompt", "completion")},
                   split=d.get("split", ""), meta=d.get("meta") or {})


def gate_kind(kind: str) -> str:
    """The suggestion kind the gate sees: FIM completions vs next edits (no-edit is an edit request)."""
    return "fim" if kind == "fim" else "edit"


def prompt_to_dict(p: FimPrompt | EditPrompt) -> dict[str, Any]:
    d = asdict(p)
    d["type"] = "fim" if isinstance(p, FimPrompt) else "edit"
    d["history"] = list(p.history)
    d["sections"] = [asdict(s) for s in p.sections]
    return d


def prompt_from_dict(d: dict[str, Any]) -> FimPrompt | EditPrompt:
    d = dict(d)
    typ = d.pop("type", "fim")
    d["history"] = tuple(d.get("history") or ())
    d["sections"] = tuple(Section(**s) for s in d.get("sections") or ())
    return FimPrompt(**d) if typ == "fim" else EditPrompt(**d)


def is_heldout(group: str, fraction: float) -> bool:
    return zlib.crc32(group.encode()) % 10_000 < fraction * 10_000


def assign_splits(records: list[Record], heldout_fraction: float) -> None:
    """Per group: held out if any of its records is (e.g. eval data, corpus validation files), else by
    a stable hash of the group. Every record of a group gets the same split."""
    forced = {r.group for r in records if r.split == "heldout"}
    for r in records:
        r.split = "heldout" if r.group in forced or is_heldout(r.group, heldout_fraction) else "train"


def counts(records: Iterable[Record]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r in records:
        s = out.setdefault(r.split or "unsplit", {})
        k = s.setdefault(r.kind, {"desirable": 0, "undesirable": 0})
        k["desirable" if r.label else "undesirable"] += 1
        src = s.setdefault("sources", {})
        src[r.source] = src.get(r.source, 0) + 1
    return out


def write_set(out: Path, records: list[Record], info: dict[str, Any] | None = None) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "heldout"):
        rows = [json.dumps(asdict(r), sort_keys=True) for r in records if r.split == split]
        (out / f"{split}.jsonl").write_text("".join(x + "\n" for x in rows))
    train_groups = {r.group for r in records if r.split == "train"}
    held_groups = {r.group for r in records if r.split == "heldout"}
    assert not train_groups & held_groups, "a group on both sides of the split"
    summary = {"counts": counts(records), "groups": {"train": len(train_groups), "heldout": len(held_groups)},
               **(info or {})}
    (out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True))
    return summary


def read_set(data: Path, split: str = "train") -> list[Record]:
    path = Path(data) / f"{split}.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no KTO data (run `edit-server align data --out {data}`)")
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append(Record.from_dict(json.loads(line)))
            except (KeyError, TypeError, json.JSONDecodeError) as e:
                raise ValueError(f"{path}:{n}: not a KTO record ({e})") from e
    return out


# ---- tokens ------------------------------------------------------------------------------------
def fit_prompt(tok: TokenizerLike, p: FimPrompt | EditPrompt, max_tokens: int) -> FimPrompt | EditPrompt | None:
    """Shrink a prompt to ``max_tokens``: drop extra sections, then old history, then trim the text
    far from the cursor (prefix / before from the head, suffix / after from the tail)."""
    from dataclasses import replace

    for _ in range(12):
        n = len(render_trained(tok, p))
        if n <= max_tokens:
            return p
        if p.sections:
            p = replace(p, sections=p.sections[1:])
            continue
        if len(p.history) > 1:
            p = replace(p, history=p.history[1:])
            continue
        keep = max(0.0, max_tokens / n * 0.9)
        if isinstance(p, FimPrompt):
            pre, suf = p.prefix, p.suffix
            p = replace(p, prefix=pre[len(pre) - int(len(pre) * keep):], suffix=suf[: int(len(suf) * keep)])
        else:
            b, a = p.before, p.after
            if not b and not a:
                p = replace(p, history=())
            p = replace(p, before=b[len(b) - int(len(b) * keep):], after=a[: int(len(a) * keep)])
    return p if len(render_trained(tok, p)) <= max_tokens else None


def to_example(tok: TokenizerLike, rec: Record, block_size: int, max_prompt: int, max_canvas: int,
               pad_to_block: bool = False, order: tuple[str | None, str | None] = (None, None)
               ) -> tuple[list[int], list[int]] | None:
    """(prompt ids, canvas target ids) of a record, or None when it does not fit; the canvas is the
    one the gate scores (`engine.reward.canvas_for`). ``order``: the reference adapter's (``fim_layout``,
    ``edit_layout``), the order its prompts are rendered in when it generates and when the gate scores."""
    p = fit_prompt(tok, prompt_from_dict(rec.prompt), max_prompt)
    if p is None:
        return None
    comp = tok.encode(rec.completion)
    c = -(-(len(comp) + 1) // block_size) * block_size if pad_to_block else len(comp) + 1
    if c > max_canvas:
        return None
    return render_trained(tok, p, *order), canvas_target(tok, rec.completion, c)
