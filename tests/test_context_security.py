"""Security property: secrets, ignored files, files outside the roots (also through symlinks),
binary/huge files and user-excluded files never reach a prompt."""

from __future__ import annotations

import os
import string

import git
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edit_server.context import ContextBuilder, is_secret_line, redact
from engine.templates import render_edit, render_fim
from engine.tokenizer import Tokenizer
from tests.context_util import options
from tests.test_context_budget import Hunk

TOK = Tokenizer.byte_level()
ALNUM = string.ascii_letters + string.digits
MARKERS = ["IGNORED_MARKER", "OUTSIDE_MARKER", "LINK_MARKER", "DIRLINK_MARKER", "BIG_MARKER", "BIN_MARKER",
           "EXCL_MARKER", "ENV_MARKER", "PEM_MARKER", "CRED_MARKER", "NETRC_MARKER"]



MAIN = """from ok import helper_ok
from build.ignored import ignored_fn
from vendor.excluded import excl_fn
import link
import linkdir.outside3
import big
import binmod


def run():
    a = helper_ok(1)
    b = ignored_fn(a) + outside_fn(a) + link_fn(a) + dirlink_fn(a)
    c = big_fn(b) + bin_fn(c) + excl_fn(c) + env_fn(c)
    return a + b + c
"""


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("sec")
    root, outside = base / "root", base / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "outside.py").write_text("def outside_fn(x):\n    return 'OUTSIDE_MARKER'\n")
    (outside / "outside2.py").write_text("def link_fn(x):\n    return 'LINK_MARKER'\n")
    (outside / "outside3.py").write_text("def dirlink_fn(x):\n    return 'DIRLINK_MARKER'\n")
    os.symlink(outside / "outside2.py", root / "link.py")
    os.symlink(outside, root / "linkdir")
    (root / "ok.py").write_text("def helper_ok(x):\n    return x + 1\n")
    (root / "build").mkdir()
    (root / "build" / "ignored.py").write_text("def ignored_fn(x):\n    return 'IGNORED_MARKER'\n")
    (root / "vendor").mkdir()
    (root / "vendor" / "excluded.py").write_text("def excl_fn(x):\n    return 'EXCL_MARKER'\n")
    (root / "big.py").write_text("def big_fn(x):\n    return 'BIG_MARKER'\n" + "# pad\n" * 200_000)
    (root / "binmod.py").write_bytes(b"def bin_fn(x):\n    return 'BIN_MARKER'\n\x00\x01")
    (root / ".env").write_text("def env_fn(x):\n    return 'ENV_MARKER'\n")
    (root / "server.pem").write_text("PEM_MARKER\n")
    (root / "credentials-prod.json").write_text('{"k": "CRED_MARKER"}\n')
    (root / ".netrc").write_text("machine x login NETRC_MARKER\n")
    (root / ".gitignore").write_text("build/\n")
    (root / "main.py").write_text(MAIN)
    repo = git.Repo.init(root)
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "t")
        cw.set_value("user", "email", "t@example.com")
    for i in range(3):  # secret files change together with main.py: co-change must not leak them
        (root / "main.py").write_text(MAIN + f"# {i}\n")
        (root / "server.pem").write_text(f"PEM_MARKER {i}\n")
        repo.git.add("-f", "main.py", "server.pem", ".env", "credentials-prod.json", "ok.py", ".gitignore")
        repo.index.commit(f"c{i}")
    (root / "main.py").write_text(MAIN)
    b = ContextBuilder([root], TOK, options(exclude=("vendor/*",)))
    main = str(root / "main.py")
    b.update_document(main, MAIN, 1)
    b.build_fim(main, MAIN, 10, [])
    assert b.wait_idle(60)
    yield b, root, outside
    b.close()


def _all_text(prompt) -> str:
    parts = [getattr(prompt, f, "") for f in ("prefix", "suffix", "before", "region", "after", "path")]
    parts += list(prompt.history) + [s.path + "\n" + s.text for s in prompt.sections]
    rendered = (render_fim if hasattr(prompt, "prefix") else render_edit)(TOK, prompt)
    return "".join(parts) + TOK.decode(rendered.ids)


def _secret() -> st.SearchStrategy[tuple[str, str]]:
    """(line to plant, the secret value that must never appear)."""
    def rnd(n: int, alphabet: str = ALNUM) -> st.SearchStrategy[str]:
        return st.text(alphabet, min_size=n, max_size=n + 8)

    upper = string.ascii_uppercase + string.digits
    return st.one_of(
        rnd(16, upper).map(lambda s: (f'aws_key = "AKIA{s[:16]}"', "AKIA" + s[:16])),
        rnd(36).map(lambda s: (f"token: ghp_{s}", "ghp_" + s)),
        rnd(24).map(lambda s: (f"SLACK = 'xoxb-{s}'", "xoxb-" + s)),
        rnd(32).map(lambda s: (f"OPENAI_API_KEY=sk-proj-{s}", "sk-proj-" + s)),
        rnd(35).map(lambda s: (f'gcp = "AIza{s[:35]}"', "AIza" + s[:35])),
        rnd(12).map(lambda s: (f'password = "{s}Zq9"', s + "Zq9")),
        rnd(12).map(lambda s: (f"    db_secret: '{s}Zq9'", s + "Zq9")),
        rnd(64, ALNUM + "+/").map(lambda s: (f"-----BEGIN RSA PRIVATE KEY-----\n{s}\n-----END RSA PRIVATE KEY-----",
                                             s)),
    )


