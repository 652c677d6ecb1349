"""Planted secrets: every format of the hardening issue, planted in every context source (current
document, neighbouring file, definitions, imports, open files, edit history, git diff / co-change),
in .py/.js/.yaml/.toml/.ini/.sh/.env files → zero secret bytes in any prompt the builder makes.

A control run with redaction switched off (the rule scan patched out) proves that every planted
secret would reach a prompt, so the zero is not an artefact of the set-up.
"""

from __future__ import annotations

import base64
import json
import random
import string
from pathlib import Path

import git
import pytest

from edit_server.context import ContextBuilder
from edit_server.context import secrets as secrets_mod
from engine.templates import render_edit, render_fim
from engine.tokenizer import Tokenizer
from tests.context_util import options
from tests.test_context_budget import Hunk

TOK = Tokenizer.byte_level()
ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"
EXTS = ("py", "js", "yaml", "toml", "ini", "sh")



def _r(rng: random.Random, n: int, alphabet: str = ALNUM) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _b64url(d: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")


def _pem(rng: random.Random, kind: str) -> tuple[str, list[str]]:
    body = [_r(rng, 64, B64) for _ in range(5)] + [_r(rng, 22, B64) + "=="]
    return f"-----BEGIN {kind} PRIVATE KEY-----\n" + "\n".join(body) + f"\n-----END {kind} PRIVATE KEY-----", body


def formats(rng: random.Random) -> list[tuple[str, str, str, list[str]]]:
    """(format, variable name, value, secret parts that must never appear)."""
    pw = _r(rng, 6) + "!&$" + _r(rng, 6)
    jwt = (f"{_b64url({'alg': 'HS256', 'typ': 'JWT'})}.{_b64url({'sub': _r(rng, 10), 'n': rng.random()})}"
           f".{_r(rng, 43, ALNUM + '-_')}")
    rsa, rsa_body = _pem(rng, "RSA")
    ssh, ssh_body = _pem(rng, "OPENSSH")
    out = [
        ("aws key id", "value_a", "AKIA" + _r(rng, 16, string.ascii_uppercase + string.digits), []),
        ("aws key id (bare constant)", "KEY", "ASIA" + _r(rng, 16, string.ascii_uppercase + string.digits), []),
        ("aws secret key", "aws_secret_access_key", _r(rng, 40, B64), []),
        ("github ghp_", "value_b", "ghp_" + _r(rng, 36), []),
        ("github github_pat_", "value_c", "github_pat_" + _r(rng, 22) + "_" + _r(rng, 59), []),
        ("gitlab glpat-", "value_d", "glpat-" + _r(rng, 20, ALNUM + "_-"), []),
        ("slack xoxb-", "value_e", f"xoxb-{_r(rng, 12, string.digits)}-{_r(rng, 13, string.digits)}-{_r(rng, 24)}", []),
        ("slack xoxp-", "value_f", "xoxp-" + _r(rng, 30, ALNUM + "-"), []),
        ("stripe sk_live_", "value_g", "sk_live_" + _r(rng, 24), []),
        ("google AIza", "value_h", "AIza" + _r(rng, 35, ALNUM + "_-"), []),
        ("openai sk-", "value_i", "sk-" + _r(rng, 48), []),
        ("openai sk-proj-", "value_j", "sk-proj-" + _r(rng, 40, ALNUM + "_-"), []),
        ("jwt", "value_k", jwt, []),
        ("pem rsa (multi-line)", "value_l", rsa, rsa_body),
        ("pem openssh (multi-line)", "value_m", ssh, ssh_body),
        ("password=", "password", pw, []),
        ("secret:", "secret", _r(rng, 14) + "%" + _r(rng, 3), []),
        ("token", "token", _r(rng, 24), []),
        ("api_key", "api_key", _r(rng, 32), []),
        ("connection string", "database_url", f"postgres://admin:{_r(rng, 14)}@db.internal:5432/app", []),
        ("high-entropy value, key name", "signing_key", _r(rng, 32), []),
        ("high-entropy value, secret name", "client_secret", _r(rng, 28, ALNUM + "-_"), []),
        ("bearer token", "auth_header", "Bearer " + _r(rng, 40), []),
    ]
    res = []
    for fmt, name, value, parts in out:
        if not parts:  # the secret part of the value
            parts = [value.split("://admin:")[1].split("@")[0] if "://" in value else
                     value.removeprefix("Bearer ")]
        res.append((fmt, name, value, parts))
    return res


def render(ext: str, name: str, value: str) -> str:
    multi = "\n" in value
    if ext == "py":
        return f'{name} = """{value}"""' if multi else f'{name} = "{value}"'
    if ext == "js":
        return f"const {name} = `{value}`;" if multi else f'const {name} = "{value}";'
    if ext == "yaml":
        return f"{name}: |\n" + "".join(f"  {v}\n" for v in value.split("\n")).rstrip("\n") if multi else f"{name}: {value}"
    if ext == "toml":
        return f'{name} = """\n{value}"""' if multi else f'{name} = "{value}"'
    if ext == "ini":
        return f"{name} = " + value.replace("\n", "\n    ")
    return f'{name.upper()}="{value}"'  # sh / env


def planted(ext: str, fmts, tag: str) -> str:
    """A file of ``ext`` with every format planted, between harmless lines."""
    head = {"py": f"import os\n\n\ndef helper_{tag}(x):\n    return x + 1\n\n\n",
            "js": f"function helper_{tag}(x) {{\n  return x + 1;\n}}\n\n",
            "yaml": f"name: {tag}\n", "toml": f'name = "{tag}"\n', "ini": f"[{tag}]\nname = {tag}\n",
            "sh": f"echo {tag}\n", "env": f"NAME={tag}\n"}[ext]
    return head + "".join(render(ext, n, v) + "\n" for _, n, v, _ in fmts) + {
        "py": f"\n\ndef tail_{tag}():\n    return helper_{tag}(2)\n", "js": f"helper_{tag}(2);\n"}.get(ext, "end = 1\n")


LIB = ("def uses_secrets():\n{body}    return 1\n\n\n"
       "def helper_lib(x):\n    return x\n")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory):
    rng = random.Random(1312)
    fmts = formats(rng)
    root = tmp_path_factory.mktemp("planted")
    repo = git.Repo.init(root)
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "t")
        cw.set_value("user", "email", "t@example.com")
    files = {f"conf/app.{e}": planted(e, fmts, f"open_{e}") for e in EXTS}
    files["conf/.env"] = planted("env", fmts, "dotenv")
    body = "".join(f"    {render('py', n, v)}\n".replace("\n", "\n    ").rstrip(" ") for _, n, v, _ in fmts)
    files["lib.py"] = "".join(f"{render('py', n, v)}\n" for _, n, v, _ in fmts) + "\n\n" + LIB.format(body=body)
    main_clean = ("from lib import uses_secrets, helper_lib, value_a, KEY, value_l, password, token\n\n\n"
                  "def run():\n    a = uses_secrets() + helper_lib(1)\n    return a, value_a, KEY, value_l, password, token\n")
    files["main.py"] = main_clean
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    repo.git.add("-A", "-f")
    repo.index.commit("c0")
    for i in range(2):  # main.py and lib.py change together: co-change outlines of lib.py
        (root / "main.py").write_text(main_clean + f"# {i}\n")
        (root / "lib.py").write_text(files["lib.py"] + f"# {i}\n")
        repo.index.add(["main.py", "lib.py"])
        repo.index.commit(f"c{i + 1}")
    (root / "lib.py").write_text(files["lib.py"])
    main = main_clean + "\n\n" + planted("py", fmts, "main")  # uncommitted: the git diff holds every secret
    (root / "main.py").write_text(main)
    hist = [Hunk(str(root / "main.py"), "--- a/main.py\n+++ b/main.py\n@@ -1,1 +1,40 @@\n"
                 + "".join(f"+{x}\n" for x in planted("py", fmts, "hist").splitlines()), 1.0),
            Hunk(str(root / "conf/app.yaml"), "--- a/conf/app.yaml\n+++ b/conf/app.yaml\n@@ -1 +1,40 @@\n"
                 + "".join(f"+{x}\n" for x in planted("yaml", fmts, "hist").splitlines()), 2.0)]
    secrets = [p for _, _, _, parts in fmts for p in parts]
    return root, fmts, files, main, hist, secrets


