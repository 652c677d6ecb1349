"""`edit-server context FILE:LINE:COL`: show what would be sent for that cursor, and what was excluded.

Uses the byte-level test tokenizer unless ``--model`` is given (only then is torch imported).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("context", help="show the prompt sections for a cursor (transparency)")
    p.add_argument("location", help="FILE:LINE:COL (1-based)")
    p.add_argument("--kind", choices=["fim", "edit"], default="fim")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--budget", type=int, default=None, help="total prompt tokens (default 32768 / model)")
    p.add_argument("--model", default=None, help="count with this model's tokenizer (loads the engine)")
    p.add_argument("--root", action="append", type=Path, help="workspace root (default: git top / dir)")
    p.add_argument("--exclude", action="append", default=[], help="extra exclude glob")
    p.add_argument("--show-text", action="store_true", help="print each section's text too")
    p.set_defaults(func=run)


def parse_location(loc: str) -> tuple[Path, int, int]:
    parts = loc.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        raise ValueError(f"expected FILE:LINE:COL, got {loc!r}")
    return Path(parts[0]), int(parts[1]), int(parts[2])


def _default_root(path: Path) -> Path:
    from edit_server.context.safegit import SafeGit

    repo = SafeGit.discover(path.parent)
    return repo.top if repo is not None else path.parent


def run(args: argparse.Namespace) -> int:
    from edit_server.context.builder import ContextBuilder, ContextOptions

    try:
        path, line, col = parse_location(args.location)
        text = path.read_text(encoding="utf-8")
    except (ValueError, OSError) as e:
        print(f"edit-server context: {e}", file=sys.stderr)
        return 2
    lines = text.splitlines(keepends=True) or [""]
    line = min(max(line, 1), len(lines) + 1)
    offset = sum(len(x) for x in lines[: line - 1]) + min(col - 1, len(lines[line - 1].rstrip("\n"))
                                                        if line - 1 < len(lines) else 0)
    model_context = None
    if args.model:
        from engine import Engine

        eng = Engine.load(args.model, device="cpu")
        tok, model_context = eng.tokenizer, eng.args.max_seq_len
    else:
        from engine.tokenizer import Tokenizer

        tok = Tokenizer.byte_level()
    roots = args.root or [_default_root(path.resolve())]
    b = ContextBuilder(roots, tok, ContextOptions(model_context=model_context, exclude=tuple(args.exclude)))
    if b.degraded:
        print(f"edit-server context: degraded: {b.degraded}", file=sys.stderr)
    b.refresh_git(str(path.resolve()))
    b.wait_idle(60)
    fn = b.build_fim if args.kind == "fim" else b.build_edit
    build = fn(str(path.resolve()), text, offset, [], budget=args.budget)
    b.close()
    prompt, rep = build.prompt, build.report
    if args.json:
        print(json.dumps({"prompt": asdict(prompt), "report": asdict(rep)}, indent=1))
        return 0
    print(f"{args.kind} context for {rep.path} line {line} col {col}: {rep.total} / {rep.budget} tokens "
          f"(counting: {rep.counting}; fixed {rep.fixed}; built in {rep.ms:.1f} ms)")
    if rep.blocked:
        print(f"no context sent: {rep.blocked}")
    lo, hi = rep.window_lines
    print(f"\n{'source':<12} {'kind':<11} {'tokens':>7} {'allowed':>8}  path")
    print(f"{'window':<12} {'window':<11} {rep.window.used:>7} {rep.window.allowed:>8}  "
          f"{rep.path} lines {lo + 1}-{hi}")
    if rep.region_lines:
        print(f"{'region':<12} {'edit':<11} {'':>7} {'':>8}  {rep.path} lines "
              f"{rep.region_lines[0] + 1}-{rep.region_lines[1]}{' (redacted)' if rep.redacted_region else ''}")
    for s in rep.sources:
        if not s.items:
            print(f"{s.name:<12} {'-':<11} {0:>7} {s.allowed:>8}")
        for kind, p, n in s.items:
            print(f"{s.name:<12} {kind:<11} {n:>7} {s.allowed:>8}  {p}")
    if args.show_text:
        for s in prompt.sections:
            print(f"\n--- {s.kind}: {s.path}\n{s.text}", end="")
    if rep.excluded:
        print("\nexcluded:")
        for p, why in sorted(rep.excluded.items()):
            print(f"  {p}: {why}")
    if not rep.git_ready:
        print("\n(git history not loaded)")
    return 0
