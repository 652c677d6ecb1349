"""engine.caches.merged + default.to_fast: a saved int8 model loads back exactly; keys follow sources."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from engine import Engine, FimPrompt
from engine.caches import merged as merged_cache
from engine.cpu import fastcpu
from engine.default import to_fast
from engine.specs import random_checkpoint

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(merged_cache.ENV_DIR, str(tmp_path / "merged"))
    return tmp_path / "merged"


def test_saved_fast_checkpoint_loads_back_exactly(cache: Path, tmp_path: Path) -> None:
    src = tmp_path / "adapter.bin"
    src.write_bytes(b"x")
    ck = to_fast(random_checkpoint("tiny"))
    assert ck.meta["layout"] == fastcpu.FORMAT
    assert not any(t.dtype == torch.float32 and t.numel() > 10_000 for t in ck.state_dict.values())
    k = merged_cache.key([src], fastcpu.FORMAT)
    assert merged_cache.load("m", k) is None  # miss
    assert merged_cache.save("m", k, ck) is not None
    back = merged_cache.load("m", k)
    assert back is not None and back.meta["merged_cache"].endswith(".safetensors")
    assert back.tokenizer.special == ck.tokenizer.special and back.args == ck.args
    fim = FimPrompt("def f(x):\n    return ", "\n")
    a = Engine.from_checkpoint(ck, device="cpu").infill(fim, max_tokens=8)
    b = Engine.from_checkpoint(back, device="cpu").infill(fim, max_tokens=8)
    assert a.tokens == b.tokens and Engine.from_checkpoint(back, device="cpu").info["fast_cpu"] == fastcpu.FORMAT
    # a changed source is a different key
    src.write_bytes(b"xy")
    k2 = merged_cache.key([src], fastcpu.FORMAT)
    assert k2 != k and merged_cache.load("m", k2) is None


def test_same_content_elsewhere_shares_the_key(tmp_path: Path) -> None:
    """Another checkout of the same adapter (other path, other mtime) hits the same entry; a large source
    is keyed by its stat (its content is not read at every start)."""
    a, b = tmp_path / "a" / "adapter.bin", tmp_path / "b" / "adapter.bin"
    for p in (a, b):
        p.parent.mkdir()
        p.write_bytes(b"same bytes")
    os.utime(b, ns=(1, 1))
    assert merged_cache.key([a], "L") == merged_cache.key([b], "L") != merged_cache.key([a], "other")
    b.write_bytes(b"same bytez")
    assert merged_cache.key([a], "L") != merged_cache.key([b], "L")
    assert "sha256" in merged_cache._stat(a)
    old = merged_cache.CONTENT_KEY_MAX
    try:
        merged_cache.CONTENT_KEY_MAX = 4
        assert "sha256" not in merged_cache._stat(a) and merged_cache._stat(a)["size"] == 10
    finally:
        merged_cache.CONTENT_KEY_MAX = old


def test_keeps_the_most_recently_used_entries(cache: Path, tmp_path: Path) -> None:
    """Two adapters alternating (bench lsp --adapter) both stay cached; past KEEP the least recently
    used entry goes, and a load counts as a use."""
    ck = random_checkpoint("tiny")
    keys = [f"{i:020x}" for i in range(merged_cache.KEEP + 1)]
    for i, k in enumerate(keys[:-1]):
        assert merged_cache.save("m", k, ck) is not None
        for p in merged_cache.paths("m", k) or ():
            os.utime(p, ns=(10**9 * (i + 1), 10**9 * (i + 1)))
    assert merged_cache.load("m", keys[0]) is not None  # the oldest, used again
    merged_cache.save("m", keys[-1], ck)
    (cache / "mx-00000000000000000000.safetensors").write_bytes(b"another name's entry")
    left = sorted(p.name for p in cache.iterdir() if p.name.startswith("m-"))
    assert left == sorted(f"m-{k}{s}" for k in (keys[0], *keys[2:]) for s in (".json", ".safetensors"))
    assert (cache / "mx-00000000000000000000.safetensors").is_file()


def test_broken_or_disabled_cache_is_a_miss(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache.mkdir(parents=True)
    (cache / "m-abc.safetensors").write_bytes(b"not a safetensors file")
    (cache / "m-abc.json").write_text("{}")
    assert merged_cache.load("m", "abc") is None
    monkeypatch.setenv(merged_cache.ENV_DIR, "off")
    assert merged_cache.cache_dir() is None and merged_cache.save("m", "abc", random_checkpoint("tiny")) is None
    assert os.environ[merged_cache.ENV_DIR] == "off"


def test_fast_layout_refuses_other_devices() -> None:
    ck = to_fast(random_checkpoint("tiny"))
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA"):
            Engine.from_checkpoint(ck, device="cuda")
    else:  # pragma: no cover - GPU machines
        with pytest.raises(ValueError, match="CPU only"):
            Engine.from_checkpoint(ck, device="cuda")


def test_first_start_serves_the_cache_it_just_built(cache: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The first start merges and quantises, saves the cache, then serves the cache's memory-mapped copy
    (the built tensors are released: the server's RSS is a later start's, not the build's)."""
    import engine.default as default

    adapter, base = tmp_path / "adapter", tmp_path / "base.gguf"
    for p in (adapter.with_suffix(".safetensors"), adapter.with_suffix(".json"), base):
        p.write_bytes(b"stand-in")
    built = []
    monkeypatch.setattr(default, "_merged", lambda a, b: built.append(1) or random_checkpoint("tiny"))
    first = default.load_default(adapter, base, fast_cpu=True)
    assert built == [1] and first.meta["merged_cache"].endswith(".safetensors")
    second = default.load_default(adapter, base, fast_cpu=True)
    assert built == [1] and second.meta["merged_cache"] == first.meta["merged_cache"]
    assert all(torch.equal(first.state_dict[n], second.state_dict[n]) for n in first.state_dict)


