"""`edit-server serve` (default, stdio or --tcp), `check`, `demo`, `http` subcommands."""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edit_server.core.settings import Settings


def settings_flags(p: argparse.ArgumentParser, model_default: str | None = None, config: bool = False,
                   model: bool = True) -> None:
    """The settings flags of every command that builds a ``Settings`` (``settings_from_args``): ``--model``
    and ``--device`` (unless ``model`` is False), ``--set``, and ``--config`` when ``config``."""
    if model:
        p.add_argument("--model", default=model_default,
                       help='"default" (embedded), "tiny-random", an HF directory or a .gguf file')
        p.add_argument("--device", default=None, choices=["auto", "cpu", "cuda", "mps"])
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any setting (README 'Settings'), camelCase, dotted for nested keys, JSON values: "
                        "--set gate.threshold=0.7 --set contextBudget=4096; wins over the client's options")
    if config:
        p.add_argument("--config", default=None, metavar="FILE.json",
                       help="settings as JSON (the LSP initializationOptions keys); command-line flags win")


def _common(p: argparse.ArgumentParser, model_default: str | None = None, config: bool = False) -> None:
    settings_flags(p, model_default, config)
    p.add_argument("--log-file", default=None, help="log to this file (default: stderr)")
    p.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def cli_settings(args: argparse.Namespace) -> dict:
    """Command-line settings as camelCase options (``--model``, ``--device``, ``--set``), for
    ``edit_server.core.settings.build_settings``."""
    from edit_server.core.settings import parse_set

    out = parse_set(getattr(args, "set", None))
    if getattr(args, "model", None):
        out["model"] = args.model
    if getattr(args, "device", None):
        out["device"] = args.device
    return out


def config_options(args: argparse.Namespace) -> dict | None:
    """The ``--config FILE.json`` options (client options, below the command line), or None."""
    import json

    path = getattr(args, "config", None)
    return json.loads(open(path, encoding="utf-8").read()) if path else None


def settings_from_args(args: argparse.Namespace, cli: dict | None = None) -> Settings:
    """The settings of a command: ``--config`` ← ``--model`` / ``--device`` / ``--set`` (and ``cli``: the
    command's own flags as camelCase options), through ``build_settings`` as the servers make them.
    Raises ValueError naming every bad key (or an unreadable ``--config``)."""
    from edit_server.core.settings import build_settings

    try:
        client = config_options(args)
    except OSError as e:
        raise ValueError(f"--config: {e}") from e
    settings, bad = build_settings(client, {**cli_settings(args), **(cli or {})})
    if bad:
        raise ValueError("; ".join(bad))
    return settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve LSP on stdio (default) or --tcp HOST:PORT")
    _common(p)
    p.add_argument("--tcp", metavar="HOST:PORT", default=None)
    p.set_defaults(func=run)

    c = sub.add_parser("check", help="load the model, run one completion and one next edit, report")
    _common(c, "default")
    c.set_defaults(func=run_check)

    d = sub.add_parser("demo", help="replay an editing session against the real server over stdio")
    _common(d, "default")
    d.add_argument("--no-gate", action="store_true", help="show every non-empty suggestion")
    d.add_argument("--server-log", default=None, help="the server's log file (per-request timings at INFO)")
    d.set_defaults(func=run_demo)

    h = sub.add_parser("http", help="Zed open_ai_compatible_api front end (HTTP)")
    _common(h, "default", config=True)
    h.add_argument("--host", default="127.0.0.1")
    h.add_argument("--port", type=int, default=8377)
    h.set_defaults(func=run_http)


class RedactingFilter(logging.Filter):
    """Every log record passes the prompts' secret redaction, with the rules of every file type and
    string escapes read through (``secrets.redact_any``): even a DEBUG log of whole messages (document
    text quoted in JSON) holds no secret. A record logged while a redaction is under way (a library logging
    from inside it) or one the redaction fails on is withheld, never passed through unredacted."""

    WITHHELD = "[log message withheld: secret redaction unavailable]"

    def __init__(self) -> None:
        super().__init__()
        from edit_server.context.secret_scan import all_rules

        all_rules()  # import the detectors now: a first import inside a log call would log and recurse
        self._busy = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        from edit_server.context.secrets import redact_any as redact

        if getattr(self._busy, "on", False):
            record.msg, record.args, record.exc_info, record.exc_text = self.WITHHELD, None, None, None
            return True
        self._busy.on = True
        try:
            msg = record.getMessage()
            record.msg, record.args = redact(msg), None
            if record.exc_info and not record.exc_text:  # a traceback may quote text too
                record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        except Exception:  # noqa: BLE001 - fail closed: no unredacted text
            record.msg, record.args, record.exc_text = self.WITHHELD, None, None
        finally:
            self._busy.on = False
        return True


def setup_logging(args: argparse.Namespace) -> None:
    """Logs go to stderr or --log-file: stdout belongs to the stdio transport. INFO carries sizes and
    timings; message contents only at DEBUG — and secrets never (``RedactingFilter``)."""
    handler: logging.Handler = (logging.FileHandler(args.log_file) if args.log_file
                                else logging.StreamHandler(sys.stderr))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(args.log_level)
    if args.log_level != "DEBUG":  # pygls logs every message it sends (suggestions, text) at INFO
        for noisy in ("pygls", "aiohttp.access"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


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

    return main(args.model, args.device or "auto", gate=not args.no_gate, server_log=args.server_log)


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
    print(f"  model      {info.get('model')}  ({info.get('label', '')})")
    print(f"  device     {info.get('device')}  dtype {info.get('dtype')}  attention {info.get('attention')}")
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
