"""`edit-server context` (transparency) and `edit-server bench context` (tiny sizes)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from edit_server.cli import build_parser, main
from edit_server.cli.context import parse_location, server_context
from edit_server.context import ContextOptions
from edit_server.core.requests import FimRequest
from edit_server.core.settings import Settings, build_settings
from edit_server.serving.contexts import auto_budget
from edit_server.serving.worker import EngineWorker


def test_parse_location() -> None:
    assert parse_location("a/b.py:3:5") == (Path("a/b.py"), 3, 5)
    assert parse_location("C:/x.py:1:1")[0] == Path("C:/x.py")
    with pytest.raises(ValueError):
        parse_location("a.py:3")


def _ws(tmp_path: Path) -> Path:
    (tmp_path / "util.py").write_text("def helper(a):\n    return a\n")
    (tmp_path / ".env").write_text("TOKEN=x\n")
    f = tmp_path / "main.py"
    steps = "".join(f"    x = x + {i}\n" for i in range(8))  # the password's line is past line 1's region
    f.write_text("from util import helper\n\n\ndef run():\n    x = helper(1)\n" + steps +
                 "    password = 'hunter2hunter2'\n    return x\n")
    return f


def test_context_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = _ws(tmp_path)
    assert main(["context", f"{f}:5:9", "--json", "--root", str(tmp_path), "--budget", "2000"]) == 0
    out = json.loads(capsys.readouterr().out)
    p, rep = out["prompt"], out["report"]
    assert p["prefix"].endswith("    x = ") and p["suffix"].startswith("helper(1)")
    assert "hunter2" not in json.dumps(p)
    assert rep["total"] <= 2000 and rep["budget"] == 2000
    kinds = [(s["kind"], s["path"]) for s in p["sections"]]
    assert ("import", "util.py") in kinds and ("definition", "util.py") in kinds


def test_context_table_edit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = _ws(tmp_path)
    assert main(["context", f"{f}:1:5", "--kind", "edit", "--root", str(tmp_path), "--show-text"]) == 0
    out = capsys.readouterr().out
    assert "edit context for main.py line 1 col 5" in out
    assert "region" in out and "util.py" in out and "def helper" in out
    # the region around line 14 holds a password: no rewrite may touch it
    assert main(["context", f"{f}:14:5", "--kind", "edit", "--root", str(tmp_path)]) == 0
    assert "no context sent: secret in the editable region" in capsys.readouterr().out


def test_context_bad_location(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["context", "nope.py:1"]) == 2
    assert main(["context", "/nonexistent/x.py:1:1"]) == 2
    assert "edit-server context" in capsys.readouterr().err


def test_bench_context_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "context", "--files", "12", "--lines", "300", "--runs", "2", "--budget", "2048",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fim_tokens"] <= 2048 and out["symbols_files"] >= 12  # the open big.py: from its live tree
    assert set(out["timings"]) == {"fim", "edit", "didChange", "reparse", "build after edit", "keystroke total",
                                   "redact edited line"}
    assert all(v["median_ms"] > 0 for v in out["timings"].values())


def test_context_shows_the_servers_options_and_prompt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`edit-server context` builds its options as the server does: for the same settings (a --config file
    under the command line, as initializationOptions under the server's flags) the builder's options equal
    those of the server's worker, and the prompt it prints is the one the server builds."""
    f = _ws(tmp_path).resolve()
    client = {"historySize": 3, "limits": {"maxLineChars": 500}}
    (tmp_path / "cfg.json").write_text(json.dumps(client))
    argv = ["context", f"{f}:5:9", "--root", str(tmp_path), "--model", "tiny-random", "--device", "cpu",
            "--config", str(tmp_path / "cfg.json"), "--set", "limits.maxDocumentChars=50000", "--exclude", "*.sql"]
    settings, bad = build_settings(client, {"model": "tiny-random", "device": "cpu",
                                            "limits": {"maxDocumentChars": 50_000},
                                            "exclude": [*Settings().exclude, "*.sql"]})
    assert bad == []
    w = EngineWorker(lambda state, msg: None, [tmp_path])
    w.load(settings.model, settings.device, settings)
    cli = server_context(build_parser().parse_args(argv), [tmp_path])
    try:
        assert w.ready.wait(60) and w._ctx is not None
        server = w._ctx.builder.options
        assert cli.builder.options == server and cli.budget == w._ctx.budget
        assert (server.max_line_chars, server.max_doc_chars, server.max_history) == (500, 50_000, 3)
        assert "*.sql" in server.exclude and server.budget == auto_budget(settings, w.engine)
        text = f.read_text()
        offset = text.index("helper(1)")  # line 5, column 9
        w._ctx.builder.update_document(str(f), text, 1)
        w._ctx.builder.refresh_git(str(f))
        w._ctx.builder.wait_idle(60)
        want = w._ctx.fim(FimRequest("u", str(f), text, 1, offset))
        assert want is not None and want.sections
        assert main([*argv, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["prompt"] == json.loads(json.dumps(asdict(want)))
    finally:
        cli.builder.close()
        w.stop()
        w.join(5)
    # without a model: the byte-level tokenizer and the server's auto budget for an unknown engine
    plain = server_context(build_parser().parse_args(["context", f"{f}:1:1", "--root", str(tmp_path)]), [tmp_path])
    plain.builder.close()
    assert plain.builder.options == ContextOptions.from_settings(Settings(), plain.budget)
    assert plain.budget == auto_budget(Settings(), None)
