"""ms_ext's NPU placement without an NPU.

Compiled and linked: every unit of the bundled ATen kernels with NPU placement, and ms_ext's NPU runtime unit
against torch_npu's own headers and libtorch_npu.so (torch-npu's wheel for this torch, fetched into a download
cache outside the project's environment: nothing of it is installed). Run: the same kernel objects linked with a
test PrivateUse1 device backed by CPU memory (tests/kernels/npu_test_device.cpp), called as MindSpore calls them:
MindSpore's buffers viewed on the "npu" device, MindSpore's stream made current through c10's guard registry, the
ATen calls dispatched to that device, the results in MindSpore's buffers. What only an Ascend machine runs is
ms_ext/src/npu_runtime.cpp (three ACL calls and torch_npu's getStreamFromExternal): docs/npu.md.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from aot_ops._build import builder, bundled, npu
from npu_support import fetch_torch_npu

pytestmark = pytest.mark.slow  # downloads torch-npu once (44 MB), compiles the kernels for the NPU (minutes)

REPO = Path(__file__).resolve().parent.parent
TEST_DEVICE = REPO / "tests" / "kernels" / "npu_test_device.cpp"
@pytest.fixture(scope="module")
def npu_builds(tmp_path_factory):
    """Both libraries from one build folder: the kernel objects are compiled once with NPU placement, then linked
    against torch_npu (a link check: CANN's runtime is absent) and with the test device (loaded and run)."""
    toolchain = npu.NpuToolchain(fetch_torch_npu())
    build_dir = tmp_path_factory.mktemp("npu_build")
    kernels = bundled.aten_kernel_units(REPO / "kernels", build_dir / "generated")  # as setup.py compiles them
    check = builder.LibrarySpec(name="aot_ops_npu_check", sources=kernels, npu_toolchain=toolchain)
    builder.write_ninja_file(check, build_dir, build_dir / "aot_ops_npu_check.so")
    builder.run_ninja(build_dir)
    link_log = (build_dir / "build.log").read_text()
    device = builder.LibrarySpec(name="aot_ops_npu_test_device", sources=[*kernels, TEST_DEVICE],
                                 npu_toolchain=toolchain, npu_runtime_in_sources=True)
    test_library = builder.build_library(device, build_dir, build_dir / "published" / "libaot_ops_npu_test.so")
    return {"check": build_dir / "aot_ops_npu_check.so", "link_log": link_log, "test": test_library,
            "toolchain": toolchain}


def _dynamic_symbols(library: Path, defined: bool) -> set[str]:
    flag = "--defined-only" if defined else "--undefined-only"
    out = subprocess.run(["nm", "-D", flag, str(library)], capture_output=True, text=True, check=True).stdout
    # undefined: "U name"; a weak reference ("w") may stay unresolved by design
    return {line.split()[-1].split("@")[0] for line in out.splitlines()
            if line.split() and (defined or line.split()[0] == "U")}


def test_npu_units_link_against_torch_npu_leaving_only_cann_symbols(npu_builds):
    library = npu_builds["check"]
    needed = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    assert "[libtorch_npu.so]" in needed, needed
    # What the linker could not resolve in torch, torch_npu or the system libraries: CANN's runtime alone
    reported = set(re.findall(r"undefined reference to `([^']+)'", npu_builds["link_log"]))
    print("undefined after linking:", sorted(reported))
    assert reported and all(name.startswith("acl") for name in reported), reported
    providers = [npu_builds["toolchain"].torch_npu / "lib" / "libtorch_npu.so",
                 *(Path(torch.__file__).parent / "lib" / name for name in ("libc10.so", "libtorch_cpu.so",
                                                                            "libtorch.so"))]
    defined = set().union(*(_dynamic_symbols(p, defined=True) for p in providers))
    undefined = _dynamic_symbols(library, defined=False) - defined - _system_symbols()
    assert undefined == reported, (sorted(undefined), sorted(reported))
    # every entry point of the CPU library is in the NPU one: the same sources
    entries = {s for s in _dynamic_symbols(library, defined=True) if re.fullmatch(r"[A-Z]\w*", s)}
    assert {"LeakyRelu", "Matmul", "AtenOp", "AtenOpBackward", "AtenProgram", "AtenProgramMulti"} <= entries


def _system_symbols() -> set[str]:
    """The symbols of the C and C++ runtimes, which every library leaves to the loader."""
    found = set()
    for name in ("libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "ld-linux-x86-64.so.2"):
        located = subprocess.run(["g++", f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
        if os.path.isabs(located) and os.path.exists(located):
            found |= _dynamic_symbols(Path(located), defined=True)
        else:
            for folder in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64"):
                if os.path.exists(os.path.join(folder, name)):
                    found |= _dynamic_symbols(Path(folder) / name, defined=True)
                    break
    return found


# Every case runs in one process: the test device registers itself for the process's life (PrivateUse1 can be
# named once), so the tests' own workers never see it.
RUN = textwrap.dedent(r"""
    import ctypes, json, sys
    import torch, torch.nn.functional as F
    from aot_ops import harness
    from aot_ops._native.opener import open_library
    from aot_ops._aten import schema
    from aot_ops._aten.encode import encode

    path = sys.argv[1]
    lib = open_library(path)
    for name in ("npu_test_ops", "npu_test_ops_off_stream", "npu_test_last_stream", "npu_test_current_stream"):
        getattr(lib, name).restype = ctypes.c_int64
    lib.npu_test_backend_name.restype = ctypes.c_char_p
    facts = {"backend": lib.npu_test_backend_name().decode()}

    def run(name, symbol, inputs, expected, stream, attrs=None):
        before, off_before = lib.npu_test_ops(), lib.npu_test_ops_off_stream()
        out = [torch.full_like(e, float("nan") if e.is_floating_point() else -7) for e in expected]
        harness.call(path, symbol, inputs, out, stream=stream, attrs=attrs)
        facts[name] = {
            "error": max(float((o.double() - e.double()).abs().max()) for o, e in zip(out, expected)),
            "ops": lib.npu_test_ops() - before,                 # ATen calls dispatched to the npu device
            "off_stream": lib.npu_test_ops_off_stream() - off_before,  # ... while no stream was current
            "stream": lib.npu_test_last_stream(),               # the current stream of the last one
            "after": lib.npu_test_current_stream(),             # restored when the call ended
        }

    def aten(overload, **fixed):
        call = schema.bind(overload, (), schema.with_open_tensors(overload, fixed))
        attrs, _inputs, _key = encode(call)
        attrs["aten_op"] = call.qualified_name
        return attrs

    torch.manual_seed(0)
    a, b, w = torch.randn(6, 9), torch.randn(6, 9), torch.randn(9, 4)
    run("leaky_relu", "LeakyRelu", [a], [F.leaky_relu(a, 0.2)], 0x5150, {"negative_slope": 0.2})
    run("matmul", "Matmul", [a, w], [a @ w], 0x6160)
    run("aten_add", "AtenOp", [a, b], [torch.add(a, b, alpha=2.5)], 0x7170,
        {**aten(torch.ops.aten.add.Tensor, alpha=2.5), "ms_ext_io": [2, 1]})
    run("aten_topk", "AtenOpMulti", [a], list(torch.topk(a, 3, dim=1)), 0x8180,
        {**aten(torch.ops.aten.topk.default, k=3, dim=1), "ms_ext_io": [1, 2]})

    # A whole ported network's program (fuse=True), run by the program entry on the device
    import aot_ops
    net = torch.nn.Sequential(torch.nn.Linear(9, 16), torch.nn.GELU(), torch.nn.LayerNorm(16)).eval()
    cell = aot_ops.from_torch(net, (a,), fuse=True, evaluation_only=True)
    (programs,) = cell.mode_programs.values()
    program = programs.program("inference")
    params = dict(net.named_parameters())
    weights = [params[i.name].detach() for i in programs.fused.inference_inputs if i.source.value == "state"]
    run("program", program.symbol, [*weights, a], [net(a).detach()], 0x9190, program.attrs)

    # An NPU runtime error (as ACL would report one) names the operator, and the next call works
    lib.npu_test_inject_error(b"ACL error 507015: aicore exception")
    try:
        harness.call(path, "LeakyRelu", [a], [torch.empty_like(a)], stream=0x5150, attrs={"negative_slope": 0.2})
        facts["injected"] = None
    except harness.AotCallError as exc:
        facts["injected"] = str(exc)
    # A refused call (wrong output shape) leaves the stream as it was
    try:
        harness.call(path, "Matmul", [a, w], [torch.empty(4, 6)], stream=0x6160)
        facts["refused"] = None
    except harness.AotCallError as exc:
        facts["refused"] = str(exc)
    facts["stream_after_refusal"] = lib.npu_test_current_stream()
    run("after_errors", "LeakyRelu", [a], [F.leaky_relu(a, 0.2)], 0x5150, {"negative_slope": 0.2})
    print(json.dumps(facts))
""")


@pytest.fixture(scope="module")
def device_run(npu_builds):
    done = subprocess.run([sys.executable, "-c", RUN, str(npu_builds["test"])], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    print(facts)
    return facts


@pytest.mark.parametrize("case", ["leaky_relu", "matmul", "aten_add", "aten_topk", "program", "after_errors"])
def test_entries_run_on_the_npu_device_on_mindspores_stream(device_run, case):
    facts = device_run[case]
    assert device_run["backend"] == "npu"
    assert facts["error"] < 1e-5, facts
    assert facts["ops"] > 0, facts          # the ATen calls reached the npu device's kernels
    assert facts["off_stream"] == 0, facts  # every one of them with MindSpore's stream current
    assert facts["stream"] == {"leaky_relu": 0x5150, "matmul": 0x6160, "aten_add": 0x7170, "aten_topk": 0x8180,
                               "program": 0x9190, "after_errors": 0x5150}[case], facts
    assert facts["after"] == 0, facts        # and the previous stream current again after the call


def test_npu_errors_name_the_operator_and_leave_the_stream(device_run):
    assert device_run["injected"] is not None
    assert device_run["injected"].startswith("LeakyRelu: NPU error: ACL error 507015: aicore exception")
    assert device_run["refused"] is not None and device_run["refused"].startswith("Matmul: output 0 has shape")
    assert device_run["stream_after_refusal"] == 0


def test_an_npu_library_is_refused_clearly_without_torch_npu_and_cann(monkeypatch, tmp_path):
    import aot_ops

    monkeypatch.setenv("AOT_OPS_TORCH_NPU", str(tmp_path / "absent"))
    source = tmp_path / "k.cpp"
    source.write_text("int x;\n")
    with pytest.raises(aot_ops.NpuSetupError, match="torch_npu is not installed"):
        aot_ops.load("npu_refused", [source], device="npu")
    with pytest.raises(FileNotFoundError, match="libaot_ops_npu.so was not built: torch_npu is not installed"):
        aot_ops.library_path("npu")
