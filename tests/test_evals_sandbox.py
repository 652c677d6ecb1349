"""The functional runner: canonical HumanEval solutions pass, wrong ones fail, the sandbox holds."""

from __future__ import annotations

import pytest

from evals.datasets import load_humaneval
from evals.humaneval import score
from evals.sandbox import Limits, run_python, unshare_prefix
from tests.conftest import HUMANEVAL_DIR

FAST = Limits(timeout_s=3.0, cpu_s=3)

needs_data = pytest.mark.skipif(not HUMANEVAL_DIR.is_dir(), reason="no shared HumanEval data")


@needs_data
@pytest.mark.parametrize("split", ["single-line", "multi-line", "random-span-light"])
def test_canonical_solutions_pass_and_wrong_ones_fail(split: str) -> None:
    tasks = load_humaneval(split, HUMANEVAL_DIR, limit=3, seed=1)
    assert len(tasks) == 3
    for t in tasks:
        ok = score(t, t.canonical_solution, FAST)
        assert ok["passed"] and ok["exact"], (t.task_id, ok["stderr_tail"])
        wrong = score(t, "    return None\n", FAST)
        assert not wrong["passed"] and wrong["status"] == "failed" and not wrong["exact"]


@needs_data
def test_split_sizes_and_errors() -> None:
    assert len(load_humaneval("random-span-light", HUMANEVAL_DIR)) == 164
    with pytest.raises(ValueError, match="unknown split"):
        load_humaneval("nope", HUMANEVAL_DIR)
    with pytest.raises(FileNotFoundError, match="--data"):
        load_humaneval("single-line", HUMANEVAL_DIR / "missing")


def test_infinite_loop_is_stopped() -> None:
    res = run_python("while True:\n    pass\n", Limits(timeout_s=1.5, cpu_s=5))
    assert res.status == "timeout" and not res.passed


def test_cpu_limit_kills_busy_child_processes() -> None:
    res = run_python("import os\nos.fork()\nwhile True:\n    pass\n", Limits(timeout_s=1.5, cpu_s=1))
    assert res.status == "timeout"


def test_socket_is_blocked() -> None:
    res = run_python("import socket\ns = socket.socket()\ns.connect(('127.0.0.1', 9))\n", FAST)
    assert res.status == "failed" and "network access is disabled" in res.stderr_tail
    res = run_python("import socket\nsocket.create_connection(('127.0.0.1', 9))\n", FAST)
    assert res.status == "failed" and "PermissionError" in res.stderr_tail


@pytest.mark.skipif(not unshare_prefix(), reason="unshare -n not permitted here")
def test_raw_socket_has_no_network_namespace() -> None:
    res = run_python("import _socket\ns = _socket.socket()\ns.connect(('1.1.1.1', 80))\n", FAST)
    assert res.status == "failed" and res.network_isolated
    assert "unreachable" in res.stderr_tail.lower() or "errno" in res.stderr_tail.lower()


def test_memory_and_file_size_limits() -> None:
    res = run_python("x = bytearray(4 * 1024 ** 3)\n", Limits(timeout_s=5, memory_mb=512))
    assert res.status == "failed" and "MemoryError" in res.stderr_tail
    res = run_python("open('big', 'wb').write(b'0' * (4 * 1024 * 1024))\n", Limits(timeout_s=5, fsize_mb=1))
    assert not res.passed


def test_runs_isolated_in_a_temp_dir() -> None:
    res = run_python("import os, sys\nassert os.getcwd().split(os.sep)[-1].startswith('evalsbx-')\n"
                     "assert sys.flags.isolated == 1\nassert 'PYTHONPATH' not in os.environ\n", FAST)
    assert res.passed, res.stderr_tail
