"""Run untrusted generated code: temp dir, ``python -I``, rlimits, no network, a wall-clock timeout.

Layers (all applied when available):
* a fresh temporary working directory (deleted afterwards) and a minimal environment;
* ``python -I`` (isolated: no user site, no PYTHON* variables, script dir not on sys.path);
* ``setrlimit`` CPU / AS (address space) / NPROC / FSIZE / CORE by a tiny launcher that then execs;
* a preamble that replaces ``socket.socket`` and friends with versions that raise;
* ``unshare -n`` (an empty network namespace) when the kernel lets us;
* the process group is killed when the wall-clock timeout passes.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass

PREAMBLE = '''\
import socket as _sb_socket
class _SbBlockedSocket(_sb_socket.socket):
    def __init__(self, *a, **k):
        raise PermissionError("network access is disabled in the eval sandbox")
def _sb_blocked(*a, **k):
    raise PermissionError("network access is disabled in the eval sandbox")
_sb_socket.socket = _SbBlockedSocket
_sb_socket.create_connection = _sb_blocked
_sb_socket.socketpair = _sb_blocked
_sb_socket.fromfd = _sb_blocked
del _sb_socket
'''


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 10.0  # wall clock
    cpu_s: int = 10
    memory_mb: int = 2048  # RLIMIT_AS
    nproc_extra: int = 16  # processes beyond what the user already runs (not enforced for root)
    fsize_mb: int = 16


@dataclass(frozen=True)
class SandboxResult:
    status: str  # "passed" | "failed" | "timeout" | "error"
    returncode: int | None
    stderr_tail: str
    network_isolated: bool  # unshare -n was used

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@functools.lru_cache(maxsize=1)
def unshare_prefix() -> tuple[str, ...]:
    """``("unshare", "-n")`` / ``("unshare", "-rn")`` if this kernel lets us, else ``()``."""
    exe = shutil.which("unshare")
    if not exe:
        return ()
    for flags in (("-n",), ("-rn",)):
        try:
            r = subprocess.run([exe, *flags, "true"], capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0:
            return (exe, *flags)
    return ()


def _user_processes() -> int:
    uid = os.getuid()
    n = 0
    try:
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    if os.stat(f"/proc/{pid}").st_uid == uid:
                        n += 1
                except OSError:
                    pass
    except OSError:
        return 256
    return n


# Sets the rlimits, then execs the real command: no preexec_fn (unsafe with the checker's threads).
LAUNCHER = """import os, resource, sys
args = sys.argv[1:]
cut = args.index("--")
for spec in args[:cut]:
    name, soft, hard = spec.split(":")
    resource.setrlimit(getattr(resource, name), (int(soft), int(hard)))
os.execvp(args[cut + 1], args[cut + 1:])
"""


def _limit_args(limits: Limits, nproc: int) -> list[str]:
    mb = 1024 * 1024
    return [f"RLIMIT_CPU:{limits.cpu_s}:{limits.cpu_s + 1}",
            f"RLIMIT_AS:{limits.memory_mb * mb}:{limits.memory_mb * mb}",
            f"RLIMIT_FSIZE:{limits.fsize_mb * mb}:{limits.fsize_mb * mb}",
            "RLIMIT_CORE:0:0", f"RLIMIT_NPROC:{nproc}:{nproc}"]


def run_python(source: str, limits: Limits | None = None, *, network: bool = False) -> SandboxResult:
    """Run ``source`` (a whole program) in the sandbox; ``passed`` iff it exits 0 in time."""
    limits = limits or Limits()
    prefix = () if network else unshare_prefix()
    program = source if network else PREAMBLE + source
    with tempfile.TemporaryDirectory(prefix="evalsbx-") as tmp:
        script = os.path.join(tmp, "program.py")
        with open(script, "w", encoding="utf-8") as f:
            f.write(program)
        env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "TMPDIR": tmp, "LANG": "C.UTF-8",
               "PYTHONHASHSEED": "0"}
        nproc = _user_processes() + limits.nproc_extra
        cmd = [sys.executable, "-I", "-S", "-c", LAUNCHER, *_limit_args(limits, nproc), "--",
               *prefix, sys.executable, "-I", "-B", script]
        try:
            proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    start_new_session=True)
        except OSError as e:
            return SandboxResult("error", None, f"could not start sandbox: {e}", bool(prefix))
        try:
            _, err = proc.communicate(timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            _, err = proc.communicate()
            return SandboxResult("timeout", None, _tail(err), bool(prefix))
        _kill_group(proc)  # leftovers the program forked
        rc = proc.returncode
        if rc == 0:
            return SandboxResult("passed", 0, _tail(err), bool(prefix))
        # killed by RLIMIT_CPU (SIGXCPU / SIGKILL) counts as a timeout
        status = "timeout" if rc in (-signal.SIGXCPU, -signal.SIGKILL) else "failed"
        return SandboxResult(status, rc, _tail(err), bool(prefix))


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(err: bytes | None, n: int = 2000) -> str:
    return (err or b"")[-n:].decode("utf-8", "replace")
