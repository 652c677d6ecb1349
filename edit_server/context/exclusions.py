"""The one gate for what may enter a prompt: files (ignored, binary, large, outside roots, secret)
and lines (secrets are redacted — ``secrets.py`` — also in the current file's window and in diffs).

Ignore rules are git's own (``git check-ignore`` / ``git ls-files --exclude-standard``), so nested
.gitignore files, negations and ``.git/info/exclude`` behave exactly as in git; git runs hardened
(``safegit.py``: no program named by the repository's config is ever executed). Fail closed: a path
that cannot be checked (a NUL byte, an unreadable file) is excluded, with the reason.
"""

from __future__ import annotations

import fnmatch
import logging
import threading
from collections.abc import Sequence
from pathlib import Path

from edit_server.context.safegit import GitError, SafeGit
from edit_server.context.secrets import (
    REDACTED,
    is_secret_line,
    redact,
    redact_line,
    redact_window,
    split_redacted,
)

log = logging.getLogger(__name__)
__all__ = ["MAX_FILE_BYTES", "REDACTED", "SECRET_DIRS", "SECRET_FILE_GLOBS", "Exclusions", "is_secret_line",
           "redact", "redact_line", "split_redacted"]

MAX_FILE_BYTES = 1_000_000

SECRET_FILE_GLOBS: tuple[str, ...] = (
    ".env", ".env.*", "*.env", "*.pem", "*.key", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*",
    "*.p12", "*.pfx", "*.jks", "*.keystore", ".netrc", "_netrc", ".npmrc", ".pypirc", ".pgpass",
    ".htpasswd", "credentials*.json", "credentials", ".git-credentials", "*.kdbx", "secrets.*",
    "service-account*.json", ".dockercfg",
)
SECRET_DIRS = frozenset({".git", ".ssh", ".aws", ".gnupg", ".docker", ".kube"})


