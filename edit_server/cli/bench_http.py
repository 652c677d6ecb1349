"""`edit-server bench http`: N simulated editors typing against one `edit-server http` server.

Each editor owns a file of its own (different users, different files: no shared prefix cache) and types
a function body one character at a time; after every keystroke it asks for a suggestion at the cursor
and waits for the answer (one request in flight per editor, as Zed and Continue do), then pauses
``--think-ms`` before the next keystroke. For each N the editors type together for ``--duration``
seconds; the table gives the client-side latency (p50 / p95), the completed requests per second, and —
from the server's ``/metrics`` — how many requests each engine call batched and tokens per forward.

The server is in-process (an aiohttp site on a free loopback port, the same app `edit-server http`
runs), a subprocess (``--spawn``: the real CLI), or any running server (``--url``, ``--key``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import socket
import subprocess
import sys
import time
from typing import Any

ROUTES = ("fim", "edit", "zeta2")
TYPED = "total = 0\n    for item in items:\n        total += item.price * item.count\n    return total\n"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("http", help="N simulated editors typing against one edit-server http")
    p.add_argument("--editors", default="1,2,4,8", help="editor counts, comma-separated (default: %(default)s)")
    p.add_argument("--duration", type=float, default=20.0, help="seconds of typing per editor count")
    p.add_argument("--think-ms", type=float, default=100.0, help="pause after each answer before the next key")
    p.add_argument("--route", choices=[*ROUTES, "mix"], default="fim",
                   help="fim: /v1/fim/completions; edit: /v1/edit/completions (Mercury next edit); zeta2: "
                        "Zed's /v1/completions V0131 prompt; mix: editors alternate (default: %(default)s)")
    p.add_argument("--max-tokens", type=int, default=16, help="max_tokens of FIM requests")
    p.add_argument("--model", default="tiny-random")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads of the server (0: torch's default)")
    p.add_argument("--no-gate", action="store_true", help="serve every suggestion (gate.enabled=false)")
    p.add_argument("--spawn", action="store_true", help="run the server as an `edit-server http` subprocess")
    p.add_argument("--url", default=None, help="benchmark a running server (base URL) instead")
    p.add_argument("--key", default=None, help="bearer key for --url")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


# ---- one simulated editor ---------------------------------------------------------------------------------
def source(n: int, salt: str) -> tuple[str, int]:
    """A module of its own for editor ``n`` and the offset where it types ``TYPED``."""
    head = (f'"""Orders of shop {salt}-{n}."""\n\nimport math\n\n\nclass Item{n}:\n    def __init__(self, price, count):\n'
            f"        self.price = price\n        self.count = count\n\n\ndef tax_{n}(value):\n"
            f"    return math.floor(value * 0.{n + 1}5)\n\n\ndef total_{n}(items):\n    ")
    tail = f"\n\n\ndef report_{n}(items):\n    print(total_{n}(items), tax_{n}(total_{n}(items)))\n"
    return head + tail, len(head)


def request(route: str, text: str, cursor: int, path: str, max_tokens: int) -> tuple[str, dict[str, Any]]:
    """The request an editor sends at ``cursor`` (the shapes of tests/test_http_mercury.py / _zed.py)."""
    if route == "fim":
        return "/v1/fim/completions", {"model": "bench", "prompt": text[:cursor], "suffix": text[cursor:],
                                       "max_tokens": max_tokens}
    line0 = text.rfind("\n", 0, cursor) + 1  # the region: the cursor's line and the next one
    e1 = text.find("\n", cursor)
    e2 = text.find("\n", e1 + 1) if e1 >= 0 else -1
    end = len(text) if e2 < 0 else e2 + 1
    region = text[line0:cursor] + "{CURSOR}" + text[cursor:end]
    if route == "edit":
        user = (f"<|recently_viewed_code_snippets|>\n<|/recently_viewed_code_snippets|>\n\n<|current_file_content|>\n"
                f"current_file_path: {path}\n{text[:line0]}<|code_to_edit|>\n{region.format(CURSOR='<|cursor|>')}"
                f"<|/code_to_edit|>\n{text[end:]}<|/current_file_content|>\n\n<|edit_diff_history|>\n"
                f"<|/edit_diff_history|>\n")
        return "/v1/edit/completions", {"model": "bench", "messages": [{"role": "user", "content": user}]}
    marked = region.format(CURSOR="<|user_cursor|>")
    prompt = (f"<|file_sep|>{path}\n<|fim_prefix|>{text[:line0]}<<<<<<< CURRENT\n{marked}"
              f"{'' if marked.endswith(chr(10)) else chr(10)}=======\n<|fim_suffix|>{text[end:]}<|fim_middle|>")
    return "/v1/completions", {"model": "bench", "prompt": prompt, "max_tokens": 1024, "stop": []}


async def editor(session: Any, base: str, n: int, route: str, salt: str, until: float, think: float,
                 max_tokens: int, headers: dict[str, str]) -> tuple[list[float], int]:
    """Type until ``until`` (at least one keystroke); returns (latencies in ms of answered requests,
    errors)."""
    text, cursor = source(n, salt)
    path = f"shop_{salt}_{n}.py"
    latencies: list[float] = []
    errors = 0
    k = 0
    while k == 0 or time.monotonic() < until:
        ch = TYPED[k % len(TYPED)]
        text, cursor, k = text[:cursor] + ch + text[cursor:], cursor + 1, k + 1
        url, body = request(route, text, cursor, path, max_tokens)
        t0 = time.perf_counter()
        try:
            async with session.post(base + url, json=body, headers=headers) as r:
                await r.read()
                ok = r.status == 200
        except Exception:  # a refused / reset connection counts as an error, the editor types on
            ok = False
        if ok:
            latencies.append((time.perf_counter() - t0) * 1000)
        else:
            errors += 1
        await asyncio.sleep(think / 1000)
    return latencies, errors


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


async def scrape(session: Any, base: str, headers: dict[str, str]) -> dict[str, float]:
    from edit_server.http.metrics import parse_text

    async with session.get(base + "/metrics", headers=headers) as r:
        return parse_text(await r.text()) if r.status == 200 else {}


def _who(args: argparse.Namespace, i: int, headers: dict[str, str]) -> dict[str, str]:
    keys = getattr(args, "editor_keys", None)
    return {"Authorization": f"Bearer {keys[i]}"} if keys else headers


def _delta(after: dict[str, float], before: dict[str, float], name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


async def measure(base: str, counts: list[int], args: argparse.Namespace, headers: dict[str, str]) -> list[dict[str, Any]]:
    import aiohttp

    rows = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        for n in counts:
            salt = f"n{n}"
            routes = [ROUTES[i % len(ROUTES)] if args.route == "mix" else args.route for i in range(n)]
            await asyncio.gather(*(editor(session, base, i, routes[i], salt, 0.0, 0, args.max_tokens,
                                          _who(args, i, headers)) for i in range(n)))  # warm-up: one each
            before = await scrape(session, base, headers)
            t0 = time.monotonic()
            until = t0 + args.duration
            results = await asyncio.gather(*(editor(session, base, i, routes[i], salt, until, args.think_ms,
                                                    args.max_tokens, _who(args, i, headers)) for i in range(n)))
            wall = time.monotonic() - t0
            after = await scrape(session, base, headers)
            lat = [x for r in results for x in r[0]]
            calls = _delta(after, before, "edit_server_engine_batch_size_count")
            rows.append({
                "editors": n, "requests": len(lat), "errors": sum(r[1] for r in results),
                "p50_ms": round(percentile(lat, 0.5), 1), "p95_ms": round(percentile(lat, 0.95), 1),
                "req_per_s": round(len(lat) / wall, 2), "wall_s": round(wall, 1),
                "mean_batch": round(_delta(after, before, "edit_server_engine_batch_size_sum") / calls, 2)
                if calls else None,
                "tokens_per_forward": round(_delta(after, before, "edit_server_engine_tokens_per_forward_sum")
                                            / _delta(after, before, "edit_server_engine_tokens_per_forward_count"), 2)
                if _delta(after, before, "edit_server_engine_tokens_per_forward_count") else None,
                "engine_calls": int(calls), "steps": int(_delta(after, before, "edit_server_engine_steps_total")),
            })
    return rows


# ---- the server -----------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _keys(counts: list[int]) -> list[str]:
    """One bearer key per simulated editor: a team, each user with a key of their own."""
    return [f"editor{i}:bench-key-{i}" for i in range(max(counts))]


def _settings_cli(args: argparse.Namespace, counts: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {"model": args.model, "device": args.device, "feedbackDb": ":memory:",
                           "http": {"maxQueue": 4096, "apiKeys": _keys(counts)}}
    if args.threads:
        out["threads"] = args.threads
    if args.no_gate:
        out["gate"] = {"enabled": False}
    return out


async def _wait_ready(base: str, headers: dict[str, str], timeout: float = 600.0) -> dict[str, Any]:
    import aiohttp

    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while True:
            try:
                async with session.get(base + "/health", headers=headers) as r:
                    health = await r.json()
                if health.get("status") == "ok":
                    return health
                if health.get("state") == "error":
                    raise RuntimeError(f"model failed to load: {health.get('message')}")
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("server did not become ready")
            await asyncio.sleep(0.2)


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    counts = [int(x) for x in str(args.editors).split(",") if x.strip()]
    headers = {"Authorization": f"Bearer {args.key}"} if args.key else {}
    if not args.url:  # the server is ours: every editor its own key (first one for /metrics)
        headers = {"Authorization": "Bearer bench-key-0"}
        args.editor_keys = [k.partition(":")[2] for k in _keys(counts)]
    load0 = os.getloadavg() if hasattr(os, "getloadavg") else None
    proc = runner = None
    try:
        if args.url:
            base, where = args.url.rstrip("/"), "url"
        elif args.spawn:
            port = _free_port()
            sets = [f"--set={k}={json.dumps(v)}" for k, v in _settings_cli(args, counts).items()
                    if k not in ("model", "device")]
            proc = subprocess.Popen([sys.executable, "-m", "edit_server.cli", "http", "--port", str(port),
                                     "--model", args.model, "--device", args.device, *sets],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            base, where = f"http://127.0.0.1:{port}", "subprocess"
        else:
            from aiohttp import web

            from edit_server.core.settings import build_settings
            from edit_server.http.app import make_app

            settings, bad = build_settings(None, _settings_cli(args, counts))
            if bad:
                raise ValueError("; ".join(bad))
            runner = web.AppRunner(make_app(settings))
            await runner.setup()
            port = _free_port()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            base, where = f"http://127.0.0.1:{port}", "in-process"
        health = await _wait_ready(base, headers)
        rows = await measure(base, counts, args, headers)
    finally:
        if runner is not None:
            await runner.cleanup()
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
    return {"server": where, "model": health.get("model", {}), "route": args.route, "duration_s": args.duration,
            "think_ms": args.think_ms, "max_tokens": args.max_tokens, "gate": not args.no_gate,
            "machine": {"platform": platform.platform(), "python": platform.python_version(),
                        "cpu_count": os.cpu_count(), "loadavg_start": load0,
                        "loadavg_end": os.getloadavg() if hasattr(os, "getloadavg") else None},
            "rows": rows}


def table(result: dict[str, Any]) -> str:
    m = result["model"]
    lines = [f"server {result['server']}, model {m.get('model')} on {m.get('device')}, route {result['route']}, "
             f"{result['duration_s']:.0f} s per row, think {result['think_ms']:.0f} ms",
             "| editors | requests | errors | p50 ms | p95 ms | req/s | mean batch | tokens/forward |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['editors']} | {r['requests']} | {r['errors']} | {r['p50_ms']:,.0f} | {r['p95_ms']:,.0f} "
                     f"| {r['req_per_s']:.2f} | {r['mean_batch'] if r['mean_batch'] is not None else '–'} "
                     f"| {r['tokens_per_forward'] if r['tokens_per_forward'] is not None else '–'} |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        result = asyncio.run(bench(args))
    except (RuntimeError, ValueError, OSError) as e:
        print(f"edit-server bench http: {e}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0
