"""How long fuse="compile" takes to port a network: compiling, then loading from the build cache.

    .venv/bin/python benchmarks/port_compile.py [--net transformer,resnet] [--threads 1]

For each network of port_step.py (with its loss, in training mode, batch 32 / 8): a fresh, empty build cache, then
three processes, each timing `from_torch(...)` followed by `set_train(False)` (so every graph the cell runs is
there: the training forward and backward, and the evaluation graph): fuse=True (interpreted, the reference), then
fuse="compile" twice, the first compiling (AOTInductor, g++) and the second loading the packages the first left.
Prints each time, the compile time of each graph (from the cache's records), and the cost of a cache hit over
the interpreted port. Each run is a new process, so no in-process cache of torch's helps the second.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

PORT = """
import sys, time
import torch
sys.path.insert(0, {here!r})
torch.set_num_threads({threads})
from port_step import BATCH, CNN_SHAPE, data, network
import aot_ops
model, shape, classes, _ = network({net!r})
batch = BATCH if {net!r} == "transformer" else CNN_SHAPE[0]
example = data(1, (batch, *shape), classes)[0]
start = time.perf_counter()
cell = aot_ops.from_torch(model, example, fuse={fuse!r}, input_grads=False)
cell.set_train(False)
print("SECONDS", time.perf_counter() - start)
"""


def port_seconds(net: str, fuse, cache: Path, threads: int) -> float:
    code = PORT.format(here=str(HERE), net=net, fuse=fuse, threads=threads)
    env = dict(os.environ, AOT_OPS_CACHE=str(cache))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"{net} fuse={fuse!r} failed:\n{out.stderr[-3000:]}")
    return float(next(line.split()[1] for line in out.stdout.splitlines() if line.startswith("SECONDS")))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--net", default="transformer,resnet")
    parser.add_argument("--threads", type=int, default=1)
    options = parser.parse_args(argv)
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}, torch threads {options.threads}")
    for net in options.net.split(","):
        with tempfile.TemporaryDirectory(prefix="aot_ops_compile_") as folder:
            cache = Path(folder)
            interpreted = port_seconds(net, True, cache, options.threads)
            compiled = port_seconds(net, "compile", cache, options.threads)
            hit = port_seconds(net, "compile", cache, options.threads)
            graphs = [json.loads(p.read_text()) for p in sorted(cache.glob("compiled/*/entry.json"))]
        print(f"{net}: fuse=True {interpreted:.2f} s; fuse='compile' compiling {compiled:.2f} s, from the cache "
              f"{hit:.2f} s (+{hit - interpreted:.2f} s over fuse=True)")
        for entry in graphs:
            print(f"  {entry['program']}: compiled in {entry['compile_seconds']:.1f} s")


if __name__ == "__main__":
    main()
