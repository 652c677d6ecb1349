"""CPU kernels: the int8 layout and its GEMMs (`fastcpu`), oneDNN for prefill-sized attention (`gemm`)."""
