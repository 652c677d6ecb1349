"""Shared pytest configuration."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("EDIT_SERVER_SHARED", ROOT.parent / "shared"))
HUMANEVAL_DIR = SHARED / "data" / "humaneval-infilling"

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def scratch_dir(prefix: str) -> str:
    """A temporary directory for this test process, removed when it exits."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


# a developer's own settings (e.g. a learned gate calibration) must not change test outcomes;
# the servers the e2e tests start inherit this
os.environ["XDG_CONFIG_HOME"] = scratch_dir("edit-server-test-config-")
os.environ["XDG_DATA_HOME"] = scratch_dir("edit-server-test-data-")  # aligned adapters, feedback


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny matrices: one intra-op thread avoids OpenMP spin contention on a busy 2-core box."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip GPU tests without CUDA; run e2e tests last."""
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:  # pragma: no cover
        has_cuda = False
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip_gpu)
    items.sort(key=lambda it: 1 if "e2e" in it.keywords else 0)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true", default=False,
                     help="long fuzzing runs (tests/fuzz: 10,000 sessions instead of the CI bound)")
    parser.addoption("--fuzz-sessions", type=int, default=0,
                     help="tests/fuzz: this many sessions (with --long: long sessions, unseeded)")
