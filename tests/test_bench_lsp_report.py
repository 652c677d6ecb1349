"""`edit-server bench lsp`'s numbers and table (edit_server.cli.bench_lsp_report) from known samples: the
percentiles, the judged answers, the recomputed prompt tokens and the header naming the levers set."""

from __future__ import annotations

from edit_server.cli.bench_lsp import Sample
from edit_server.cli.bench_lsp_report import format_table, summarize


def call(prompt: int, cached: int, finish: str = "newline") -> dict:
    return {"prompt_tokens": prompt, "cached_tokens": cached, "steps": 4, "forwards": 5, "tokens": 6,
            "prefill_ms": 60.0, "decode_ms": 150.0, "finish": finish}


def test_summary_and_table_of_known_samples() -> None:
    samples = [Sample("single-line", ms, shown=ms < 300, call=call(800, 794)) for ms in (100.0, 200.0, 400.0)]
    samples[0].right, samples[0].saved = True, 5
    samples[1].right, samples[1].saved = False, 2  # a correct start, not all
    samples.append(Sample("single-line", 5.0, final=False))  # typed over: not what the user waits for
    samples.append(Sample("load", 4000.0))
    calls = [("single-line", call(800, 794)), ("single-line", call(800, 790, "budget")), ("end-of-line", call(900, 880))]
    s = summarize(samples, calls)
    line = s["kinds"]["single-line"]
    assert (line["n"], line["answered"], line["settled"], line["model_calls"]) == (4, 2, 3, 2)
    assert (line["judged"], line["right"], line["partly"]) == (2, 1, 1)
    assert (line["p50_ms"], line["p95_ms"]) == (200.0, 400.0)
    assert line["recomputed_p50"] == 6.0 and line["finish"] == {"budget": 1, "newline": 1}
    assert s["keystrokes"] == {"requests": 4, "model_calls": 3, "recomputed_p50": 10.0, "recomputed_p95": 20.0,
                               "recomputed_max": 20.0}
    report = {"model": "default", "device": "cpu", "wall_s": 1.0, "runs": ["main"],
              "machine": {"cpu": "Test CPU", "cpu_count": 2, "overrides": {"EDIT_SERVER_INT4": "line"}},
              "settings": {"typing_ms": 150.0, "gate": True, "set": ["otherFiles=false"]},
              "main": {"decode": "engine default", "files": ["a.py"], "memory": {"rss_mb": 1500.0}, **s}}
    out = format_table(report).splitlines()
    assert out[0].endswith("gate on; EDIT_SERVER_INT4=line; --set otherFiles=false")
    row = next(x for x in out if x.startswith("single-line") and "300/800" in x)
    assert row.split()[-2:] == ["200.0", "400.0"]
    report["machine"].pop("overrides")  # reports from before the fields: no suffix
    report["settings"].pop("set")
    assert format_table(report).splitlines()[0].endswith("gate on")


def test_bench_lsp_passes_its_settings_to_the_server(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``--set KEY=VALUE`` reaches the server's command line (where it wins over the client's options)."""
    import asyncio

    import evals.lsp_client as lsp_client
    from edit_server.cli import build_parser
    from edit_server.cli.bench_lsp import start_server

    args = build_parser().parse_args(["bench", "lsp", "--set", "otherFiles=false", "--set", "historySize=3"])
    seen: list[list[str]] = []

    class Fake:
        def __init__(self, cmd: list[str], **kw: object) -> None:
            seen.append(cmd)

        async def start(self, *a: object, **kw: object) -> None:
            return None

        async def wait_ready(self, *a: object) -> None:
            return None

    monkeypatch.setattr(lsp_client, "LspClient", Fake)
    asyncio.run(start_server("tiny-random", "cpu", tmp_path, tmp_path / "s.log", "", 0, 5.0, sets=args.set))
    cmd = seen[0]
    assert cmd[cmd.index("--set"):] == ["--set", "otherFiles=false", "--set", "historySize=3"]


def test_bench_lsp_types_in_the_files_asked_for(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pytest

    from edit_server.cli.bench_lsp_script import FILES, source_files

    assert [p.name for p in source_files(2)] == [f.rsplit("/", 1)[-1] for f in FILES]
    mine = tmp_path / "mine.py"
    mine.write_text("x = 1\n")
    assert source_files(2, [str(mine), "engine/templates.py"])[0] == mine
    assert source_files(2, ["engine/templates.py"])[0].name == "templates.py"
    with pytest.raises(ValueError, match="no such file"):
        source_files(2, ["nope/missing.py"])
