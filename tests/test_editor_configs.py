"""Editor configuration files against the server: the VS Code settings are the server's settings struct
(names, defaults, enums, ranges), the .vsix ships no sources or tests, and every editor's example
initializationOptions are valid server settings."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import msgspec
import pytest

from edit_server.core.settings import Settings, resolve

ROOT = Path(__file__).resolve().parent.parent
EDITORS = ROOT / "editors"
VSCODE = EDITORS / "vscode"
PKG = json.loads((VSCODE / "package.json").read_text())
PROPS = PKG["contributes"]["configuration"]["properties"]
CLIENT_ONLY = {"editServer.command", "editServer.nextEdit.auto", "editServer.nextEdit.delayMs",
               "editServer.nextEdit.chain", "editServer.cursorRestMs"}
HTTP_ONLY = {"http"}  # `edit-server http` settings: nothing for an editor
FIX = "run `python editors/vscode/sync_settings.py --write` and describe new keys in package.json"


def _leaves(cls: type[msgspec.Struct], prefix: str = "") -> dict[str, msgspec.structs.FieldInfo]:
    """Every setting of the struct, as ``editServer.<dotted camelCase>`` → its field (nested structs walked)."""
    out: dict[str, msgspec.structs.FieldInfo] = {}
    for f in msgspec.structs.fields(cls):
        if not prefix and f.name in HTTP_ONLY:
            continue
        if isinstance(f.type, type) and issubclass(f.type, msgspec.Struct):
            out.update(_leaves(f.type, f"{prefix}{f.encode_name}."))
        else:
            out[f"editServer.{prefix}{f.encode_name}"] = f
    return out


SERVER = _leaves(Settings)


def test_vscode_settings_are_the_server_settings() -> None:
    ours = {k for k in PROPS if k not in CLIENT_ONLY}
    assert ours == set(SERVER), f"package.json and Settings differ: {sorted(ours ^ set(SERVER))}; {FIX}"
    for key, f in SERVER.items():
        prop = PROPS[key]
        default = f.default if f.default is not msgspec.NODEFAULT else f.default_factory()
        assert prop["default"] == default, (key, FIX)
        base, metas = f.type, []
        if typing.get_origin(base) is typing.Annotated:
            base, *metas = typing.get_args(base)
        if typing.get_origin(base) is typing.Literal:
            assert prop["enum"] == list(typing.get_args(base)), (key, FIX)
            base = str
        want = {bool: "boolean", int: "integer", float: "number", str: "string"}.get(base, "array")
        assert prop["type"] == want, (key, FIX)
        for m in metas:
            assert prop.get("minimum") == m.ge and prop.get("maximum") == m.le, (key, FIX)
        assert prop.get("description", "").strip(), f"{key}: no description in package.json"
    assert "mps" in PROPS["editServer.device"]["enum"]


def test_sync_settings_script_agrees() -> None:
    proc = subprocess.run([sys.executable, str(VSCODE / "sync_settings.py")], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_vscode_package_needs_no_prompt() -> None:
    assert PKG["license"] == "Apache-2.0" and "Apache License" in (VSCODE / "LICENSE").read_text()
    assert PKG["repository"]["url"].startswith("https://") and PKG["repository"]["directory"] == "editors/vscode"
    assert (VSCODE / "README.md").is_file()
    ignore = (VSCODE / ".vscodeignore").read_text().split()
    assert {"src/**", "test/**", "tsconfig.json", "sync_settings.py"} <= set(ignore)


@pytest.mark.skipif(not (VSCODE / "node_modules" / ".bin" / "vsce").exists() or shutil.which("node") is None,
                    reason="run `npm install` in editors/vscode first")
def test_vsix_file_list() -> None:
    """`vsce ls`: what the .vsix would hold — the compiled extension and its runtime dependencies only."""
    tsc = VSCODE / "node_modules" / "typescript" / "bin" / "tsc"
    subprocess.run(["node", str(tsc), "-p", str(VSCODE)], check=True, capture_output=True, timeout=120)
    proc = subprocess.run([str(VSCODE / "node_modules" / ".bin" / "vsce"), "ls"], cwd=VSCODE, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    files = proc.stdout.split()
    assert {"package.json", "README.md", "LICENSE", "out/extension.js"} <= set(files)
    assert not [f for f in files if f.startswith(("src/", "test/")) or f.endswith((".ts", ".py"))
                and not f.startswith("node_modules/")]
    assert not [f for f in files if f.startswith("node_modules/") and f.split("/")[1] in ("typescript", "@vscode")]


def _check_options(opts: dict[str, Any]) -> None:
    settings, bad = resolve(opts)
    assert bad == [] and settings.model == "default"


def test_helix_languages_toml() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    cfg = tomllib.loads((EDITORS / "helix" / "languages.toml").read_text())
    server = cfg["language-server"]["edit-server"]
    assert server["command"] == "edit-server"
    _check_options(server["config"])
    assert all("edit-server" in lang["language-servers"] for lang in cfg["language"])


def test_sublime_settings() -> None:
    text = (EDITORS / "sublime" / "LSP.sublime-settings").read_text()
    client = json.loads(re.sub(r"(?m)^\s*//.*$", "", text))["clients"]["edit-server"]
    assert client["enabled"] and client["command"] == ["edit-server"] and client["selector"] == "source"
    _check_options(client["initializationOptions"])


def test_jetbrains_lsp4ij_template() -> None:
    folder = EDITORS / "jetbrains" / "edit-server"
    tpl = json.loads((folder / "template.json").read_text())
    assert tpl["id"] == "edit-server" and tpl["programArgs"]["default"] == "edit-server"
    assert all(m["fileType"]["patterns"] and m["languageId"] for m in tpl["fileTypeMappings"])
    _check_options(json.loads((folder / "initializationOptions.json").read_text()))


def _sexp_balanced(src: str) -> bool:
    depth, i = 0, 0
    while i < len(src):
        c = src[i]
        if c == ";":
            i = src.find("\n", i) % (len(src) + 1) if "\n" in src[i:] else len(src)
            continue
        if c == "?":  # character literal: ?a ?\( …
            i += 3 if src[i + 1 : i + 2] == "\\" else 2
            continue
        if c == '"':
            i += 1
            while src[i] != '"':
                i += 2 if src[i] == "\\" else 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth < 0:
                return False
        i += 1
    return depth == 0


def test_emacs_lsp_mode_client() -> None:
    src = (EDITORS / "emacs" / "edit-server.el").read_text()
    assert _sexp_balanced(src)
    for needle in ("(lsp-register-client", "(lsp-stdio-connection", ":server-id 'edit-server", ":add-on? t",
                   "lsp-inline-completion-display", "(provide 'edit-server)", ":model \"default\""):
        assert needle in src, needle


def test_editors_readme_follows_the_install_and_documents_the_knobs() -> None:
    doc = (EDITORS / "README.md").read_text()
    readme = (ROOT / "README.md").read_text()
    torch = re.search(r"torch==[0-9.]+", readme)
    assert torch and torch.group(0) in doc  # the same pinned CPU torch as the README's scripts…
    assert doc.index(torch.group(0)) < doc.index("pip install -e .")  # …installed before the project
    for needle in ("EDIT_SERVER_NVIM", ":checkhealth edit_server", "hidden", "sync_settings.py",
                   "emacs/", "jetbrains/", "helix/", "sublime/"):
        assert needle in doc, needle
