"""Memory of a process that ports many models and drops them (a service, a notebook, a test session): resident
memory growth per ported-and-dropped model, each configuration in a fresh process.

    .venv/bin/python benchmarks/port_churn.py [--models 50] [--hidden 16] [--only NAME]... [--recycle] [--detail]

Each model is a small MLP of its own (1 to 3 hidden layers of width hidden + k % 7, input width 8 + k, LeakyReLU
with slope (k + 1) / 100, so that no two models make the same program; --hidden 1024 gives each 4-12 MB of
weights), ported with from_torch, called once on a batch of 2 (checked against torch), then dropped and
gc.collect()ed. Reported: the growth of VmRSS per model over the models after the 10th (the first ones fill caches
that do not grow after), and what the bundled library still holds at the end (program keys held by Program
objects / parsed programs alive). --detail adds the Python object types whose count grew most over those models
and the entries added to linecache; --recycle calls ms.ms_memory_recycle() after each model (MindSpore's public
call that drops every graph it compiled, those of live cells too).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

CONFIGS = {  # name -> (MindSpore mode, fuse, jit, evaluation_only)
    "fused PyNative": ("PYNATIVE_MODE", True, True, False),
    "fused PyNative jit=False": ("PYNATIVE_MODE", True, False, False),
    "fused GRAPH_MODE": ("GRAPH_MODE", True, True, False),
    "fused PyNative evaluation_only": ("PYNATIVE_MODE", True, True, True),
    "fused GRAPH_MODE evaluation_only": ("GRAPH_MODE", True, True, True),
    "per node PyNative": ("PYNATIVE_MODE", False, True, False),
    "per node GRAPH_MODE": ("GRAPH_MODE", False, True, False),
}

CHILD = r'''
import collections, gc, json, linecache, sys, time
import mindspore as ms, numpy as np, torch
import aot_ops

mode, fuse, jit, evaluation_only, models, hidden_width, recycle, detail = json.loads(sys.argv[1])
ms.set_context(mode=getattr(ms, mode))
try:
    from aot_ops._core.native_state import program_counts
except ImportError:  # a library from before programs were owned by their cells
    program_counts = dict


def rss_mb():
    with open("/proc/self/status") as status:
        return next(int(l.split()[1]) / 1024 for l in status if l.startswith("VmRSS:"))


def types():
    return collections.Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.get_objects())


def port_call_drop(k):
    torch.manual_seed(k)
    width, hidden = 8 + k, hidden_width + k % 7
    layers = [torch.nn.Linear(width, hidden), torch.nn.LeakyReLU((k + 1) / 100)]
    for _ in range(k % 3):
        layers += [torch.nn.Linear(hidden, hidden), torch.nn.LeakyReLU((k + 1) / 100)]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(hidden, 4)).eval()
    x = torch.randn(2, width)
    cell = aot_ops.from_torch(model, (x,), fuse=fuse, jit=jit, evaluation_only=evaluation_only)
    out = cell(ms.Tensor(x.numpy())).asnumpy()
    assert np.allclose(out, model(x).detach().numpy(), atol=1e-5)


rss, start = [], time.time()
for k in range(models):
    port_call_drop(k)
    gc.collect()
    if recycle:
        ms.ms_memory_recycle()
    rss.append(rss_mb())
    if k == 9:
        lines, counts = set(linecache.cache), types() if detail else None
facts = {"mb_per_model": (rss[-1] - rss[9]) / (models - 10), "rss_first": rss[0], "rss_10th": rss[9],
         "rss_last": rss[-1], "seconds": time.time() - start, "programs": program_counts()}
if detail:
    grown = types()
    facts["grew"] = sorted(((t, n - counts.get(t, 0)) for t, n in grown.items() if n - counts.get(t, 0) >= models - 10),
                           key=lambda tn: -tn[1])[:20]
    added = [key for key in linecache.cache if key not in lines]
    facts["linecache_added"] = len(added)
    facts["linecache_examples"] = added[:3]
print(json.dumps(facts))
'''


def measure(config: tuple, models: int, hidden: int, recycle: bool, detail: bool) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps([*config, models, hidden, recycle, detail])],
                          capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=50)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--only", action="append", choices=sorted(CONFIGS))
    parser.add_argument("--recycle", action="store_true")
    parser.add_argument("--detail", action="store_true")
    args = parser.parse_args()
    print(f"| configuration | MB per model (models 11-{args.models}) | RSS after 1 / 10 / {args.models} | seconds "
          "| programs held / alive after |")
    print("|---|---|---|---|---|")
    for name, config in CONFIGS.items():
        if args.only and name not in args.only:
            continue
        facts = measure(config, args.models, args.hidden, args.recycle, args.detail)
        programs = facts["programs"]
        kept = f"{programs['held']} / {programs['alive']}" if programs else "(not counted)"
        print(f"| {name} | {facts['mb_per_model']:.2f} | {facts['rss_first']:.0f} / {facts['rss_10th']:.0f} / "
              f"{facts['rss_last']:.0f} MB | {facts['seconds']:.0f} | {kept} |", flush=True)
        if args.detail:
            print(f"    grew: {facts['grew']}\n    linecache: +{facts['linecache_added']} "
                  f"{facts['linecache_examples']}", flush=True)


if __name__ == "__main__":
    main()
