"""Which library runs the CPU's fp32 GEMMs — the attention kernel's included — decided once, measured.

PyTorch's CPU fp32 matmuls, and the GEMMs inside its CPU flash-attention kernel, go to MKL's
``sgemm``. On some CPUs oneDNN's fp32 kernels are much faster (the project's 2-core AMD EPYC, Zen 5:
a 2,048² matmul 205 → 430 GFLOPS, the default model's causal re-prefill of a next edit 1.4 → 1.0 s;
docs/PERFORMANCE.md). PyTorch routes those GEMMs to oneDNN only through its "bf16" fp32-precision
setting (``torch.backends.mkldnn.matmul.fp32_precision``), which *allows* oneDNN to round the inputs
to bf16 — it may where the CPU has fast bf16 units (AMX); on the AMD EPYC it computes in fp32 (probe
error 5e-7). So `configure` allows it only where a probe shows both:

* **exact**: a matmul and a causal attention call agree with float64 to fp32 accuracy
  (relative error below `EXACT`, where bf16 inputs give ~1e-2);
* **faster**: the probe's attention call is at least `GAIN` times faster than with MKL.

and even then the setting is on only inside `onednn()` blocks: the causal attention of prefill-sized
calls (``engine.attention``), whose flash calls get lengths aligned to 256 / 512 — oneDNN keeps ~7 MB
for every GEMM shape it has run, so free-length calls grew the process by 540 MB over 60 prefills of
random lengths (flat when aligned). Small GEMMs — decode steps of 8-32 positions — are slower through oneDNN
(a step of 8 positions over 2,048 keys 24 → 34 ms), so they keep MKL. ``$EDIT_SERVER_ONEDNN_FP32=0``
skips the probe (MKL as PyTorch ships it), ``=1`` skips the timing (still requires exactness). The
setting is process-wide while a block runs; it changes no result beyond fp32 rounding (the probe's
guarantee), so a GEMM of another thread that runs meanwhile differs in speed only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F

from engine import options

log = logging.getLogger(__name__)

ENV = options.ONEDNN_FP32  # auto (default) / 0 / 1
EXACT = 1e-5  # relative error vs float64 that counts as fp32 (bf16 inputs: ~1e-2, fp32: ~1e-7)
GAIN = 1.15  # oneDNN must be this much faster on the probe
_lock = threading.Lock()
_decision: dict[str, Any] | None = None
ENABLED = False  # configure()'s answer: onednn() blocks switch the setting on


def _setting() -> Any:
    mk = getattr(torch.backends, "mkldnn", None)
    m = getattr(mk, "matmul", None)
    if m is None or not hasattr(m, "fp32_precision") or not torch.backends.mkldnn.is_available():
        return None
    return m


def _rel(a: torch.Tensor, ref: torch.Tensor) -> float:
    return float((a.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def _probe_error() -> float:
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(96, 256, generator=g), torch.randn(256, 80, generator=g)
    err = _rel(a @ b, a.double() @ b.double())
    q, k, v = (torch.randn(1, 4, 128, 64, generator=g) for _ in range(3))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    return max(err, _rel(out, ref))


def _probe_time(reps: int = 3) -> float:
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 8, 512, 64, generator=g) for _ in range(3))
    F.scaled_dot_product_attention(q, k, v, is_causal=True)  # warm-up (oneDNN builds its kernels once)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
        best = min(best, time.perf_counter() - t)
    return best


def configure() -> dict[str, Any]:
    """Decide (once per process) whether CPU fp32 GEMMs go through oneDNN; returns the decision
    ({"onednn": bool, "why": str, ...}) for the engine's info and the logs."""
    global _decision, ENABLED
    with _lock:
        if _decision is None:
            _decision = _decide()
            ENABLED = bool(_decision["onednn"])
            log.info("cpu fp32 gemm: %s", _decision)
        return dict(_decision)


@contextmanager
def onednn() -> Iterator[None]:
    """Inside: CPU fp32 GEMMs through oneDNN, where `configure` found that exact and faster."""
    m = _setting() if ENABLED else None
    if m is None:
        yield
        return
    before = m.fp32_precision
    m.fp32_precision = "bf16"
    try:
        yield
    finally:
        m.fp32_precision = before


def _decide() -> dict[str, Any]:
    mode = options.env().onednn_mode
    m = _setting()
    if mode in ("0", "off", "false"):
        return {"onednn": False, "why": f"${ENV}={mode}"}
    if m is None:
        return {"onednn": False, "why": "this PyTorch has no oneDNN fp32-precision setting"}
    before = m.fp32_precision
    if before == "bf16":
        return {"onednn": False, "why": "already set process-wide (by the caller)"}
    try:
        mkl_s = _probe_time() if mode == "auto" else 0.0
        m.fp32_precision = "bf16"
        err = _probe_error()
        dnn_s = _probe_time() if mode == "auto" else 0.0
    except Exception as e:  # noqa: BLE001 — a probe failure keeps PyTorch's default
        return {"onednn": False, "why": f"probe failed: {type(e).__name__}: {e}"}
    finally:
        m.fp32_precision = before  # on only inside onednn() blocks
    out: dict[str, Any] = {"rel_error": float(f"{err:.2e}")}
    if mode == "auto":
        out.update(mkl_ms=round(mkl_s * 1e3, 2), onednn_ms=round(dnn_s * 1e3, 2))
    if err > EXACT:
        return {"onednn": False, "why": "oneDNN rounds fp32 inputs here (bf16)", **out}
    if mode == "auto" and dnn_s * GAIN > mkl_s:
        return {"onednn": False, "why": "not faster here", **out}
    return {"onednn": True, "why": "exact and faster" if mode == "auto" else f"${ENV}={mode}", **out}


def reset_for_tests() -> None:
    """Forget the decision (tests only; the setting itself is only ever on inside `onednn()`)."""
    global _decision, ENABLED
    with _lock:
        _decision, ENABLED = None, False
