"""What the `edit-server align` commands share (and import from here, never from each other): outcome labels,
the isotonic fit of a score to P(accepted) and the threshold it picks (`fit`, used by ``align gate`` and
``align kto``'s reward calibration), the HumanEval problem of a task id and the edit prompt of a cursor
(``align data`` and ``align measure``).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from edit_server.selectivity.thresholds import threshold_for

EDIT_BEFORE, EDIT_AFTER = 3, 6  # editable region of a reconstructed next-edit prompt (server defaults)

POSITIVE = {"accepted", "partial"}
NEGATIVE = {"rejected", "expired"}


@dataclass(frozen=True)
class AlignOutcome:
    id: str
    kind: str  # "fim" | "edit"
    score: float
    accepted: bool


@dataclass
class KindCalibration:
    threshold: float  # raw gate score at or above which a suggestion is shown
    n: int
    accept_rate: float
    precision: float  # on the held-out part, at ``threshold``
    coverage: float  # share of held-out suggestions shown at ``threshold``
    points: list[tuple[float, float]]  # isotonic map: (raw score, P(accepted)), increasing
    # per candidate threshold (each isotonic step's lowest score, increasing): (threshold, the lower of the
    # fitting and held-out precision there, held-out coverage) — `threshold_for` re-picks the threshold for
    # another target precision at serving time (setting ``gate.ktoTargetPrecision``)
    curve: list[tuple[float, float, float]] = field(default_factory=list)


# ---- fitting ------------------------------------------------------------------------------------
def isotonic(xs: Sequence[float], ys: Sequence[float]) -> list[tuple[float, float]]:
    """Pool-adjacent-violators: the non-decreasing step fit of ys on xs, as (x, y) points where each x
    is the lowest score of its step (so ``score >= x`` selects the step and everything above it)."""
    pts = sorted(zip(xs, ys, strict=True))
    blocks: list[list[float]] = []  # [sum_y, count, first_x]
    for x, y in pts:
        blocks.append([y, 1.0, x])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] >= blocks[-1][0] / blocks[-1][1]:
            s, c, _ = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    return [(b[2], b[0] / b[1]) for b in blocks]


def _held_out(o: AlignOutcome) -> bool:
    return zlib.crc32(o.id.encode()) % 4 == 0  # a stable 25 % split


def _precision_coverage(data: Sequence[AlignOutcome], threshold: float) -> tuple[float, float]:
    shown = [o for o in data if o.score >= threshold]
    if not shown:
        return 1.0, 0.0
    return sum(o.accepted for o in shown) / len(shown), len(shown) / len(data)


def fit_kind(data: Sequence[AlignOutcome], target_precision: float) -> KindCalibration:
    """Lowest threshold (most coverage) at which the precision of the shown suggestions reaches the
    target on both the fitting part and the held-out part; ``points`` is the calibrated map."""
    train = [o for o in data if not _held_out(o)] or list(data)
    test = [o for o in data if _held_out(o)] or list(data)
    points = isotonic([o.score for o in train], [float(o.accepted) for o in train])
    curve = []
    for x, _ in points:
        p_test, cov = _precision_coverage(test, x)
        curve.append((x, min(_precision_coverage(train, x)[0], p_test), cov))
    threshold = threshold_for(curve, target_precision)
    precision, coverage = _precision_coverage(test, threshold)
    return KindCalibration(threshold, len(data), sum(o.accepted for o in data) / len(data),
                           precision, coverage, points, curve)


def fit(outcomes: Iterable[AlignOutcome], target_precision: float, min_count: int = 20
        ) -> dict[str, KindCalibration]:
    by_kind: dict[str, list[AlignOutcome]] = {}
    for o in outcomes:
        by_kind.setdefault(o.kind, []).append(o)
    return {k: fit_kind(v, target_precision) for k, v in sorted(by_kind.items()) if len(v) >= min_count}


def save(cal: dict[str, KindCalibration], path: Path, target_precision: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"target_precision": target_precision, "kinds": {k: asdict(v) for k, v in cal.items()}}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(body, indent=1))
    tmp.replace(path)


# ---- records ----------------------------------------------------------------------------------
def problem_of(task_id: str) -> str:
    """``SingleLineInfilling/HumanEval/12/L3`` → ``HumanEval/12`` (all splits share the problems)."""
    parts = task_id.split("/")
    return "/".join(parts[1:3]) if len(parts) >= 3 else task_id


def edit_prompt(text: str, offset: int, path: str, history: list[str]) -> tuple[dict[str, Any], int, int]:
    """An edit prompt (a record's dict) for a cursor: the server's default editable region around it
    (``EDIT_BEFORE`` lines above, ``EDIT_AFTER`` below); (prompt, region start, region end)."""
    lines = text.split("\n")
    line = text.count("\n", 0, offset)
    lo, hi = max(0, line - EDIT_BEFORE), min(len(lines), line + EDIT_AFTER + 1)
    start = sum(len(ln) + 1 for ln in lines[:lo])
    end = min(len(text), sum(len(ln) + 1 for ln in lines[:hi]))
    p = {"type": "edit", "before": text[:start], "region": text[start:end], "after": text[end:],
         "cursor": offset - start, "path": path, "history": list(history), "sections": []}
    return p, start, end
