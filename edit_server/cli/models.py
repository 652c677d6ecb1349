"""`edit-server models`: every model tier with its size, context, quality row and latency rows
(`engine.tiers`: the measurements of ``engine/tiers.json``), and what ``--model default`` means on this
machine and why. ``--json`` for scripts."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="the model tiers: size, context, quality and latency rows; what default means here")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"],
                   help="device kind to resolve --model default for (auto: this machine's; cuda works without one)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from engine import options
    from engine.specs import resolve_device
    from engine.tiers import choose, load, tiers

    table = load()
    rows = tiers(table)
    kind = resolve_device("auto").type if args.device == "auto" else args.device
    choice = choose(kind, table, adapter=options.env().adapter)
    if args.json:
        print(json.dumps({"default": {"model": choice.model, "device": choice.device, "reason": choice.reason},
                          "typing_table": vars(table.typing), "tiers": [t.as_dict() for t in rows]}, indent=1))
        return 0
    ty = table.typing
    print(f"CPU typing table (2-core CPU): single line p50 <= {ty.inline_p50_ms:,.0f} ms, p95 <= "
          f"{ty.inline_p95_ms:,.0f} ms; next edit p50 <= {ty.next_edit_p50_ms:,.0f} ms ({ty.source})\n")
    for t in rows:
        mark = "  <- default here" if t.model == choice.model else ""
        print(f"{t.model}{mark}\n  {t.what}\n  size: {t.size} · context: {t.context:,} · decoding: {t.decoding}\n"
              f"  quality: {t.quality_row}\n  latency (CPU): {t.latency_row('cpu')}\n"
              f"  latency (GPU): {t.latency_row('cuda')}")
    print(f"\n{choice.line()}")
    return 0