def test_to_fast_consumes_the_float_weights_and_converts_them_as_before() -> None:
    """The float state dict is emptied (each layer's float weights can go as it is converted: the first start's
    peak), and the int8 model is the one `fastcpu.convert` makes of the same weights."""
    from engine.model import Transformer

    src = random_checkpoint("tiny")
    ref = Transformer(src.args)
    ref.load_state_dict({k: v.clone() for k, v in src.state_dict.items()})
    fastcpu.convert(ref)
    ck = to_fast(src)
    assert src.state_dict == {} and ck.meta["layout"] == fastcpu.FORMAT
    want = ref.state_dict()
    assert set(ck.state_dict) == set(want)
    assert all(torch.equal(ck.state_dict[k], want[k]) for k in want)


def test_int4_copy_is_kept_beside_its_entry(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first engine over a cache entry packs the int4 MLP copy and keeps it beside the entry; the next
    loads it (nothing packed) and answers the same; a broken copy is packed again; eviction removes it."""
    monkeypatch.setenv("EDIT_SERVER_INT4", "line")
    ck = to_fast(random_checkpoint("tiny"))
    k = f"{1:020x}"
    merged_cache.save("m", k, ck)
    fim = FimPrompt("def f(x):\n    return ", "\n")

    def engine() -> Engine:
        back = merged_cache.load("m", k)
        assert back is not None
        return Engine.from_checkpoint(back, device="cpu")

    first = engine()
    side = merged_cache.int4_path(cache / f"m-{k}.safetensors", fastcpu.INT4_GROUP)
    assert first.info["int4_matrices"] > 0 and side.is_file()
    a = first.infill(fim, max_tokens=8, single_line=True)
    packs: list[int] = []
    real = fastcpu.pack_int4
    monkeypatch.setattr(fastcpu, "pack_int4", lambda *a, **kw: packs.append(1) or real(*a, **kw))
    second = engine()
    assert packs == [] and second.info["int4_matrices"] == first.info["int4_matrices"]
    assert second.infill(fim, max_tokens=8, single_line=True).tokens == a.tokens
    side.write_bytes(b"broken")
    assert engine().info["int4_matrices"] == first.info["int4_matrices"] and len(packs) > 0
    assert side.stat().st_size > 100  # written again
    for i in range(2, merged_cache.KEEP + 2):  # newer entries push this one out, its int4 copy with it
        os.utime(cache / f"m-{k}.safetensors", ns=(1, 1))
        merged_cache.save("m", f"{i:020x}", ck)
    assert not (cache / f"m-{k}.safetensors").exists() and not side.exists()
