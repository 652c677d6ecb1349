"""Bearer keys and per-user rate limits for `edit-server http` as a team server (pure; no aiohttp).

Keys come from ``http.apiKeys``, ``http.apiKeyFile`` (re-read when its modification time changes) and the
``EDIT_SERVER_HTTP_TOKEN`` environment variable. Each entry is ``KEY`` or ``NAME:KEY``; NAME (else
``key1``, ``key2``, … in order, ``token`` for the environment variable) is the user's label in logs and
``/metrics`` — a key itself is never logged or exported. Lookups compare in constant time against every
key. Rate limits are token buckets per user (per client address when no keys are configured).
"""

from __future__ import annotations

import hmac
import logging
import math
import os
import threading
import time
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


def parse_entries(lines: list[str], prefix: str = "key") -> dict[str, str]:
    """``["alice:s3cret", "t0k"]`` → ``{"s3cret": "alice", "t0k": "key2"}`` (blank and ``#`` lines skipped)."""
    out: dict[str, str] = {}
    n = 0
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        n += 1
        name, sep, key = line.partition(":")
        if not sep or not key.strip() or not name.strip():
            name, key = f"{prefix}{n}", line
        out[key.strip()] = name.strip()
    return out


class KeyRing:
    """Which user a bearer key belongs to; ``required`` is False when no key is configured at all."""

    def __init__(self, keys: list[str] | None = None, key_file: str = "", token: str | None = None) -> None:
        self._static = parse_entries(list(keys or []))
        if token:
            self._static[token] = "token"
        self._file = key_file
        self._file_keys: dict[str, str] = {}
        self._mtime: float | None = None
        self._checked = 0.0
        self._lock = threading.Lock()
        self._reload(force=True)

    def _reload(self, force: bool = False) -> None:
        if not self._file:
            return
        now = time.monotonic()
        if not force and now - self._checked < 1.0:  # stat at most once a second
            return
        self._checked = now
        try:
            mtime = os.stat(self._file).st_mtime
            if mtime == self._mtime and not force:
                return
            with open(self._file, encoding="utf-8") as f:
                keys = parse_entries(f.read().splitlines(), prefix="file-key")
        except OSError as e:  # keep the last good keys: a half-written file must not open the server
            if force:
                log.error("api key file %s unreadable (%s): no key from it is accepted", self._file, e)
            return
        self._file_keys, self._mtime = keys, mtime
        log.info("api key file: %d keys", len(keys))

    @property
    def required(self) -> bool:
        with self._lock:
            self._reload()
            return bool(self._static or self._file_keys or self._file)

    def user(self, authorization: str) -> str | None:
        """The user for an ``Authorization: Bearer KEY`` header value (None: missing or unknown key)."""
        given = authorization[7:].strip() if authorization[:7].lower() == "bearer " else ""
        with self._lock:
            self._reload()
            keys = {**self._static, **self._file_keys}
        found = None
        for key, name in keys.items():  # compare with every key: the time does not tell which one matched
            if hmac.compare_digest(given.encode(), key.encode()) and given:
                found = name
        return found


@dataclass
class _Bucket:
    tokens: float
    stamp: float


@dataclass
class RateLimiter:
    """Token buckets: ``per_minute`` refill, ``burst`` size (0 = one minute's worth); 0 per minute = off."""

    per_minute: int = 0
    burst: int = 0
    _buckets: dict[str, _Bucket] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def configure(self, per_minute: int, burst: int) -> None:
        with self._lock:
            if (per_minute, burst) != (self.per_minute, self.burst):
                self.per_minute, self.burst = per_minute, burst
                self._buckets.clear()

    def take(self, user: str, now: float | None = None) -> float:
        """Spend one request for ``user``: 0.0 when allowed, else the seconds until one is (Retry-After)."""
        if self.per_minute <= 0:
            return 0.0
        now = time.monotonic() if now is None else now
        size = float(self.burst or self.per_minute)
        rate = self.per_minute / 60.0
        with self._lock:
            b = self._buckets.get(user)
            if b is None:
                b = self._buckets[user] = _Bucket(size, now)
            b.tokens = min(size, b.tokens + (now - b.stamp) * rate)
            b.stamp = now
            if b.tokens >= 1.0:
                b.tokens -= 1.0
                return 0.0
            if len(self._buckets) > 10_000:  # forget full buckets of idle users (many addresses)
                self._buckets = {u: x for u, x in self._buckets.items() if x.tokens < size}
            return (1.0 - b.tokens) / rate


def retry_after(seconds: float) -> str:
    """A Retry-After header value: whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))
