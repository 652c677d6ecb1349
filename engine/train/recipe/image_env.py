"""A Python environment with only the GPU image's packages importable, for CPU rehearsals and tests.

The GPU image has torch, numpy, transformers, tokenizers, safetensors, pyyaml and tqdm — not pygls,
lsprotocol, msgspec, tree-sitter, GitPython, aiohttp, gguf, matplotlib or cattrs. `write_blocker` writes a
``sitecustomize.py`` that makes those unimportable — except a package *carried* to the machine (the boot
bundle's vendored gguf, ``WORK/boot/vendor``), which may load from the carried folder only. Put the
folder first on ``PYTHONPATH``::

    python -m engine.train.recipe.image_env DIR [--carried gguf=WORK/boot/vendor]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

NOT_ON_IMAGE = ("pygls", "lsprotocol", "msgspec", "tree_sitter", "tree_sitter_python", "git", "gitdb",
                "aiohttp", "gguf", "matplotlib", "cattrs")

_TEMPLATE = '''import os, sys
from importlib.machinery import PathFinder
BLOCK = {block!r}
CARRIED = {carried!r}  # name -> the only folder it may load from
class _Block:
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top not in BLOCK:
            return None
        where = CARRIED.get(top)
        if where is None:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not on the GPU image)")
        if name != top:
            return None  # a submodule: found through the (carried) package's own __path__
        spec = PathFinder.find_spec(name, [where])
        if spec is None:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not on the GPU image, not carried to {{where}})")
        return spec
sys.meta_path.insert(0, _Block())
'''


def write_blocker(d: Path, carried: dict[str, Path] | None = None, block: tuple[str, ...] = NOT_ON_IMAGE) -> Path:
    """``d/sitecustomize.py``; ``carried``: {package: folder it is carried in}."""
    d.mkdir(parents=True, exist_ok=True)
    text = _TEMPLATE.format(block=set(block), carried={k: str(Path(v).resolve()) for k, v in (carried or {}).items()})
    (d / "sitecustomize.py").write_text(text)
    return d


def image_env(d: Path, root: Path, carried: dict[str, Path] | None = None,
              base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment (from ``base`` or os.environ) whose Python sees only the image's packages + ``carried``,
    with ``root`` (the code) on the path."""
    write_blocker(d, carried)
    env = {k: v for k, v in (base if base is not None else os.environ).items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(d), str(root)])
    return env


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", type=Path)
    p.add_argument("--carried", action="append", default=[], metavar="NAME=DIR")
    a = p.parse_args(argv)
    carried = dict(c.split("=", 1) for c in a.carried)
    print(write_blocker(a.dir, {k: Path(v) for k, v in carried.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
