"""The settings flags every command shares (``--model``, ``--device``, ``--set KEY=VALUE``, ``--config``)
and the `Settings` they build (`edit_server.core.settings.build_settings`, as the server does)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edit_server.core.settings import Settings


def settings_flags(p: argparse.ArgumentParser, model_default: str | None = None, config: bool = False,
                   model: bool = True) -> None:
    """The settings flags of every command that builds a ``Settings`` (``settings_from_args``): ``--model``
    and ``--device`` (unless ``model`` is False), ``--set``, and ``--config`` when ``config``."""
    if model:
        p.add_argument("--model", default=model_default,
                       help='"default" (the measured tier for this device: edit-server models), "smollm2-bd3" (embedded), '
                            '"qwen2.5-coder-0.5b", "tiny-random", an HF directory or a .gguf file')
        p.add_argument("--device", default=None, choices=["auto", "cpu", "cuda", "mps"])
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any setting (README 'Settings'), camelCase, dotted for nested keys, JSON values: "
                        "--set gate.threshold=0.7 --set contextBudget=4096; wins over the client's options")
    if config:
        p.add_argument("--config", default=None, metavar="FILE.json",
                       help="settings as JSON (the LSP initializationOptions keys); command-line flags win")


def common_flags(p: argparse.ArgumentParser, model_default: str | None = None, config: bool = False) -> None:
    settings_flags(p, model_default, config)
    p.add_argument("--log-file", default=None, help="log to this file (default: stderr)")
    p.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("--log-debug", action="append", default=[], metavar="LOGGER",
                   help="log this logger at DEBUG whatever --log-level says (repeatable), e.g. "
                        "edit_server.serving.contexts: a digest of every prompt built (hashes, no text)")


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
