"""Per-call timing shared by the benchmarks."""
import statistics
import time

import mindspore as ms


def per_call_us(fn, repeat: int) -> float:
    """Median over 5 rounds of the mean time per call in a loop of `repeat` calls. A MindSpore round ends by reading
    the last result back, which waits for every launch PyNative queued asynchronously."""
    for _ in range(max(3, repeat // 10)):  # warm-up: kernel creation, caches
        fn()
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeat - 1):
            fn()
        result = fn()
        if isinstance(result, ms.Tensor):
            result.asnumpy()
        rounds.append((time.perf_counter() - start) / repeat * 1e6)
    return statistics.median(rounds)
