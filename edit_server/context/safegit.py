"""Run git in a repository we do not trust: never execute a program the repository's config names.

A workspace may hold a hostile ``.git/config`` (a downloaded archive, a colleague's checkout). Every
command here runs with:

* ``GIT_CONFIG_NOSYSTEM=1``, no pager (``--no-pager``, ``GIT_PAGER=cat``), no prompts, no optional
  index writes (``GIT_OPTIONAL_LOCKS=0``), ``core.hooksPath=/dev/null``;
* ``core.fsmonitor=false`` (a hook run by every index refresh), ``log.showSignature=false`` (gpg),
  ``diff.external=`` and ``--no-ext-diff --no-textconv`` on diffs, ``--ignore-submodules``;
* every ``filter.<driver>.{clean,smudge,process}`` the config defines set to nothing (clean filters
  run when git hashes a modified file, e.g. for ``git diff HEAD``), ``filter.<driver>.required=false``;
* a timeout (the process is killed).

Reading the config (``git config --list``) runs nothing. ``safe.directory`` refusals, timeouts and
errors raise ``GitError``; callers treat them as "no git context".
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from pathlib import Path

TIMEOUT_S = 10.0
_FILTER_KEY = re.compile(r"^filter\.(.+)\.(clean|smudge|process|required)$")
_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_PAGER": "cat", "PAGER": "cat", "GIT_TERMINAL_PROMPT": "0",
        "GIT_OPTIONAL_LOCKS": "0", "GIT_ASKPASS": "", "SSH_ASKPASS": "", "GIT_EXTERNAL_DIFF": "",
        "GIT_EDITOR": "true", "LC_ALL": "C"}
_DROP_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS",
             "GIT_CONFIG_COUNT", "GIT_EXEC_PATH")
_BASE = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "log.showSignature=false",
         "-c", "diff.external=", "-c", "core.pager=cat", "-c", "core.untrackedCache=false",
         "-c", "protocol.allow=never")


class GitError(RuntimeError):
    def __init__(self, message: str, returncode: int | None = None) -> None:
        super().__init__(message)
        self.returncode = returncode


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROP_ENV and not k.startswith("GIT_TRACE")}
    env.update(_ENV)
    return env


class SafeGit:
    """git in one working tree (``top``), hardened as described above."""

    def __init__(self, top: Path, timeout: float = TIMEOUT_S) -> None:
        self.top = Path(top)
        self.working_tree_dir = str(self.top)
        self.timeout = timeout
        self._filters: tuple[str, ...] | None = None
        self._lock = threading.Lock()

    @classmethod
    def discover(cls, path: Path, timeout: float = TIMEOUT_S) -> SafeGit | None:
        """The repository containing ``path`` (a directory), or None."""
        try:
            out = _run(Path(path), ["rev-parse", "--show-toplevel"], _BASE, timeout)
        except GitError:
            return None
        top = out.strip()
        return cls(Path(top), timeout) if top else None

    def _filter_overrides(self) -> tuple[str, ...]:
        with self._lock:
            if self._filters is None:
                try:
                    out = _run(self.top, ["config", "--list", "-z"], _BASE, self.timeout)
                except GitError:
                    out = ""
                names = {m.group(1) for item in out.split("\0") if (m := _FILTER_KEY.match(item.split("\n")[0]))}
                args: list[str] = []
                for n in sorted(names):
                    for k in ("clean", "smudge", "process"):
                        args += ["-c", f"filter.{n}.{k}="]
                    args += ["-c", f"filter.{n}.required=false"]
                self._filters = tuple(args)
            return self._filters

    def run(self, *args: str) -> str:
        """stdout of ``git <args>`` (text), or GitError."""
        return _run(self.top, list(args), _BASE + self._filter_overrides(), self.timeout)

    def status(self, *args: str) -> int:
        """Exit status of ``git <args>`` when it is 0 or 1 (``check-ignore``: 1 = not ignored); other
        exits, timeouts and errors raise GitError."""
        try:
            _run(self.top, list(args), _BASE + self._filter_overrides(), self.timeout)
            return 0
        except GitError as e:
            if e.returncode == 1:
                return 1
            raise

    def refresh_config(self) -> None:
        """Re-read the filter drivers (the config may have changed)."""
        with self._lock:
            self._filters = None


def _run(cwd: Path, args: list[str], opts: tuple[str, ...], timeout: float) -> str:
    if args and args[0] == "diff":
        args = ["diff", "--no-ext-diff", "--no-textconv", "--ignore-submodules=all", *args[1:]]
    elif args and args[0] == "log":
        args = ["log", "--no-show-signature", "--no-ext-diff", "--no-textconv", *args[1:]]
    cmd = ["git", "--no-pager", "--no-optional-locks", *opts, *args]
    try:
        res = subprocess.run(cmd, cwd=cwd, env=_env(), stdin=subprocess.DEVNULL, capture_output=True,
                             timeout=timeout, check=False)
    except subprocess.TimeoutExpired as e:
        raise GitError(f"git {args[0]} timed out after {timeout:.0f} s") from e
    except (OSError, ValueError) as e:  # git missing, cwd gone, NUL in a path
        raise GitError(f"git {args[0] if args else ''} failed: {e}") from e
    if res.returncode != 0:
        raise GitError(f"git {args[0]} exited {res.returncode}: "
                       f"{res.stderr.decode('utf-8', 'replace').strip()[:200]}", res.returncode)
    return res.stdout.decode("utf-8", "replace")