@given(secret=_secret(), where=st.integers(0, 10_000), cursor_frac=st.floats(0, 1))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_nothing_secret_or_excluded_reaches_a_prompt(ws, secret, where, cursor_frac) -> None:
    b, root, outside = ws
    line, value = secret
    assert value not in redact(line, "main.py")
    lines = MAIN.splitlines(keepends=True)
    at = where % (len(lines) + 1)
    text = "".join(lines[:at]) + "    " + line.replace("\n", "\n    ") + "\n" + "".join(lines[at:])
    main = str(root / "main.py")
    cursor = int(cursor_frac * len(text))
    hist = [Hunk(main, f"--- a/main.py\n+++ b/main.py\n@@ -1,1 +1,2 @@\n x\n+{line}\n-{line}\n", 1.0),
            Hunk(str(root / ".env"), "--- a/.env\n+++ b/.env\n@@ -1 +1 @@\n-ENV_MARKER\n+ENV_MARKER2\n", 2.0),
            Hunk(str(outside / "outside.py"), "@@ -1 +1 @@\n-OUTSIDE_MARKER\n+x\n", 3.0),
            Hunk(str(root / "build" / "ignored.py"), "@@ -1 +1 @@\n-IGNORED_MARKER\n+x\n", 4.0)]
    b.update_document(str(root / "ok.py"), f"def helper_ok(x):\n{line}\n    return x + 1\n", 1)
    b.update_document(str(root / ".netrc"), "machine x login NETRC_MARKER\n", 1)
    b.update_document(str(outside / "outside.py"), "def outside_fn(x):\n    return 'OUTSIDE_MARKER'\n", 1)
    fim, edit = b.build_fim(main, text, cursor, hist), b.build_edit(main, text, cursor, hist)
    if edit.report.region_lines and any(is_secret_line(x) for x in text[edit.region_start:edit.region_end]
                                         .splitlines()):
        assert edit.report.blocked == "secret in the editable region"
    for build in (edit, fim):
        seen = _all_text(build.prompt)
        assert value not in seen
        for part in value.split("/"):  # no long piece of a key either
            assert len(part) < 12 or part not in seen
        for m in MARKERS:
            assert m not in seen, m
    assert "helper_ok" in seen  # control: allowed context does get in
    assert fim.report.excluded[str(root / ".env")].startswith("secret file")  # reported, with the reason
    assert fim.report.excluded[str(outside / "outside.py")] == "outside the workspace roots"


def test_exclusion_reasons(ws) -> None:
    b, root, outside = ws
    ex = b.exclusions
    assert ex.reason(outside / "outside.py") == "outside the workspace roots"
    assert ex.reason(root / "link.py") == "outside the workspace roots"  # symlink escape
    assert ex.reason(root / "linkdir" / "outside3.py") == "outside the workspace roots"
    assert ex.reason(root / "build" / "ignored.py") == "ignored by git"
    assert "larger than" in ex.reason(root / "big.py")
    assert ex.reason(root / "binmod.py") == "binary"
    assert ex.reason(root / "vendor" / "excluded.py").startswith("excluded by option")
    for name in (".env", "server.pem", "credentials-prod.json", ".netrc", "id_rsa", "x.key", "a.p12",
                 ".env.local", ".npmrc", ".pypirc", ".git-credentials", "cert.pfx"):
        assert (ex.reason(root / name) or "").startswith("secret file"), name
    assert ex.reason(root / "ok.py") is None and ex.reason(root / "main.py") is None


def test_excluded_current_file_gives_no_context(ws) -> None:
    b, root, _ = ws
    r = b.build_fim(str(root / ".env"), "API=1\nENV_MARKER\n", 3, [])
    assert r.report.blocked and r.prompt.prefix == r.prompt.suffix == "" and not r.prompt.sections
    e = b.build_edit(str(root / ".env"), "API=1\nENV_MARKER\n", 3, [])
    assert e.report.blocked and "ENV_MARKER" not in _all_text(e.prompt)


def test_redaction_keeps_harmless_lines() -> None:
    text = "x = 1\npassword = get_password()\nkey = 'short'\n"
    assert redact(text) == text
    assert redact('  api_key = "abcd1234efgh"\nok\n') == '  api_key = "[REDACTED]"\nok\n'  # the secret, not the line


def test_without_roots_secrets_are_still_excluded(tmp_path) -> None:
    from edit_server.context import Exclusions

    ex = Exclusions([])
    assert ex.reason(tmp_path / ".env").startswith("secret file")
    assert ex.reason(tmp_path / "a.py") is None
