"""`edit-server serve` (default, stdio or --tcp), `check`, `demo`, `http` subcommands."""

from __future__ import annotations

import argparse
import logging
import sys
import time

from edit_server.cli.flags import cli_settings, common_flags, settings_from_args
from edit_server.cli.logs import setup_logging


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve LSP on stdio (default) or --tcp HOST:PORT")
    common_flags(p)
    p.add_argument("--tcp", metavar="HOST:PORT", default=None)
    p.set_defaults(func=run)

    c = sub.add_parser("check", help="load the model, run one completion and one next edit, report")
    common_flags(c, "default")
    c.set_defaults(func=run_check)

    d = sub.add_parser("demo", help="replay an editing session against the real server over stdio")
    common_flags(d, "default")
    d.add_argument("--no-gate", action="store_true", help="show every non-empty suggestion")
    d.add_argument("--server-log", default=None, help="the server's log file (per-request timings at INFO)")
    d.add_argument("--no-fetch", action="store_true",
                   help="with --model default: never fetch the Qwen tier's base (without it: the embedded model)")
    d.set_defaults(func=run_demo)

    h = sub.add_parser("http", help="Zed open_ai_compatible_api front end (HTTP)")
    common_flags(h, "default", config=True)
    h.add_argument("--host", default="127.0.0.1")
    h.add_argument("--port", type=int, default=8377)
    h.set_defaults(func=run_http)


def run(args: argparse.Namespace) -> int:
    setup_logging(args)
    from edit_server.lsp.server import build

    try:
        cli = cli_settings(args)
    except ValueError as e:
        print(f"edit-server: {e}", file=sys.stderr)
        return 2
    ls = build(cli)
    tcp = getattr(args, "tcp", None)
    if not tcp:
        return ls.serve()
    host, _, port = tcp.rpartition(":")
    if not host or not port.isdigit():
        print(f"edit-server: --tcp expects HOST:PORT, got {tcp!r}", file=sys.stderr)
        return 2
    import socket

    with socket.create_server((host, int(port))) as srv:  # one editor connection, then exit with it
        logging.getLogger(__name__).info("listening on %s:%s", host, port)
        conn, _ = srv.accept()
        with conn, conn.makefile("rb") as rfile, conn.makefile("wb") as wfile:
            return ls.serve(rfile, wfile)


def run_http(args: argparse.Namespace) -> int:
    setup_logging(args)
    from edit_server.http import app

    try:
        settings = settings_from_args(args)
    except (OSError, ValueError) as e:
        print(f"edit-server http: {e}", file=sys.stderr)
        return 2
    return app.serve(args.host, args.port, settings)


def run_demo(args: argparse.Namespace) -> int:
    setup_logging(args)
    from edit_server.cli.demo import main

    return main(args.model, args.device or "auto", gate=not args.no_gate, server_log=args.server_log,
                fetch=not args.no_fetch)


def run_check(args: argparse.Namespace) -> int:
    setup_logging(args)
    from engine import EditPrompt, Engine, FimPrompt

    t0 = time.perf_counter()
    try:
        eng = Engine.load(args.model, device=args.device or "auto")
    except Exception as e:
        print(f"edit-server check: could not load model {args.model!r}: {e}", file=sys.stderr)
        return 1
    load_s = time.perf_counter() - t0
    info = eng.info
    print("edit-server check")
    if args.model.strip() == "default":  # which tier and why (engine.tiers; also logged at INFO)
        from engine.tiers import default_model

        print(f"  default    {default_model(eng.device.type, quiet=True).line()}")
    print(f"  model      {info.model}  ({info.label})")
    print(f"  device     {info.device}  dtype {info.dtype}  attention {info.attention}")
    print(f"  load       {load_s:.2f} s")
    fim = FimPrompt("def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n", path="check.py")
    r = eng.infill(fim, max_tokens=32, single_line=True, cache_key="check")
    print(f"  completion {r.timings.get('total_ms', 0):.0f} ms  steps {r.steps}  tokens {len(r.tokens)}  "
          f"-> {r.text!r}")
    region = "def area(w, h):\n    return w * w\n"
    ep = EditPrompt("", region, "\nprint(area(2, 3))\n", cursor=len(region) - 6, path="check.py",
                    history=("--- a/check.py\n+++ b/check.py\n@@ -1 +1 @@\n-def area(w):\n+def area(w, h):\n",))
    r2 = eng.rewrite(ep, cache_key="check-edit")
    print(f"  next edit  {r2.timings.get('total_ms', 0):.0f} ms  steps {r2.steps}  tokens {len(r2.tokens)}  "
          f"-> {r2.text!r}")
    return 0
