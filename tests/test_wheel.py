"""aot_ops as users install it: sdist -> wheel (with build isolation) -> a fresh virtual environment, used from
outside the checkout.

One build serves both acceptance paths: the wheel is built from the unpacked sdist, in an isolated build
environment (python -m build, its requirements installed by uv), so a file missing from the sdist fails here (a wheel built straight from the checkout runs the same
setup.py on a superset of the files). The fresh environment reuses the MindSpore, torch and numpy already
installed (each package of this environment is linked into its site-packages) instead of downloading them, so
torch sits beside aot_ops as pip would put it, and only aot_ops comes from the wheel.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from importlib.metadata import version
from pathlib import Path

import pytest

from support import REPO

TORCH = version("torch").split("+")[0]  # the installed release, as a build record names it

pytestmark = pytest.mark.slow  # builds an sdist and a wheel and installs them into a new environment (~6 min)

# This environment's packages that must not be reused: aot_ops itself (the editable install of the checkout).
NOT_REUSED = re.compile(r"^(aot_ops|__editable__|__pycache__)")


def _run(cmd, cwd, env=None, timeout=1800):
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def _clean_env(home: Path) -> dict[str, str]:
    """What a user's shell has: no PYTHONPATH into the checkout, no LD_LIBRARY_PATH, their own build cache."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV")}
    env["AOT_OPS_CACHE"] = str(home / "aot_cache")
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv python, work folder, facts) with aot_ops installed from the wheel built from the sdist."""
    work = tmp_path_factory.mktemp("wheel")
    dist = work / "dist"
    facts = {}
    # The sdist needs no compiler and no isolated torch: its build environment is this one.
    _run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", dist, REPO], cwd=work)
    (sdist,) = dist.glob("aot_ops-*.tar.gz")
    # The wheel from the unpacked sdist, as pip builds it, in an isolated environment holding only pyproject's
    # build requirements; uv installs them (from the cache ./run.sh filled: seconds, where pip took 1.5 min).
    shutil.unpack_archive(sdist, work / "unpacked")
    (unpacked,) = (work / "unpacked").iterdir()
    start = time.monotonic()
    _run([sys.executable, "-m", "build", "--wheel", "--installer", "uv", "-o", dist, unpacked], cwd=work)
    facts["wheel build s"] = time.monotonic() - start
    (wheel,) = dist.glob("aot_ops-*.whl")
    facts["wheel MB"] = wheel.stat().st_size / 2**20
    facts["sdist MB"] = sdist.stat().st_size / 2**20

    venv = work / "venv"
    # Without its own pip and setuptools: those of this environment are reused too (the example package's build
    # needs a setuptools as recent as the one aot_ops is built with).
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=work)
    python = venv / "bin" / "python"
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=work)
                .stdout.strip())
    ours = Path(_run([sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=work).stdout.strip())
    for entry in ours.iterdir():
        if not NOT_REUSED.match(entry.name) and not (site / entry.name).exists():
            (site / entry.name).symlink_to(entry)
    start = time.monotonic()
    # --no-index: every dependency the wheel declares must already be satisfied by the reused packages.
    _run([python, "-m", "pip", "install", "--no-index", wheel], cwd=work, env=_clean_env(work))
    facts["install s"] = time.monotonic() - start
    print(json.dumps(facts))  # shown with pytest -s; the figures in the README come from here
    return python, work, facts


def _python(installed, source: str, timeout=600) -> str:
    python, work, _ = installed
    script = work / "check.py"
    script.write_text(textwrap.dedent(source))
    return _run([python, script], cwd=work, env=_clean_env(work), timeout=timeout).stdout


def test_installed_package_is_the_wheel_with_its_sources(installed):
    out = _python(installed, """
        import aot_ops, aot_ops._aten, aot_ops._port, aot_ops._port.lm.kv_cache, aot_ops.tools.fuzz  # (the stages too)
        from aot_ops._native import paths as _paths
        from aot_ops.ascendc import npu as ascendc_npu
        print(aot_ops.__file__)
        print((_paths.source_dir("kernels") / "cuda" / "add2.cu").is_file(), ascendc_npu.npu_project().is_dir())
        print((_paths.source_dir("ms_ext") / "include" / "ms_ext" / "ms_ext.h").is_file())
        from aot_ops._build import runtime  # ms_ext's runtime compiled by the wheel's build, linked by later ones
        print([(o.parent.name, o.parent.parent == _paths.LIB_DIR) for o in runtime.prebuilt() or []])
    """)
    location, sources, headers, runtime = out.split("\n")[:4]
    assert "site-packages" in location and str(REPO) not in location
    assert sources == "True True" and headers == "True"
    assert runtime == str([("ms_ext_runtime", True)] * 6), runtime


def test_every_library_of_the_wheel_searches_only_beside_itself(installed):
    """No RPATH (it outranks LD_LIBRARY_PATH), and RUNPATH entries relative to $ORIGIN only: a build-time folder
    (pip's temporary build environment under /tmp) would be searched wherever the wheel is installed."""
    out = _python(installed, "import aot_ops, pathlib; print(pathlib.Path(aot_ops.__file__).parent)")
    libraries = sorted(Path(out.strip()).rglob("*.so"))
    assert {p.name for p in libraries} >= {"libaot_ops_cpu.so", "_pynative_front.so"}, libraries
    for library in libraries:
        dynamic = subprocess.run(["readelf", "-d", library], capture_output=True, text=True, check=True).stdout
        assert "(RPATH)" not in dynamic, (library.name, dynamic)
        for line in dynamic.splitlines():
            if "(RUNPATH)" in line:
                for entry in line.split("[", 1)[1].rsplit("]", 1)[0].split(":"):
                    assert entry.startswith("$ORIGIN"), (library.name, entry)


def test_bundled_library_finds_torch_beside_itself(installed):
    out = _python(installed, "import aot_ops; print(aot_ops.library_path())")
    library = Path(out.strip())
    runpath = subprocess.run(["readelf", "-d", library], capture_output=True, text=True).stdout
    assert "[$ORIGIN/../../torch/lib]" in runpath, runpath


def test_classic_custom_op_loads_without_importing_torch(installed):
    out = _python(installed, """
        import sys
        import numpy as np
        import mindspore as ms
        from mindspore import ops
        from aot_ops._build.bundled import library_path
        op = ops.Custom(f"{library_path()}:LeakyRelu", out_shape=lambda x: x, out_dtype=lambda x: x,
                        func_type="aot")
        y = op(ms.Tensor(np.array([[0.0, -0.5], [-2.0, 1.0]], np.float32))).asnumpy()
        print(y.tolist(), "torch" in sys.modules)
    """)
    assert out.strip() == "[[0.0, -0.004999999888241291], [-0.019999999552965164, 1.0]] False"


def test_ready_operator_forward_and_gradient_aten_and_load_inline(installed):
    out = _python(installed, """
        import mindspore as ms, numpy as np, torch
        import aot_ops
        from aot_ops import aten

        x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
        op = aot_ops.leaky_relu(0.2)
        y = op(ms.Tensor(x)).asnumpy()
        g = ms.grad(lambda t: op(t).sum())(ms.Tensor(x)).asnumpy()
        tx = torch.tensor(x, requires_grad=True)
        torch.nn.functional.leaky_relu(tx, 0.2).sum().backward()
        print(np.abs(y - torch.nn.functional.leaky_relu(tx, 0.2).detach().numpy()).max(),
              np.abs(g - tx.grad.numpy()).max())

        z = aten.op("aten::hardtanh", min_val=-0.5, max_val=0.5)(ms.Tensor(x)).asnumpy()
        print(np.abs(z - np.clip(x, -0.5, 0.5)).max())

        lib = aot_ops.load_inline("wheel_double", '''
            #include <ATen/ops/mul.h>
            #include <ms_ext/ms_ext.h>
            MS_EXT_KERNEL(Double, ms_ext::Signature().inputs(1).outputs(1).dtypes(ms_ext::floating_types())
                                      .shapes(ms_ext::same_shape_as_input0).types(ms_ext::same_type_as_input0)) {
              at::mul_out(call.output(0), call.input(0), 2);
            }
        ''')
        d = aot_ops.AotOp(lib.path, "Double")(ms.Tensor(x)).asnumpy()
        print(np.abs(d - 2 * x).max())
    """)
    assert [float(v) for v in out.split()] == [0.0, 0.0, 0.0, 0.0], out


def test_console_script_doctor_and_version(installed):
    python, work, _ = installed
    script = python.parent / "aot-ops"
    version = _run([script, "--version"], cwd=work, env=_clean_env(work)).stdout
    assert version.strip() == "aot_ops 0.1.0"
    # exit status 0 (`_run` checks it): nothing blocks (the table's rendering: tests/test_doctor.py)
    findings = json.loads(_run([script, "doctor", "--json"], cwd=work, env=_clean_env(work)).stdout)
    bundled = [f for f in findings if f["check"].startswith("bundled lib")]
    assert len(bundled) == 2 and all(f["status"] == "ok" for f in bundled), bundled
    for finding in bundled:
        assert "loads without `import torch`, RUNPATH $ORIGIN/../../torch/lib" in finding["detail"], finding
        assert f"built against mindspore 2.10, torch {TORCH}" in finding["detail"], finding
    usage = subprocess.run([script, "frobnicate"], cwd=work, env=_clean_env(work), capture_output=True, text=True)
    assert usage.returncode == 2 and "invalid choice" in usage.stderr
    broken = work / "broken.cpp"
    broken.write_text("#include <ms_ext/ms_ext.h>\nint f() { return undeclared; }\n")
    build = subprocess.run([script, "build", broken, "-o", work / "broken.so"], cwd=work, env=_clean_env(work),
                           capture_output=True, text=True)
    assert build.returncode == 3 and "broken.cpp:2" in build.stderr, build.stderr


def test_library_built_for_another_torch_is_refused(installed):
    out = _python(installed, """
        import json
        import aot_ops
        from aot_ops._native.paths import LIB_DIR
        record = LIB_DIR / "libaot_ops_cpu.so.build.json"
        saved = record.read_text()
        record.write_text(json.dumps({**json.loads(saved), "torch": "2.12.0"}))
        try:
            aot_ops.library_path()
        except RuntimeError as exc:
            print(type(exc).__name__, exc)
        finally:
            record.write_text(saved)
        print(aot_ops.library_path().name)
    """)
    assert "StaleLibraryError" in out and f"was built against torch 2.12.0 (installed: {TORCH}" in out
    assert "rebuild aot_ops" in out and out.strip().endswith("libaot_ops_cpu.so")


def test_downstream_package_builds_a_kernel_library_with_the_setuptools_helper(installed):
    python, work, _ = installed
    package = work / "kernel_package"  # a copy: pip builds in the source folder
    shutil.copytree(REPO / "examples" / "kernel_package", package)
    _run([python, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps", package], cwd=work,
         env=_clean_env(work))
    out = _python(installed, """
        import mindspore as ms, numpy as np, torch
        import scaled_ops
        x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
        op = scaled_ops.scaled_tanh(1.5)
        y = op(ms.Tensor(x)).asnumpy()
        g = ms.grad(lambda t: op(t).sum())(ms.Tensor(x)).asnumpy()
        tx = torch.tensor(x, requires_grad=True)
        (1.5 * torch.tanh(tx)).sum().backward()
        print(scaled_ops.LIBRARY.parent.parent.name, np.abs(y - 1.5 * np.tanh(x)).max(),
              np.abs(g - tx.grad.numpy()).max())
    """)
    where, forward, gradient = out.split()
    assert where == "site-packages"
    assert float(forward) < 1e-6 and float(gradient) < 1e-6
    runpath = subprocess.run(["readelf", "-d", work / "venv" / "lib" / "python3.11" / "site-packages" /
                              "scaled_ops" / "libscaled_ops.so"], capture_output=True, text=True).stdout
    assert "[$ORIGIN/../torch/lib]" in runpath, runpath