class Exclusions:
    """Decides whether a file may be read into a prompt; remembers the answers and the reasons."""

    def __init__(self, roots: Sequence[Path], extra_globs: Sequence[str] = (), *,
                 max_line: int | None = None, removed: Sequence[Path] = ()) -> None:
        self.roots = [Path(r).resolve() for r in roots]  # callers pass checked roots (builder.py)
        self.removed = [Path(r) for r in removed if Path(r) not in self.roots]  # folders the editor closed
        self.extra_globs = tuple(extra_globs)
        self.max_line = max_line
        self._cache: dict[str, str | None] = {}
        self._repos: dict[Path, SafeGit | None] = {}
        self._lock = threading.Lock()
        self.excluded: dict[str, str] = {}  # path -> reason, every exclusion so far
        self._local = threading.local()

    # ---- roots / git -------------------------------------------------------------------
    def root_of(self, path: Path) -> Path | None:
        """The workspace root containing ``path`` after resolving symlinks (None: outside)."""
        try:
            real = path.resolve()
        except (OSError, RuntimeError, ValueError):  # ValueError: a NUL byte in the path
            return None
        for root in self.roots:
            if real == root or root in real.parents:
                return root
        return None

    def repo(self, root: Path) -> SafeGit | None:
        with self._lock:
            if root not in self._repos:  # not a repository (or git missing): no ignore rules
                self._repos[root] = SafeGit.discover(root)
            return self._repos[root]

    def _git_ignored(self, path: Path, root: Path) -> bool:
        repo = self.repo(root)
        if repo is None:
            return False
        try:
            return repo.status("check-ignore", "-q", "--", str(path)) == 0
        except GitError:  # 128: outside the repository, a timeout: git has no say
            return False

    # ---- checks ------------------------------------------------------------------------
    def name_reason(self, path: Path) -> str | None:
        """Reason from the name alone (secret file, user exclude glob), or None."""
        name = path.name
        for glob in SECRET_FILE_GLOBS:
            if fnmatch.fnmatch(name, glob):
                return f"secret file ({glob})"
        if SECRET_DIRS.intersection(path.parts[:-1]):
            return "secret directory"
        posix = path.as_posix()
        for glob in self.extra_globs:
            if fnmatch.fnmatch(posix, glob) or fnmatch.fnmatch(name, glob) or \
                    fnmatch.fnmatch(posix, f"*/{glob}"):
                return f"excluded by option ({glob})"
        return None

    def reason(self, path: str | Path, *, check_content: bool = True, text: str | None = None,
               assume_not_ignored: bool = False) -> str | None:
        """Why ``path`` must not enter a prompt, or None when it may. Cached per path."""
        key = str(path)
        if key in self._cache:
            r = self._cache[key]
        else:
            try:
                r = self._reason(Path(path), check_content, text, assume_not_ignored)
            except Exception as e:  # fail closed: what cannot be checked is not sent
                r = f"unusable path ({type(e).__name__})"
            self._cache[key] = r
        if r:
            self.excluded[key] = r
            seen = getattr(self._local, "seen", None)
            if seen is not None:
                seen[key] = r
        return r

    def start_recording(self) -> None:
        """Record, for this thread, the exclusions hit until ``stop_recording`` (per-build report)."""
        self._local.seen = {}

    def stop_recording(self) -> dict[str, str]:
        seen, self._local.seen = getattr(self._local, "seen", None) or {}, None
        return seen

    def _reason(self, p: Path, check_content: bool, text: str | None, assume_not_ignored: bool) -> str | None:
        root = self.root_of(p)
        if root is None and self.roots:
            return "outside the workspace roots"
        if root is None and self.removed:
            real = p.resolve()
            if any(real == r or r in real.parents for r in self.removed):
                return "in a removed workspace folder"
        r = self.name_reason(p.resolve()) or self.name_reason(p)
        if r:
            return r
        if check_content and text is None and p.exists():
            try:
                size = p.stat().st_size
                if size > MAX_FILE_BYTES:
                    return f"larger than {MAX_FILE_BYTES // 1_000_000} MB"
                with open(p, "rb") as f:
                    head = f.read(8192)
                if b"\0" in head:
                    return "binary"
            except OSError as e:
                return f"unreadable ({e.strerror})"
        if text is not None and (len(text) > MAX_FILE_BYTES or "\0" in text[:8192]):
            return "binary or larger than 1 MB"
        if root is not None and not assume_not_ignored and self._git_ignored(p.resolve(), root):
            return "ignored by git"
        return None

    def allowed(self, path: str | Path, **kw: object) -> bool:
        return self.reason(path, **kw) is None  # type: ignore[arg-type]

    def forget(self, path: str | Path) -> None:
        self._cache.pop(str(path), None)

    def read(self, path: Path, head: int | None = None) -> str | None:
        """The text (its first ``head`` lines) of an allowed file, redacted, or None."""
        if not self.allowed(path):
            return None
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except (OSError, ValueError):
            return None
        if head is not None:
            lines = text.splitlines(keepends=True)
            return "".join(redact_window(lines, 0, min(head, len(lines)), str(path), self.max_line))
        return redact(text, str(path), self.max_line)

    def set_globs(self, extra_globs: Sequence[str]) -> None:
        """New user exclude globs: every cached answer is dropped."""
        with self._lock:
            self.extra_globs = tuple(extra_globs)
            self._cache = {}
            self.excluded = {}

    def workspace_files(self, root: Path) -> list[Path]:
        """Files under ``root`` that git does not ignore (tracked + untracked), or a walk."""
        repo = self.repo(root)
        if repo is not None:
            try:
                out = repo.run("ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", str(root))
                return [repo.top / f for f in out.split("\0") if f]
            except GitError as e:
                log.warning("git ls-files failed in %s: %s", root, e)
        files = []
        for p in root.rglob("*"):
            if p.is_file() and not SECRET_DIRS.intersection(p.relative_to(root).parts) and \
                    "node_modules" not in p.parts:
                files.append(p)
        return files
