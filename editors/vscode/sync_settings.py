"""The VS Code settings (`editServer.*` in package.json) generated from the server's one settings struct
(edit_server/core/settings.py), so the two cannot drift: names, types, defaults, enums and ranges come
from the struct; descriptions stay as written in package.json (a new key gets an empty one, which the
test refuses until someone writes it).

    python editors/vscode/sync_settings.py           # check: exit 1 and list what differs
    python editors/vscode/sync_settings.py --write   # update package.json

tests/test_editor_configs.py runs the check.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec

HERE = Path(__file__).resolve().parent
PACKAGE = HERE / "package.json"
PREFIX = "editServer."
SKIP = {"http"}  # `edit-server http` only: no meaning for an editor
# the extension's own
CLIENT_ONLY = {"editServer.command", "editServer.nextEdit.auto", "editServer.nextEdit.delayMs",
               "editServer.nextEdit.chain", "editServer.cursorRestMs"}


def _schema(t: Any) -> dict[str, Any]:
    """JSON-schema fragment of a msgspec type (the subset the settings use)."""
    ti = msgspec.inspect
    if isinstance(t, ti.BoolType):
        return {"type": "boolean"}
    if isinstance(t, ti.IntType | ti.FloatType):
        out: dict[str, Any] = {"type": "integer" if isinstance(t, ti.IntType) else "number"}
        if t.ge is not None:
            out["minimum"] = t.ge
        if t.le is not None:
            out["maximum"] = t.le
        return out
    if isinstance(t, ti.StrType):
        return {"type": "string"}
    if isinstance(t, ti.LiteralType):
        return {"type": "string", "enum": list(t.values)}
    if isinstance(t, ti.ListType):
        return {"type": "array", "items": _schema(t.item_type)}
    raise TypeError(f"no VS Code setting type for {t!r}")


def _walk(st: Any, prefix: str, out: dict[str, dict[str, Any]]) -> None:
    for f in st.fields:
        if not prefix and f.name in SKIP:
            continue
        key = prefix + f.encode_name
        if isinstance(f.type, msgspec.inspect.StructType):
            _walk(f.type, key + ".", out)
            continue
        default = f.default if f.default is not msgspec.NODEFAULT else f.default_factory()
        out[PREFIX + key] = {**_schema(f.type), "default": default}


def server_properties() -> dict[str, dict[str, Any]]:
    """``editServer.<dotted camelCase key>`` → {type, default, enum / minimum / maximum} for every setting."""
    sys.path.insert(0, str(HERE.parents[1]))
    from edit_server.core.settings import Settings

    out: dict[str, dict[str, Any]] = {}
    _walk(msgspec.inspect.type_info(Settings), "", out)
    return out


def synced(pkg: dict[str, Any]) -> dict[str, Any]:
    """``pkg`` with its server settings regenerated (client-only settings first, as they were)."""
    props = pkg["contributes"]["configuration"]["properties"]
    new = {k: v for k, v in props.items() if k in CLIENT_ONLY}
    for key, schema in server_properties().items():
        old = props.get(key, {})
        new[key] = {**schema, "description": old.get("description", "")}
        if "markdownDescription" in old:
            new[key]["markdownDescription"] = old["markdownDescription"]
    out = json.loads(json.dumps(pkg))
    out["contributes"]["configuration"]["properties"] = new
    return out


def main(argv: list[str]) -> int:
    pkg = json.loads(PACKAGE.read_text())
    want = synced(pkg)
    if "--write" in argv:
        PACKAGE.write_text(json.dumps(want, indent=2, ensure_ascii=False) + "\n")
        return 0
    have, new = pkg["contributes"]["configuration"]["properties"], want["contributes"]["configuration"]["properties"]
    diff = sorted(k for k in set(have) | set(new) if have.get(k) != new.get(k))
    for k in diff:
        print(f"{k}: package.json {have.get(k)} != server {new.get(k)}")
    return 1 if diff else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
