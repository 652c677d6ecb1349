"""`edit-server align gate`: learn the show/hide threshold from logged outcomes.

The gate's raw score (geometric-mean token confidence) is not calibrated across contexts. This fits, per
suggestion kind, an isotonic map score → P(accepted) on logged outcomes — the server's feedback store
(accepted / partially accepted vs rejected / expired suggestions) and/or eval reports run with the gate
off (`edit-server eval replay|cases --no-gate`) — and picks the lowest raw threshold whose held-out
precision reaches the target. The result is a small JSON file that the server reads (setting
``gate.calibration``; default location below) in place of ``gate.threshold``.

KTO alignment of the model itself (Ethayarajh et al. 2024, arXiv 2402.01306) and the gate on its
implicit reward: ``align data`` (`align_data`), ``align kto`` / ``align rollback`` (`align_kto`),
``align measure`` (`align_measure`), serving side `kto_gate`. The fitting (`isotonic` / `fit`) and what the
align commands share are in `align_common` (which imports none of them: no import cycle).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from dataclasses import asdict
from pathlib import Path

from edit_server.cli.align_common import NEGATIVE, POSITIVE, AlignOutcome, fit, save
from edit_server.selectivity.thresholds import default_calibration_path, gate_kind


# ---- data ---------------------------------------------------------------------------------------
def from_feedback(db: str | Path) -> list[AlignOutcome]:
    """Suggestions with a known outcome from the server's sqlite store."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT suggestion, kind, event, score FROM events ORDER BY rowid").fetchall()
    finally:
        con.close()
    label: dict[str, tuple[str, float, bool]] = {}
    for sid, kind, event, score in rows:
        if score is None or (event not in POSITIVE and event not in NEGATIVE):
            continue
        prev = label.get(sid)
        label[sid] = (kind, float(score), event in POSITIVE or (prev is not None and prev[2]))
    return [AlignOutcome(sid, k, s, a) for sid, (k, s, a) in label.items()]


def from_eval(report_dir: str | Path) -> list[AlignOutcome]:
    """Scored suggestions of an eval run (``results.jsonl``): a case run (``eval replay|cases --no-gate``;
    accepted = the suggestion is right) or a HumanEval-infilling run through the server (``eval
    humaneval-infill --via-lsp``, gate off; accepted = the completed program passes its tests)."""
    path = Path(report_dir) / "results.jsonl"
    if not path.is_file():
        raise SystemExit(f"edit-server align gate: {path}: no such eval report")
    out = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r.get("score") is None:
            continue
        if "passed" in r:  # HumanEval-infilling: FIM completions scored by their tests
            if r.get("shown"):
                out.append(AlignOutcome(str(r["id"]), "fim", float(r["score"]), bool(r["passed"])))
            continue
        if not r.get("suggestion"):
            continue
        accepted = bool(r.get("accepted")) and not r.get("quiet_case")
        kind = gate_kind(str(r.get("kind", "fim")), r.get("origin"))  # a rule's candidate: calibrated apart
        out.append(AlignOutcome(str(r["id"]), kind, float(r["score"]), accepted))
    return out


# ---- CLI ----------------------------------------------------------------------------------------
def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("align", help="learn the selectivity gate and align the model (KTO) from outcomes")
    a = p.add_subparsers(dest="align", metavar="WHAT", required=True)
    g = a.add_parser("gate", help="calibrate the show/hide threshold per suggestion kind")
    g.add_argument("--feedback", action="append", default=[], metavar="DB",
                   help="feedback sqlite store (default: the server's, if it exists)")
    g.add_argument("--eval", action="append", default=[], metavar="DIR",
                   help="eval report directory run with --no-gate (repeatable)")
    g.add_argument("--target-precision", type=float, default=0.6)
    g.add_argument("--min-count", type=int, default=20, help="fewest outcomes per kind to fit it")
    g.add_argument("--out", type=Path, default=None, help=f"default: {default_calibration_path()}")
    g.add_argument("--dry-run", action="store_true", help="print, do not write")
    g.add_argument("--json", action="store_true")
    g.set_defaults(func=run)
    from edit_server.cli import align_data, align_kto, align_locator, align_measure

    align_data.register_cli(a)
    align_locator.register_cli(a)
    align_kto.register_cli(a)
    align_measure.register_cli(a)


def run(args: argparse.Namespace) -> int:
    from edit_server.selectivity.feedback import default_db_path

    dbs = args.feedback or ([str(default_db_path())] if default_db_path().is_file() else [])
    missing = [db for db in dbs if not Path(db).is_file()]
    if missing:
        print(f"edit-server align gate: {missing[0]}: no such feedback store", file=sys.stderr)
        return 2
    outcomes = [o for db in dbs for o in from_feedback(db)] + [o for d in args.eval for o in from_eval(d)]
    cal = fit(outcomes, args.target_precision, args.min_count)
    if args.json:
        print(json.dumps({k: asdict(v) for k, v in cal.items()}, indent=1))
    else:
        print(f"{len(outcomes)} outcomes from {len(dbs)} feedback store(s) and {len(args.eval)} eval run(s); "
              f"target precision {args.target_precision:.2f}")
        print(f"{'kind':6} {'n':>6} {'accept':>7} {'threshold':>10} {'precision':>10} {'coverage':>9}")
        for k, c in cal.items():
            prec = f"{c.precision:10.3f}" if c.coverage > 0 else f"{'–':>10}"  # nothing shown: no precision
            print(f"{k:6} {c.n:6d} {c.accept_rate:7.3f} {c.threshold:10.4f} {prec} {c.coverage:9.3f}")
    if not cal:
        print(f"nothing to fit: need >= {args.min_count} outcomes of a kind", file=sys.stderr)
        return 1
    if not args.dry_run:
        out = args.out or default_calibration_path()
        save(cal, out, args.target_precision)
        print(f"wrote {out}")
    return 0
