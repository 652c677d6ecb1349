"""`edit-server bench http` on tiny-random: the CLI runs, every editor gets answers, the table and JSON
have their columns (no timing asserts: CI machines are shared)."""

from __future__ import annotations

import json
from typing import Any

from edit_server.cli import bench_http, main


def test_bench_http_json_and_table(capsys: Any) -> None:
    assert main(["bench", "http", "--editors", "1,3", "--duration", "1", "--route", "mix", "--think-ms", "10",
                 "--max-tokens", "4", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["server"] == "in-process" and result["model"]["model"] == "tiny-random"
    assert [r["editors"] for r in result["rows"]] == [1, 3]
    for row in result["rows"]:
        assert row["requests"] >= row["editors"] and row["errors"] == 0
        assert row["p50_ms"] <= row["p95_ms"] and row["req_per_s"] > 0
        assert row["engine_calls"] >= 1 and row["mean_batch"] >= 1 and row["tokens_per_forward"] > 0
    text = bench_http.table(result)
    assert text.splitlines()[1].startswith("| editors | requests | errors | p50 ms | p95 ms | req/s")
    assert len(text.splitlines()) == 5


def test_requests_are_the_client_shapes() -> None:
    from edit_server.http import mercury, zed

    text, cursor = bench_http.source(2, "t")
    assert text[cursor - 5:cursor] == "\n    "
    url, body = bench_http.request("edit", text, cursor, "a.py", 8)
    p = mercury.parse_edit(body["messages"][0]["content"])
    assert url == "/v1/edit/completions" and p.before + p.region + p.after == text[:-1]  # (the tag's newline)
    url, body = bench_http.request("zeta2", text, cursor, "a.py", 8)
    zp = zed.parse_prompt(body["prompt"])
    assert url == "/v1/completions" and zp.format == "v0131" and zp.prompt.path == "a.py"
    assert bench_http.percentile([3.0, 1.0, 2.0], 0.5) == 2.0 and bench_http.percentile([1.0] * 19 + [9.0], 0.95) == 1.0
