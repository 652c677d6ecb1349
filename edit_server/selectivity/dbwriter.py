"""One thread owns the feedback store's sqlite connection: the event loop never waits on disk.

Writes are queued (bounded) and committed in order by the writer thread; each returns a Future that
completes once its transaction is committed — the accept command answers the client only then, so an
acknowledged event is on disk (kill -9 after the reply loses nothing). Reads run on the same thread,
after every write queued before them.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")
QUEUE_LIMIT = 10_000


class DbWriter:
    def __init__(self, connect: Callable[[], sqlite3.Connection]) -> None:
        self._q: queue.Queue[tuple[Callable[[sqlite3.Connection], Any], Future] | None] = queue.Queue(QUEUE_LIMIT)
        ready: Future = Future()
        self._thread = threading.Thread(target=self._run, args=(connect, ready), name="feedback-db", daemon=True)
        self._thread.start()
        ready.result()  # a store that cannot be opened fails here, in the caller's thread

    def _run(self, connect: Callable[[], sqlite3.Connection], ready: Future) -> None:
        try:
            db = connect()
        except Exception as e:
            ready.set_exception(e)
            return
        ready.set_result(None)
        while (item := self._q.get()) is not None:
            fn, fut = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(db))
            except Exception as e:  # a failed write is logged, never raised into the event loop
                log.warning("feedback store: %s", e)
                fut.set_exception(e)
        db.close()

    def call(self, fn: Callable[[sqlite3.Connection], T]) -> Future:
        """Run ``fn(connection)`` on the writer thread after everything queued before it."""
        fut: Future = Future()
        try:  # never waits: the caller is the event loop (a full queue means the disk is stuck)
            self._q.put_nowait((fn, fut))
        except queue.Full:
            log.error("feedback store: %d writes queued (the disk is stuck?); event dropped", QUEUE_LIMIT)
            fut.set_exception(RuntimeError("feedback store queue full"))
        return fut

    def write(self, sql: str, params: tuple = ()) -> Future:
        def run(db: sqlite3.Connection) -> None:
            db.execute(sql, params)
            db.commit()

        return self.call(run)

    def read(self, fn: Callable[[sqlite3.Connection], T], timeout: float | None = 30.0) -> T:
        return self.call(fn).result(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Commit what is queued, then close the connection."""
        try:
            self._q.put(None, timeout=timeout)
        except queue.Full:
            log.error("feedback store: could not stop the writer (queue full)")
        self._thread.join(timeout)
