"""``python -m evals WHAT ...`` = ``edit-server eval WHAT ...`` without the server package's CLI.

The GPU job runs ``python -m evals humaneval-infill --model default ...`` on an image that has torch,
numpy, transformers, tokenizers, safetensors, pyyaml and tqdm but none of pygls, lsprotocol, msgspec,
tree-sitter or GitPython: the engine runner imports none of them (tests/test_evals_minimal_image.py).
"""

from __future__ import annotations

import argparse
import sys

from evals.cli import register


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evals", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    register(sub)
    args = p.parse_args(["eval", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
