"""Self-play KTO data: sample the current model on corpus tasks with a known truth, label by exact match.

Tasks are the trainer's own generators (`engine.train.tasks.make_fim`, `tasks_edit.make_edit` /
`make_noedit`): FIM spans, next edits and no-edit regions of corpus files. The model's output is
desirable when it equals the truth (whitespace-normalised), else undesirable; with ``truth`` the
truth itself is added as a desirable record when the model missed it (so a weak model still yields
both classes). A user can align without any logged history. Training-split documents give training
records, the corpus' validation files held-out ones (the split is by file).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from engine.templates import EditPrompt, FimPrompt
from engine.train.corpus import Doc
from engine.train.kto.records import Record, prompt_to_dict
from engine.train.tasks import Budget, Example, make_fim
from engine.train.tasks_edit import make_edit, make_noedit
from engine.types import SamplerConfig


def normalize(text: str) -> str:
    return "\n".join(ln.rstrip() for ln in text.splitlines() if ln.strip())


def geo_conf(confidences: list[float]) -> float:
    import math

    if not confidences:
        return 0.0
    return math.exp(sum(math.log(min(1.0, max(c, 1e-9))) for c in confidences) / len(confidences))


@dataclass
class SelfPlayConfig:
    n: int = 200
    mix: tuple[tuple[str, float], ...] = (("fim", 0.6), ("edit", 0.25), ("noedit", 0.15))
    budget: Budget = Budget(max_len=320, block_size=32, max_canvas=32, chars_per_token=3.2)
    fim_spans: tuple[str, ...] = ("line", "line", "chars", "syntax")
    truth: bool = True
    max_steps: int | None = 8  # per block: bounds CPU time (≥ 4 tokens per step on a 32-token block)
    seed: int = 0


def _task(kind: str, doc: Doc, tok: object, cfg: SelfPlayConfig, rng: random.Random) -> Example | None:
    if kind == "fim":
        return make_fim(tok, doc.text, doc.path, doc.lang, rng, cfg.budget,  # type: ignore[arg-type]
                        how=rng.choice(cfg.fim_spans))
    if kind == "edit":
        ex = make_edit(tok, doc.text, doc.path, rng, cfg.budget)  # type: ignore[arg-type]
        if ex is None or ex.kind.startswith("noedit"):
            return None
        # a whitespace-only change (e.g. a blank line deleted) is no edit under the exact-match label
        return ex if normalize(ex.meta["new_region"]) != normalize(ex.meta["prompt"].region) else None
    return make_noedit(tok, doc.text, doc.path, rng, cfg.budget)  # type: ignore[arg-type]


def self_play(eng: object, docs: list[Doc], split: str, cfg: SelfPlayConfig,
              progress: Callable[[Iterable[int]], Iterable[int]] = iter) -> list[Record]:
    """``cfg.n`` model samples on tasks from ``docs`` (all records get ``split``)."""
    if not docs:
        return []
    rng = random.Random(cfg.seed)
    tok = eng.tokenizer  # type: ignore[attr-defined]
    sampler = SamplerConfig(max_steps=cfg.max_steps)
    kinds, weights = [k for k, _ in cfg.mix], [w for _, w in cfg.mix]
    out: list[Record] = []
    for i in progress(range(cfg.n)):
        kind = rng.choices(kinds, weights)[0]
        ex = None
        for _ in range(50):
            ex = _task(kind, rng.choice(docs), tok, cfg, rng)
            if ex is not None:
                break
        if ex is None:
            continue
        if kind == "fim":
            m = ex.meta
            prompt: FimPrompt | EditPrompt = FimPrompt(m["prefix"], m["suffix"], path=m["path"],
                                                       layout=m["layout"])
            truth = m["middle"]
            single = ex.kind == "fim:line" and "\n" not in truth
            res = eng.infill(prompt, max_tokens=len(ex.target), single_line=single,  # type: ignore[attr-defined]
                             sampler=sampler)
        else:
            prompt, truth = ex.meta["prompt"], ex.meta["new_region"]
            res = eng.rewrite(prompt, sampler=sampler)  # type: ignore[attr-defined]
        ok = normalize(res.text) == normalize(truth)
        group = prompt.path or "?"  # the corpus file: the split key
        meta = {"task": ex.kind, "score": geo_conf(res.confidences), "truth": truth,
                "finish": res.finish_reason}
        base = dict(kind=kind, group=group, prompt=prompt_to_dict(prompt), split=split)
        out.append(Record(f"selfplay:{split}:{cfg.seed}:{i}", "selfplay", label=ok, completion=res.text,
                          meta=meta, **base))  # type: ignore[arg-type]
        if cfg.truth and not ok:
            out.append(Record(f"selfplay-truth:{split}:{cfg.seed}:{i}", "selfplay-truth", label=True,
                              completion=truth, meta={"task": ex.kind}, **base))  # type: ignore[arg-type]
    return out
