"""engine.cpu.gemm: oneDNN for the CPU's fp32 attention GEMMs only where a probe finds it exact and faster."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F

from engine import attention
from engine.attention import attend, causal_mask
from engine.cpu import gemm as cpu_gemm

needs_setting = pytest.mark.skipif(cpu_gemm._setting() is None,
                                   reason="this PyTorch build has no oneDNN fp32-precision setting")


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(cpu_gemm.ENV, raising=False)
    m = cpu_gemm._setting()
    before = m.fp32_precision if m is not None else None
    cpu_gemm.reset_for_tests()
    yield
    cpu_gemm.reset_for_tests()
    if m is not None:
        assert m.fp32_precision == before, "the process-wide setting leaked out of a test"


def test_env_zero_keeps_pytorchs_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cpu_gemm.ENV, "0")
    probes: list[str] = []
    monkeypatch.setattr(cpu_gemm, "_probe_error", lambda: probes.append("error") or 0.0)
    d = cpu_gemm.configure()
    assert d == {"onednn": False, "why": f"${cpu_gemm.ENV}=0"}
    assert probes == [] and cpu_gemm.ENABLED is False
    assert cpu_gemm.configure() == d  # decided once


@needs_setting
def test_rounding_onednn_is_refused_and_the_setting_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def bf16_like() -> float:
        seen.append(cpu_gemm._setting().fp32_precision)
        return 4e-3  # what bf16 inputs give

    monkeypatch.setattr(cpu_gemm, "_probe_error", bf16_like)
    monkeypatch.setattr(cpu_gemm, "_probe_time", lambda reps=3: 0.001)
    d = cpu_gemm.configure()
    assert seen == ["bf16"]  # the probe ran with the setting on
    assert d["onednn"] is False and "rounds" in d["why"] and d["rel_error"] == 4e-3
    assert cpu_gemm.ENABLED is False
    assert cpu_gemm._setting().fp32_precision != "bf16"


@needs_setting
def test_slower_onednn_is_refused_but_env_one_skips_the_timing(monkeypatch: pytest.MonkeyPatch) -> None:
    times = iter([0.010, 0.0095])  # MKL 10 ms, oneDNN 9.5 ms: under the required gain
    monkeypatch.setattr(cpu_gemm, "_probe_error", lambda: 1e-7)
    monkeypatch.setattr(cpu_gemm, "_probe_time", lambda reps=3: next(times))
    d = cpu_gemm.configure()
    assert d["onednn"] is False and d["why"] == "not faster here" and d["mkl_ms"] == 10.0
    cpu_gemm.reset_for_tests()
    monkeypatch.setenv(cpu_gemm.ENV, "1")
    d = cpu_gemm.configure()
    assert d["onednn"] is True and "mkl_ms" not in d and cpu_gemm.ENABLED is True


@needs_setting
def test_onednn_block_switches_the_setting_only_inside(monkeypatch: pytest.MonkeyPatch) -> None:
    m = cpu_gemm._setting()
    outside = m.fp32_precision
    with cpu_gemm.onednn():  # not enabled: nothing changes
        assert m.fp32_precision == outside
    monkeypatch.setattr(cpu_gemm, "ENABLED", True)
    with pytest.raises(RuntimeError), cpu_gemm.onednn():
        assert m.fp32_precision == "bf16"
        raise RuntimeError("restored on errors too")
    assert m.fp32_precision == outside


@needs_setting
def test_real_probe_decision_is_consistent() -> None:
    d = cpu_gemm.configure()  # this machine's answer, whichever it is
    assert set(d) >= {"onednn", "why", "rel_error", "mkl_ms", "onednn_ms"}
    assert d["onednn"] == (d["rel_error"] <= cpu_gemm.EXACT and d["onednn_ms"] * cpu_gemm.GAIN <= d["mkl_ms"])
    assert cpu_gemm.ENABLED is d["onednn"]


@needs_setting
@pytest.mark.parametrize("prefix", [0, 200])
def test_prefill_attention_through_onednn_matches_fp64(monkeypatch: pytest.MonkeyPatch, prefix: int) -> None:
    """The calls that take the oneDNN route (>= ONEDNN_T queries) give the fp32 answer; what the route
    would change if oneDNN rounded inputs is caught by configure's probe, so force it on only when the
    probe finds this machine exact."""
    cpu_gemm.reset_for_tests()
    monkeypatch.setenv(cpu_gemm.ENV, "1")
    if not cpu_gemm.configure()["onednn"]:
        pytest.skip("oneDNN rounds fp32 inputs on this CPU (AMX): the route stays off, nothing to compare")
    calls: list[str] = []
    real = cpu_gemm.onednn
    monkeypatch.setattr(cpu_gemm, "onednn", lambda: calls.append("onednn") or real())
    g = torch.Generator().manual_seed(3)
    t = attention.ONEDNN_T + 17
    q = torch.randn(1, 6, t, 32, generator=g)
    k, v = (torch.randn(1, 2, prefix + t, 32, generator=g) for _ in range(2))
    out = attend(q, k, v, is_causal=True)
    assert calls == ["onednn"]
    mask = causal_mask(t, prefix)[None, None]
    ref = F.scaled_dot_product_attention(q.double(), k.double().repeat_interleave(3, 1),
                                         v.double().repeat_interleave(3, 1), attn_mask=mask)
    assert (out.double() - ref).abs().max().item() < 1e-5
    small = attend(q[:, :, :8], k[:, :, :prefix + 8], v[:, :, :prefix + 8], is_causal=True)
    assert calls == ["onednn"] and small.shape == (1, 6, 8, 32)  # decode-sized calls keep MKL


def test_onednn_sees_only_aligned_lengths(monkeypatch: pytest.MonkeyPatch) -> None:
    """oneDNN keeps memory per GEMM shape, so the flash calls of the oneDNN route get lengths that are
    multiples of ALIGN_Q / ALIGN_K whatever the prompt's (and the answer stays exact)."""
    seen: list[tuple[int, int, bool]] = []
    real = attention._cpu_flash

    def spy(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, p: float, causal: bool) -> object:
        seen.append((q.shape[2], k.shape[2], causal))
        return real(q, k, v, p, causal)

    monkeypatch.setattr(attention, "_cpu_flash", spy)
    monkeypatch.setattr(cpu_gemm, "ENABLED", True)
    monkeypatch.setattr(cpu_gemm, "onednn", contextlib.nullcontext)  # the route, without the setting itself
    g = torch.Generator().manual_seed(5)
    for prefix, t in ((0, 300), (700, 333), (1030, 911)):
        q = torch.randn(1, 4, t, 16, generator=g)
        k, v = (torch.randn(1, 2, prefix + t, 16, generator=g) for _ in range(2))
        out = attend(q, k, v, is_causal=True)
        ref = F.scaled_dot_product_attention(q.double(), k.double().repeat_interleave(2, 1),
                                             v.double().repeat_interleave(2, 1),
                                             attn_mask=causal_mask(t, prefix)[None, None])
        assert (out.double() - ref).abs().max().item() < 1e-5
    assert len(seen) == 5  # no cached keys: one causal call; else a causal and an unmasked one
    assert all(n % attention.ALIGN_Q == 0 and (causal or s % attention.ALIGN_K == 0) for n, s, causal in seen)
    assert all(n == s for n, s, causal in seen if causal)
