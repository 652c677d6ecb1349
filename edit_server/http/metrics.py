"""Prometheus text-format metrics for `edit-server http` (pure: no aiohttp, no prometheus_client).

``Registry.render()`` is the ``/metrics`` body (text exposition format 0.0.4). The HTTP middleware counts
requests by route and status and times them; :class:`MeteredEngine` wraps the engine the worker calls
(``EngineAPI.complete``) to record batch sizes, tokens per forward, generated tokens and engine time —
the numbers that show whether requests from many editors are being batched. Labels carry route
templates, status codes and key *names*, never request text or keys.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from engine.api import Call
from engine.types import GenerateResult

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
TPF_BUCKETS = (0.5, 1, 1.5, 2, 3, 4, 6, 8, 12, 16, 32)

Labels = tuple[tuple[str, str], ...]


def _fmt_labels(labels: Labels, extra: tuple[str, str] | None = None) -> str:
    items = [*labels, *([extra] if extra else [])]
    if not items:
        return ""
    esc = (v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"') for _, v in items)
    return "{" + ",".join(f'{k}="{v}"' for (k, _), v in zip(items, esc, strict=True)) + "}"


def _num(v: float) -> str:
    if v == float("inf"):
        return "+Inf"
    return repr(int(v)) if float(v).is_integer() else repr(float(v))


class Counter:
    def __init__(self, name: str, help_: str, kind: str = "counter") -> None:
        self.name, self.help, self.kind = name, help_, kind
        self.values: dict[Labels, float] = {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        self.values[key] = self.values.get(key, 0.0) + amount

    def set(self, value: float, **labels: str) -> None:
        self.values[tuple(sorted(labels.items()))] = value

    def lines(self) -> list[str]:
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        out += [f"{self.name}{_fmt_labels(k)} {_num(v)}" for k, v in sorted(self.values.items())]
        return out


class Histogram:
    def __init__(self, name: str, help_: str, buckets: Sequence[float]) -> None:
        self.name, self.help, self.buckets = name, help_, tuple(buckets)
        self.data: dict[Labels, list[float]] = {}  # per label set: bucket counts…, +Inf, sum

    def observe(self, value: float, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        d = self.data.setdefault(key, [0.0] * (len(self.buckets) + 2))
        for i, b in enumerate(self.buckets):
            if value <= b:
                d[i] += 1
        d[-2] += 1
        d[-1] += value

    def lines(self) -> list[str]:
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        for key, d in sorted(self.data.items()):
            for b, c in zip((*self.buckets, float("inf")), d[:-1], strict=True):
                out.append(f"{self.name}_bucket{_fmt_labels(key, ('le', _num(b)))} {_num(c)}")
            out.append(f"{self.name}_sum{_fmt_labels(key)} {_num(d[-1])}")
            out.append(f"{self.name}_count{_fmt_labels(key)} {_num(d[-2])}")
        return out


class Registry:
    """The server's metrics; every method is thread-safe (the worker thread records engine numbers)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = Counter("edit_server_http_requests_total", "HTTP requests by route and status")
        self.user_requests = Counter("edit_server_http_user_requests_total",
                                     "completion requests by user (key name or client address class)")
        self.limited = Counter("edit_server_http_rate_limited_total", "requests refused with 429 by user")
        self.latency = Histogram("edit_server_http_request_duration_seconds",
                                 "HTTP request latency by route (streams: until the last event)",
                                 LATENCY_BUCKETS)
        self.batch = Histogram("edit_server_engine_batch_size", "requests per engine call (batched forward)",
                               BATCH_BUCKETS)
        self.tpf = Histogram("edit_server_engine_tokens_per_forward",
                             "generated tokens per denoising step, per request", TPF_BUCKETS)
        self.engine_s = Histogram("edit_server_engine_call_duration_seconds", "engine call (whole batch) time",
                                  LATENCY_BUCKETS)
        self.tokens = Counter("edit_server_engine_generated_tokens_total", "tokens generated")
        self.prompt_tokens = Counter("edit_server_engine_prompt_tokens_total", "prompt tokens (cached or not)")
        self.cached_tokens = Counter("edit_server_engine_cached_prompt_tokens_total",
                                     "prompt tokens whose KV came from the prefix cache")
        self.forwards = Counter("edit_server_engine_forwards_total", "model forwards (prefill included)")
        self.steps = Counter("edit_server_engine_steps_total", "denoising steps")
        self.gauges: list[tuple[str, str, Callable[[], float]]] = []

    def gauge(self, name: str, help_: str, fn: Callable[[], float]) -> None:
        self.gauges.append((name, help_, fn))

    def request(self, route: str, status: int, seconds: float) -> None:
        with self.lock:
            self.requests.inc(route=route, status=str(status))
            self.latency.observe(seconds, route=route)

    def user(self, user: str, limited: bool = False) -> None:
        with self.lock:
            (self.limited if limited else self.user_requests).inc(user=user)

    def engine_call(self, batch: int, results: Sequence[GenerateResult], seconds: float) -> None:
        with self.lock:
            self.batch.observe(batch)
            self.engine_s.observe(seconds)
            for r in results:
                if r.finish_reason == "aborted":
                    continue
                self.tpf.observe(len(r.tokens) / max(1, r.steps))
                self.tokens.inc(len(r.tokens))
                self.prompt_tokens.inc(r.prompt_tokens)
                self.cached_tokens.inc(r.cached_tokens)
                self.forwards.inc(r.forwards)
                self.steps.inc(r.steps)

    def render(self) -> str:
        with self.lock:
            out: list[str] = []
            for m in (self.requests, self.latency, self.user_requests, self.limited, self.batch, self.tpf,
                      self.engine_s, self.tokens, self.prompt_tokens, self.cached_tokens, self.forwards,
                      self.steps):
                out += m.lines()
            for name, help_, fn in self.gauges:
                out += [f"# HELP {name} {help_}", f"# TYPE {name} gauge", f"{name} {_num(float(fn()))}"]
        return "\n".join(out) + "\n"


class MeteredEngine:
    """The engine with every ``complete`` call measured; everything else is the wrapped engine's."""

    def __init__(self, engine: Any, registry: Registry) -> None:
        self._engine = engine
        self._registry = registry
        self.running = 0  # requests in the engine call under way (for the queue-depth gauge)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def complete(self, calls: Sequence[Call]) -> list[GenerateResult]:
        self.running = len(calls)
        t0 = time.perf_counter()
        try:
            results = self._engine.complete(calls)
        finally:
            self.running = 0
        self._registry.engine_call(len(calls), results, time.perf_counter() - t0)
        return results


def parse_text(text: str) -> dict[str, float]:
    """``/metrics`` text → ``{'name{labels}': value}`` (for the load test and tests)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value.replace("+Inf", "inf"))
    return out
