"""`edit-server` command line: argparse → modes.

Each subcommand lives in the module that owns it; that module exposes
``register(subparsers) -> None`` which adds its parser and sets ``func=run(args) -> int``.
Modules are imported lazily here and must not import torch at module level (start-up time).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from edit_server import __version__

# (subcommand, owning module). Groups (bench) collect several owners.
COMMANDS: list[tuple[str, str]] = [
    ("serve", "edit_server.cli.serve"),  # also: check, http, demo
    ("context", "edit_server.cli.context"),
    ("train", "engine.train.cli"),
    ("eval", "edit_server.cli.serving_view"),  # evals.cli with the serving rules' view plugged in
    ("align", "edit_server.cli.align"),
    ("models", "edit_server.cli.models"),
]
BENCH: list[str] = ["edit_server.cli.bench_engine", "edit_server.cli.bench_context", "edit_server.cli.bench_lsp",
                    "edit_server.cli.bench_http"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="edit-server",
        description="Next-edit / fill-in-the-middle LSP server powered by a diffusion LM. "
        "Without a subcommand: serve LSP on stdio.",
    )
    parser.add_argument("--version", action="version", version=f"edit-server {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for _, module in COMMANDS:
        _register(module, sub)
    bench = sub.add_parser("bench", help="benchmarks (table, or --json)")
    bench_sub = bench.add_subparsers(dest="bench", metavar="WHAT", required=True)
    for module in BENCH:
        _register(module, bench_sub)
    return parser


# subcommand modules that could not register for lack of an optional dependency: module -> why. The
# others still work (``align`` / ``train`` / ``eval`` on a GPU image without msgspec or pygls: the recipe's
# alignment stage runs ``python -m edit_server align ...`` there); asking for a missing one says why.
UNAVAILABLE: dict[str, str] = {}


def _register(module: str, sub: argparse._SubParsersAction) -> None:
    try:
        mod = importlib.import_module(module)
        mod.register(sub)
    except ImportError as e:
        if isinstance(e, ModuleNotFoundError) and e.name and module.startswith(e.name):
            return  # a subcommand whose module is not there yet
        UNAVAILABLE[module] = f"{type(e).__name__}: {e}"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # no subcommand (only global serve flags) → serve on stdio
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version"):
        argv = ["serve", *argv]
    if UNAVAILABLE and argv[0] not in ("-h", "--help", "--version") and not any(
            isinstance(a, argparse._SubParsersAction) and argv[0] in a.choices for a in parser._actions):
        for module, why in UNAVAILABLE.items():
            print(f"edit-server: {module} is unavailable here ({why})", file=sys.stderr)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    return int(args.func(args) or 0)

