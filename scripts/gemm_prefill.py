"""Prefill GEMMs on the CPU: the int8 x int8 path (`engine.cpu.fastcpu.Int8Linear`) against bf16 GEMMs on
weights dequantised from the same int8 rows (oneDNN; AMX where the CPU has it), at the default model's four
projection shapes per layer, for several prompt lengths; 7 interleaved repetitions, the fastest of each::

    python scripts/gemm_prefill.py            # ms per layer (x30 layers for the default model)
"""

from __future__ import annotations

import time
import warnings

import torch
import torch.nn.functional as F

from engine.cpu.fastcpu import Int8Linear

SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]  # q|k|v, o, gate|up, down (SmolLM2-135M)


def main() -> None:
    warnings.simplefilter("ignore")
    torch.set_num_threads(2)
    lins = [Int8Linear.from_weight(torch.randn(n, k) * 0.02) for n, k in SHAPES]
    print("positions | int8 x int8 ms | bf16 (dequantised) ms")
    for m in (9, 64, 256, 1024):
        xs = [torch.randn(m, k) for _, k in SHAPES]

        def int8(xs: list[torch.Tensor] = xs) -> None:
            for lin, x in zip(lins, xs, strict=True):
                lin(x)

        def bf16(xs: list[torch.Tensor] = xs) -> None:
            for lin, x in zip(lins, xs, strict=True):
                F.linear(x.bfloat16(), lin.q.to(torch.bfloat16) * lin.scale_bf16[:, None]).float()

        best = {"int8": float("inf"), "bf16": float("inf")}
        for f in (int8, bf16):
            f()
        for _ in range(7):
            for name, f in (("int8", int8), ("bf16", bf16)):
                t = time.perf_counter()
                f()
                best[name] = min(best[name], (time.perf_counter() - t) * 1000)
        print(f"{m:>9} | {best['int8']:>14.2f} | {best['bf16']:>21.2f}")


if __name__ == "__main__":
    main()
