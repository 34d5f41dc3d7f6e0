"""add2 against torch's own add on the GPU: time per call, the ratio, and the achieved memory bandwidth as a
fraction of the GPU's peak (a time.py-style benchmark; needs a GPU and a CUDA build of torch).

    TORCH_CUDA_ARCH_LIST=9.0 python benchmarks/add2_time.py [--library path/to/lib.so]

add2 is called through its PyTorch operator (torch.ops.aot_ops_cuda.add2) and through the aot entry point with
MindSpore's seven arguments (aot_ops.harness, on a non-default stream), timed with CUDA events.
"""
import argparse

import torch

import aot_ops.cuda
from aot_ops import harness

# Peak DRAM bandwidth (bytes/s) of GPUs this benchmark has met; others: --peak-gbps.
PEAK_BYTES_PER_S = {"H100 80GB HBM3": 3.35e12, "H100 PCIe": 2.0e12, "H200": 4.8e12, "A100-SXM4-80GB": 2.04e12}


def time_ms(fn, repeat=50):
    for _ in range(5):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(repeat):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeat


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--library", help="a library holding add2 (default: JIT build)")
    parser.add_argument("--peak-gbps", type=float, help="the GPU's peak memory bandwidth in GB/s")
    args = parser.parse_args()
    lib = args.library or aot_ops.cuda.add2_library()
    aot_ops.cuda.load_torch_op(lib)
    path = lib if isinstance(lib, str) else lib.path
    name = torch.cuda.get_device_name()
    peak = args.peak_gbps * 1e9 if args.peak_gbps else next((v for k, v in PEAK_BYTES_PER_S.items() if k in name), None)
    print(f"device: {name}; torch {torch.__version__}; peak {peak / 1e9 if peak else float('nan'):.0f} GB/s")
    print(f"{'dtype':>8} {'elements':>11} {'torch.add':>10} {'add2 op':>9} {'add2 aot':>9} {'op/torch':>9} "
          f"{'GB/s':>7} {'of peak':>8}")
    stream = torch.cuda.Stream()
    for dtype in (torch.float32, torch.float16):
        for n in (1 << 20, 1 << 24, 1 << 28):
            a, b = torch.randn(n, device="cuda", dtype=dtype), torch.randn(n, device="cuda", dtype=dtype)
            out = torch.empty_like(a)
            torch.testing.assert_close(torch.ops.aot_ops_cuda.add2(a, b), a + b)
            t_torch = time_ms(lambda: torch.add(a, b, out=out))
            t_op = time_ms(lambda: torch.ops.aot_ops_cuda.add2(a, b))
            with torch.cuda.stream(stream):
                t_aot = time_ms(lambda: harness.call(path, "Add2", [a, b], [out], stream=stream.cuda_stream))
            moved = 3 * n * a.element_size()  # read a and b, write out
            gbps = moved / (t_op * 1e-3) / 1e9
            frac = f"{gbps * 1e9 / peak:.0%}" if peak else "?"
            print(f"{str(dtype).split('.')[-1]:>8} {n:>11} {t_torch:>7.3f} ms {t_op:>6.3f} ms {t_aot:>6.3f} ms "
                  f"{t_op / t_torch:>9.2f} {gbps:>7.0f} {frac:>8}")


if __name__ == "__main__":
    main()
