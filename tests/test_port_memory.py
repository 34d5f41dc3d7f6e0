"""What a port keeps in memory, measured in a fresh process: the ported cell holds the weights, the port keeps no
reference to the torch module's tensors (deleting the module gives their memory back). The port's peak is printed
(`pytest -s`), not asserted: export and tracing still hold about two more copies while they run."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import gc, json, sys
    import mindspore as ms, torch
    import aot_ops

    def rss_mb(field="VmRSS"):
        with open("/proc/self/status") as status:
            return next(int(l.split()[1]) / 1024 for l in status if l.startswith(field + ":"))

    ms.set_context(mode=getattr(ms, sys.argv[1]))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(24)]).eval()  # 96 MB of float32
    weights = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    x = torch.randn(4, 1024)
    expected = model(x).detach()
    gc.collect()
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # the peak from here on
    before = rss_mb()
    cell = aot_ops.from_torch(model, (x,), fuse=True)
    ported, port_peak = rss_mb(), rss_mb("VmHWM")
    del model
    gc.collect()
    deleted = rss_mb()
    out = cell(ms.Tensor(x.numpy())).asnumpy()
    print(json.dumps({"weights": weights, "port_peak": (port_peak - before) / weights,
                      "freed": (ported - deleted) / weights,
                      "error": float(abs(torch.from_numpy(out) - expected).max())}))
""")


@pytest.mark.parametrize("mode", ["PYNATIVE_MODE", "GRAPH_MODE"])
def test_deleting_the_torch_module_after_a_port_frees_its_weights(mode):
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    print(facts)
    assert facts["error"] < 1e-4, facts
    # the module's tensors were only referenced by the module: their memory comes back
    assert facts["freed"] >= 0.8, facts
