"""The environment is read in one module (engine/options.py), into one typed value."""

from __future__ import annotations

import ast

import pytest

from engine import options
from tests.test_layering import SOURCES, _rel


def _reads_environment(tree: ast.AST) -> list[int]:
    """Lines that read a variable (``os.environ.get``, ``os.environ[...]``, ``os.getenv``); passing the whole
    environment on to a subprocess (``dict(os.environ)``, ``os.environ.items()``) is not a read."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("get", "getenv") and \
                ast.unparse(node.value) in ("os.environ", "os"):
            if node.attr == "get" or ast.unparse(node.value) == "os":
                out.append(node.lineno)
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ" and \
                isinstance(node.ctx, ast.Load):
            out.append(node.lineno)
    return out


def test_environment_read_in_one_module() -> None:
    reads = {_rel(m): lines for m, p in SOURCES.items()
             if (lines := _reads_environment(ast.parse(p.read_text(encoding="utf-8"))))}
    assert "engine/options.py" in reads  # the finder sees a read
    assert set(reads) == {"engine/options.py"}, reads


def test_env_parses_and_names_the_variable() -> None:
    o = options.env({"EDIT_SERVER_FASTCPU": " 1 ", "EDIT_SERVER_PREFIX_CACHE_MB": "64",
                     "EDIT_SERVER_CUDA_GRAPHS": "0", "XDG_DATA_HOME": "/d"})
    assert (o.fast_cpu, o.graphs, o.prefix_cache_bytes, o.small_positions) == (True, False, 64 << 20, 3)
    assert str(o.data_home()) == "/d" and o.onednn_mode == "auto"
    unset = options.env({})
    assert (unset.fast_cpu, unset.graphs, unset.prefix_cache_bytes) == (None, None, None)
    with pytest.raises(ValueError, match="EDIT_SERVER_INT8_SMALL"):
        _ = options.env({"EDIT_SERVER_INT8_SMALL": "x"}).small_positions
    with pytest.raises(ValueError, match="EDIT_SERVER_PREFIX_CACHE_MB"):
        _ = options.env({"EDIT_SERVER_PREFIX_CACHE_MB": "-1"}).prefix_cache_bytes
    assert options.named("NOPE_UNSET_VAR", {}) == ""
