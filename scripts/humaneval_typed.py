"""HumanEval-infilling single-line tasks with the cursor part-way into the line, as while typing it.

Writes ``OUT/HumanEval-SingleLineInfilling.jsonl.gz`` (read with ``--data OUT --split single-line``) in one of
three variants of where the cursor stands and what is right of it:

* ``eol``: half of the line's text typed, nothing right of the cursor (typing at a line's end);
* ``closers``: lines ending in brackets — half typed, the closing brackets right of the cursor (auto-closed);
* ``indent``: only the line's indentation typed (what an editor's auto-indent leaves after Enter);
* ``short``: the bench's typist (`edit_server.cli.bench_lsp_script.split_point`): 2–8 non-space characters
  starting with a separator right of the cursor (``x = f(a, | b)``), half of the rest typed.

The middle to write is what lies between: a model that also writes the text right of the cursor fails the task
in ``closers`` / ``short`` (the server cuts such a re-typed rest; compare middles with that in mind).

    python scripts/humaneval_typed.py --variant eol --out /tmp/typed-eol
    python -m evals humaneval-infill --model qwen2.5-coder-0.5b --device cpu --split single-line \\
        --data /tmp/typed-eol --limit 100 --out runs/eval/typed-eol
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edit_server.cli.bench_lsp_script import split_point  # noqa: E402
from evals.datasets import SPLITS, default_data_dir  # noqa: E402


def typed(task: dict[str, Any], variant: str) -> dict[str, Any] | None:
    """``task`` with the cursor moved into its line, or None where the variant does not apply."""
    sol = task["canonical_solution"]
    if sol.count("\n") != 1 or not sol.endswith("\n"):
        return None
    line = sol[:-1]
    indent = len(line) - len(line.lstrip())
    if variant in ("eol", "indent"):
        end = len(line)
    elif variant == "closers":
        m = re.search(r"[)\]}]+$", line)
        end = m.start() if m else None
    else:
        end = split_point(line)
    if end is None:
        return None
    cut = indent if variant == "indent" else indent + (end - indent) // 2
    if (cut <= indent and variant != "indent") or cut >= end or cut == 0:
        return None
    middle, suffix = line[cut:end], line[end:] + "\n" + task["suffix"]  # the line break stays right of the cursor
    return {**task, "prompt": task["prompt"] + line[:cut], "canonical_solution": middle, "suffix": suffix}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--variant", choices=("eol", "indent", "closers", "short"), required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--data", type=Path, default=None, help="HumanEval-infilling directory (default: ../shared)")
    a = ap.parse_args()
    src = (a.data or default_data_dir()) / SPLITS["single-line"]
    with gzip.open(src, "rt") as f:
        tasks = [t for t in (typed(json.loads(ln), a.variant) for ln in f) if t is not None]
    a.out.mkdir(parents=True, exist_ok=True)
    with gzip.open(a.out / SPLITS["single-line"], "wt") as f:
        f.writelines(json.dumps(t) + "\n" for t in tasks)
    print(f"{len(tasks)} tasks -> {a.out / SPLITS['single-line']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
