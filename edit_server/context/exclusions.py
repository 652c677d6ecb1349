"""The one gate for what may enter a prompt: files (ignored, binary, large, outside roots, secret)
and lines (secrets are redacted, also in the current file's window and in diffs).

Ignore rules are git's own: ``git check-ignore`` / ``git ls-files --exclude-standard`` through
gitpython, so nested .gitignore files, negations and ``.git/info/exclude`` behave exactly as in git.
"""

from __future__ import annotations

import fnmatch
import logging
import re
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 1_000_000
REDACTED = "[REDACTED]"

SECRET_FILE_GLOBS: tuple[str, ...] = (
    ".env", ".env.*", "*.env", "*.pem", "*.key", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*",
    "*.p12", "*.pfx", "*.jks", "*.keystore", ".netrc", "_netrc", ".npmrc", ".pypirc", ".pgpass",
    ".htpasswd", "credentials*.json", "credentials", ".git-credentials", "*.kdbx", "secrets.*",
    "service-account*.json", ".dockercfg",
)
SECRET_DIRS = frozenset({".git", ".ssh", ".aws", ".gnupg", ".docker", ".kube"})

SECRET_LINE = re.compile(
    r"-----(BEGIN|END) [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----"
    r"|\b(AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b"  # AWS access key id
    r"|aws_secret_access_key"
    r"|\bAIza[0-9A-Za-z_\-]{35}"  # GCP API key
    r"|\"private_key(_id)?\"\s*:"  # GCP service-account JSON
    r"|\bgh[pousr]_[A-Za-z0-9]{30,}|\bgithub_pat_[A-Za-z0-9_]{20,}"  # GitHub
    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}|hooks\.slack\.com/services/"  # Slack
    r"|\bsk-(proj-|ant-)?[A-Za-z0-9_\-]{20,}"  # OpenAI / Anthropic style
    r"|\bglpat-[A-Za-z0-9_\-]{20,}|\bnpm_[A-Za-z0-9]{36}"  # GitLab / npm
    r"|\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\."  # JWT
    r"|(?i:\bbearer\s+[A-Za-z0-9._~+/-]{20,})"
    r"|(?i:(pass(word|wd)?|secret|api[_-]?key|access[_-]?key|auth[_-]?token|access[_-]?token"
    r"|private[_-]?key|client[_-]?secret|credentials?)[\"']?\s*[:=]\s*[\"'][^\"'\s]{3,}[\"'])"
    r"|^[+\- ]?\s*[A-Za-z0-9+/]{40,}={0,2}\s*$"  # base64 key material (PEM bodies; also in diffs)
)


def is_secret_line(line: str) -> bool:
    return SECRET_LINE.search(line) is not None


def redact_line(line: str) -> str:
    if not is_secret_line(line):
        return line
    indent = line[: len(line) - len(line.lstrip())]
    nl = "\n" if line.endswith("\n") else ""
    return f"{indent}{REDACTED}{nl}"


def split_redacted(line: str, col: int) -> tuple[str, str]:
    """A line split at the cursor column, both halves redacted. A secret line is redacted whole
    (a half of a key is still a secret): the cursor then sits after the placeholder."""
    if is_secret_line(line):
        red = redact_line(line)
        nl = "\n" if red.endswith("\n") else ""
        return red[: len(red) - len(nl)], nl
    return line[:col], line[col:]


def redact(text: str) -> str:
    """``text`` with every secret-looking line replaced by ``[REDACTED]`` (indentation kept)."""
    if not SECRET_LINE.search(text):
        return text
    return "".join(redact_line(line) for line in text.splitlines(keepends=True))


def redact_lines(lines: Iterable[str], cache: dict[str, str]) -> list[str]:
    out = []
    for line in lines:
        r = cache.get(line)
        if r is None:
            r = cache[line] = redact_line(line)
        out.append(r)
    return out


class Exclusions:
    """Decides whether a file may be read into a prompt; remembers the answers and the reasons."""

    def __init__(self, roots: Sequence[Path], extra_globs: Sequence[str] = ()) -> None:
        self.roots = [Path(r).resolve() for r in roots]
        self.extra_globs = tuple(extra_globs)
        self._cache: dict[str, str | None] = {}
        self._repos: dict[Path, object | None] = {}
        self._lock = threading.Lock()
        self.excluded: dict[str, str] = {}  # path -> reason, every exclusion so far
        self._local = threading.local()

    # ---- roots / git -------------------------------------------------------------------
    def root_of(self, path: Path) -> Path | None:
        """The workspace root containing ``path`` after resolving symlinks (None: outside)."""
        try:
            real = path.resolve()
        except (OSError, RuntimeError):
            return None
        for root in self.roots:
            if real == root or root in real.parents:
                return root
        return None

    def repo(self, root: Path):  # -> git.Repo | None
        with self._lock:
            if root not in self._repos:
                try:
                    import git

                    self._repos[root] = git.Repo(root, search_parent_directories=True)
                except Exception:  # not a repository (or git missing): no ignore rules
                    self._repos[root] = None
            return self._repos[root]

    def _git_ignored(self, path: Path, root: Path) -> bool:
        repo = self.repo(root)
        if repo is None:
            return False
        try:
            repo.git.check_ignore("-q", "--", str(path))
            return True
        except Exception:  # exit 1: not ignored; 128: outside the repo / error
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
            r = self._cache[key] = self._reason(Path(path), check_content, text, assume_not_ignored)
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

    def read(self, path: Path) -> str | None:
        """The text of an allowed file (redacted), or None."""
        if not self.allowed(path):
            return None
        try:
            return redact(path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            return None

    def workspace_files(self, root: Path) -> list[Path]:
        """Files under ``root`` that git does not ignore (tracked + untracked), or a walk."""
        repo = self.repo(root)
        if repo is not None:
            try:
                out = repo.git.ls_files("--cached", "--others", "--exclude-standard", "-z", "--", str(root))
                base = Path(repo.working_tree_dir)
                return [base / f for f in out.split("\0") if f]
            except Exception as e:
                log.warning("git ls-files failed in %s: %s", root, e)
        files = []
        for p in root.rglob("*"):
            if p.is_file() and not SECRET_DIRS.intersection(p.relative_to(root).parts) and \
                    "node_modules" not in p.parts:
                files.append(p)
        return files
