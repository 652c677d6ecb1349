"""The tokens a real next edit changes, teacher-forced: does a model learn edits, not only copies (issue 25)?

A rewrite's canvas is mostly its region copied. Exact next edits on 60 held-out cases move in steps of
1.7 % and sat at 0–1 for every adapter so far, and the training validation's masked accuracy (0.84 at step
952) is the copies'. This measure splits the two: edit examples drawn from git sessions (the training
sessions' rendering, `engine.train.git_sessions`, every one with an edit due), one BD3 pass at fixed noise,
and per source

* ``changed_acc`` / ``changed_ce``: accuracy and cross-entropy on the masked tokens that change the region
  (`engine.train.tasks_edit.changed_positions`) — what a next edit is made of;
* ``copy_acc``: the same on the other masked canvas tokens;
* ``changed_loss_share``: the changed tokens' share of the plain loss (how much training sees of them).

It needs only the GPU image's packages when the sessions are ``.jsonl.gz`` (`train git-sessions`); held-out
repositories' sessions give a smooth next-edit figure to compare adapters by. A training diagnostic (the
validation loss taken apart), so it lives beside the trainer: ``edit-server train edit-tokens SOURCES`` or, on
the GPU image, ``python -m engine.train.edit_tokens SOURCES``.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TokenOptions:
    examples: int = 32  # per source (the GPU job's count, so figures compare with docs/QUALITY.md's)
    seed: int = 0
    batch_size: int = 4
    seq_len: int = 1024  # prompt + canvas, as the GPU recipe trains
    max_canvas: int = 256  # a rewrite's canvas cap (the recipe's max_edit_canvas)
    chars_per_token: float = 3.4


def edit_examples(sessions: Sequence[Any], tok: Any, opts: TokenOptions, block_size: int,
                  layout: str | None) -> list[Any]:
    """``opts.examples`` edit examples (an edit due in every one), drawn deterministically per seed."""
    from engine.train.git_sessions import git_example
    from engine.train.tasks import Budget

    budget = Budget(opts.seq_len, block_size, opts.max_canvas, opts.chars_per_token, opts.max_canvas)
    rng = random.Random(opts.seed)
    pool = list(sessions)
    out: list[Any] = []
    tries = 0
    while len(out) < opts.examples and pool and tries < 50 * max(1, opts.examples):
        tries += 1
        ex = git_example(tok, rng.choice(pool), rng, budget, noedit_share=0.0, layout=layout)
        if ex is not None and ex.changed:
            out.append(ex)
    return out


def measure(model: Any, tok: Any, examples: Sequence[Any], batch_size: int = 4, seed: int = 1234) -> dict[str, Any]:
    """One fixed-noise BD3 pass over ``examples`` (`engine.train.objective.fixed_noise_pass`): plain loss,
    and accuracy / CE of the changed and the copied masked tokens."""
    from engine.train.objective import fixed_noise_pass

    args = model.args
    out = fixed_noise_pass(model, examples, args.block_size, tok.special.mask, tok.special.pad,
                           batch_size=batch_size, seed=seed, shifted=args.shifted_logits)
    out.pop("masked_ce")
    return out


def run(sources: Sequence[Path], spec: str, device: str, opts: TokenOptions) -> dict[str, Any]:
    """Per source (a bundle, repository or ``.jsonl.gz`` of sessions): `measure` over its edit examples."""
    from engine.train.git_sessions import load_git_sources
    from engine.train.trainer import load_frozen

    model, ck = load_frozen(spec, device)  # fp32 on a CPU, bf16 on CUDA
    model.eval()
    tok = ck.tokenizer
    info = {"name": ck.name, "label": ck.meta.get("label", ck.name), "edit_layout": ck.meta.get("edit_layout")}
    rows = {}
    for src in sources:
        sessions = load_git_sources([str(src)])
        exs = edit_examples(sessions, tok, opts, model.args.block_size, info.get("edit_layout"))
        if not exs:
            raise ValueError(f"{src}: no edit example could be drawn from {len(sessions)} sessions")
        rows[Path(src).name] = {"sessions": len(sessions), **measure(model, tok, exs, opts.batch_size)}
    keys = ("examples", "changed_masked", "changed_acc", "changed_ce", "copy_acc", "changed_loss_share")
    return {"model": info, "options": opts.__dict__, "sources": rows,
            "summary": {"split": "edit-tokens", **{n: {k: r[k] for k in keys} for n, r in rows.items()}}}


def format_table(report: dict[str, Any]) -> str:
    def f(x: float | None, pct: bool = False) -> str:
        return "-" if x is None else f"{100 * x:.1f} %" if pct else f"{x:.3f}"

    lines = [f"edit tokens, teacher-forced ({report['model']['label']})",
             "| source | examples | changed tokens (masked) | changed acc | changed CE | copy acc | copy CE | "
             "changed share of the loss |", "|---|---|---|---|---|---|---|---|"]
    for name, r in report["sources"].items():
        lines.append(f"| {name} | {r['examples']} | {r['changed_masked']} | {f(r['changed_acc'], True)} | "
                     f"{f(r['changed_ce'])} | {f(r['copy_acc'], True)} | {f(r['copy_ce'])} | "
                     f"{f(r['changed_loss_share'], True)} |")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sources", type=Path, nargs="+", help="git bundles / repositories / sessions .jsonl.gz")
    p.add_argument("--model", default="default", help="tiny-random | default | a tier (default: default)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--examples", type=int, default=32, help="edit examples per source (default 32)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("runs/eval/edit-tokens"), help="report directory")


def main(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    report = run(args.sources, args.model, args.device, TokenOptions(examples=args.examples, seed=args.seed))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=1))
    print(format_table(report))
    print(f"report: {args.out / 'report.json'}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m engine.train.edit_tokens", description=__doc__.split("\n")[0])
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
