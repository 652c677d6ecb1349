"""`edit-server context` (transparency) and `edit-server bench context` (tiny sizes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edit_server.cli import main
from edit_server.context.cli import parse_location


def test_parse_location() -> None:
    assert parse_location("a/b.py:3:5") == (Path("a/b.py"), 3, 5)
    assert parse_location("C:/x.py:1:1")[0] == Path("C:/x.py")
    with pytest.raises(ValueError):
        parse_location("a.py:3")


def _ws(tmp_path: Path) -> Path:
    (tmp_path / "util.py").write_text("def helper(a):\n    return a\n")
    (tmp_path / ".env").write_text("TOKEN=x\n")
    f = tmp_path / "main.py"
    f.write_text("from util import helper\n\n\ndef run():\n    x = helper(1)\n    password = 'hunter2hunter2'\n    return x\n")
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
    # the region around line 6 holds a password: no rewrite may touch it
    assert main(["context", f"{f}:6:5", "--kind", "edit", "--root", str(tmp_path)]) == 0
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