def _text(prompt) -> str:
    parts = [getattr(prompt, f, "") for f in ("prefix", "suffix", "before", "region", "after", "path")]
    parts += list(prompt.history) + [s.path + "\n" + s.text for s in prompt.sections]
    rendered = (render_fim if hasattr(prompt, "prefix") else render_edit)(TOK, prompt)
    return "\n".join(parts) + TOK.decode(rendered.ids)


def _prompts(root: Path, files: dict[str, str], main: str, hist) -> tuple[list[str], set[str]]:
    b = ContextBuilder([root], TOK, options(budget=32_768))
    for name, text in files.items():
        if name != "main.py":
            b.update_document(str(root / name), text, 1)  # open files
    b.update_document(str(root / "main.py"), main, 1)
    b.build_fim(str(root / "main.py"), main, 0, hist)
    assert b.wait_idle(60)
    out, kinds = [], set()
    for cur_name, text in [("main.py", main), *((n, t) for n, t in files.items() if n.startswith("conf/app."))]:
        path = str(root / cur_name)
        marks = [text.index("helper_") if "helper_" in text else 0, len(text) // 3, 2 * len(text) // 3, len(text)]
        for off in marks:
            for build in (b.build_fim(path, text, off, hist), b.build_edit(path, text, off, hist)):
                out.append(_text(build.prompt))
                kinds |= {s.kind for s in build.prompt.sections} | ({"history"} if build.prompt.history else set())
    b.close()
    return out, kinds


def _leaks(prompts: list[str], secrets: list[str], k: int = 10) -> list[str]:
    """Secrets of which some ``k``-character piece occurs in a prompt."""
    return [s for s in secrets if any(s[i:i + k] in p for p in prompts for i in range(0, max(1, len(s) - k + 1)))]


def test_every_planted_secret_would_reach_a_prompt_without_redaction(world, monkeypatch) -> None:
    root, _, files, main, hist, secrets = world
    monkeypatch.setattr(secrets_mod, "scan", lambda text, fr: [])
    monkeypatch.setattr(secrets_mod, "_pem_lines", lambda bodies: set())
    monkeypatch.setattr(secrets_mod, "_pem_inline", lambda body: [])
    prompts, _ = _prompts(root, files, main, hist)
    missing = [s for s in secrets if s not in _leaks(prompts, secrets)]
    assert not missing, missing  # the set-up is meaningful: each one is in some prompt


def test_zero_secret_bytes_in_any_prompt(world) -> None:
    root, fmts, files, main, hist, secrets = world
    prompts, kinds = _prompts(root, files, main, hist)
    assert len(secrets) == 33 and len(fmts) == 23
    leaked = _leaks(prompts, secrets)
    assert not leaked, [f for f, _, _, parts in fmts if set(parts) & set(leaked)]
    assert {"definition", "import", "git_diff", "open_file", "cochange", "history"} <= kinds  # every source
    joined = "\n".join(prompts)
    assert "[REDACTED]" in joined and "helper_main" in joined and "helper_lib" in joined
    assert "-----BEGIN RSA PRIVATE KEY-----" in joined  # markers stay: only the key material goes
