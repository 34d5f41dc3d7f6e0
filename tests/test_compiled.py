"""from_torch(..., fuse="compile"): the fused programs compiled by AOTInductor, checked against torch in both modes.

Compiling takes seconds per graph, so every network is compiled once: the packages land in the build cache, and
the tests of the other mode and of evaluation load them from there (the key does not depend on the weights).
Tolerances: a compiled graph sums in another order than torch's eager kernels (Inductor fuses and vectorises
reductions), so results agree to float32 reassociation, not bit for bit: losses within 1e-4 relative and
parameters within the from_torch tests' 1e-4 / 1e-5 after ten SGD steps.
"""
from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap
import warnings

import mindspore as ms
import pytest
import torch
from torch import nn

import aot_ops
from aot_ops._port.programs.mode_programs import program_operator
from aot_ops._port.programs.program_inputs import ProgramInput, Source
from aot_ops._port.programs.compiled import is_compiled
from port_support import assert_state_close, batches, train_mindspore, train_torch
from support import to_ms, to_torch
from test_from_torch import TRAINED
from torch_nets import ResNet, TransformerClassifier, WithLoss

# Each network's first port compiles for seconds to a minute; the tests are spread over the workers, a network's
# two modes in one group (the second mode's test borrows the first one's compiled port).
pytestmark = [pytest.mark.slow, pytest.mark.spread]


def port_compiled(model, args, shared_ports=None, name=None):
    """from_torch(fuse="compile"), failing the test if any graph fell back to its interpreted program; the port of
    another test of the same network when `shared_ports` is given (the other mode's, which compiled it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", aot_ops.CompileFallbackWarning)
        if shared_ports is not None:
            return shared_ports.port(name, model, args, fuse="compile")
        return aot_ops.from_torch(model, args, fuse="compile")


def compiled_programs(cell) -> dict[str, bool]:
    found = {}
    for mode, programs in cell.mode_programs.items():
        for name in ("forward", "backward", "inference"):
            program = programs.program(name)
            if program is not None:
                found[f"{mode}.{name}"] = is_compiled(program)
    return found


@pytest.mark.parametrize("make,shape", [pytest.param(m, s, id=m.__name__, marks=pytest.mark.xdist_group(m.__name__))
                                        for m, s in TRAINED])
def test_compiled_training_matches_torch(make, shape, mode, shared_ports):
    torch.manual_seed(1)
    model = make()
    reference = WithLoss(copy.deepcopy(model))
    data = batches(shape)
    cell = port_compiled(WithLoss(model), data[0], shared_ports, make.__name__)
    programs = compiled_programs(cell)
    training = "train" if "train.forward" in programs else "both"
    assert programs[f"{training}.forward"] and programs[f"{training}.backward"], programs
    launches = aot_ops.program_launches()
    losses = train_mindspore(cell, data)
    # One forward and one backward program call a step, in both modes: a third would be MindSpore's autodiff
    # running the cell's forward again for its backward (seen once, in a full-suite run on an earlier design of
    # the PyNative call; every case of later full suites launched exactly two).
    assert aot_ops.program_launches() - launches == 2 * len(data)
    expected = train_torch(reference, data)
    for ours, theirs in zip(losses, expected):
        assert abs(ours - theirs) <= 1e-4 * abs(theirs), (losses, expected)
    assert_state_close(cell, reference)


@pytest.mark.parametrize("make,shape", [(ResNet, (2, 3, 16, 16)), (TransformerClassifier, (4, 6, 32))],
                         ids=["ResNet", "transformer"])
def test_compiled_evaluation_forward_matches_torch(make, shape, mode, shared_ports):
    torch.manual_seed(2)
    model = make()
    train_torch(WithLoss(model), batches(shape, count=2, seed=5))  # non-trivial running statistics
    model.eval()
    x = torch.randn(*shape)
    cell = port_compiled(model, (x,), shared_ports, make.__name__)
    programs = compiled_programs(cell)
    evaluation = "eval" if "eval.inference" in programs else "both"
    assert programs[f"{evaluation}.inference"], programs
    assert not any(compiled for name, compiled in programs.items() if name.endswith(("forward", "backward")))
    for _ in range(2):
        torch.testing.assert_close(to_torch(cell(to_ms(x))), model(x).detach(), rtol=1e-5, atol=1e-5)
    assert_state_close(cell, model)


def test_compiled_and_interpreted_programs_agree():
    """The same network fused interpreted and compiled: the compiled program is a one-for-one replacement."""
    torch.manual_seed(7)
    model = WithLoss(TransformerClassifier())
    data = batches((4, 6, 32), count=3)
    interpreted = train_mindspore(aot_ops.from_torch(copy.deepcopy(model), data[0], fuse=True), data)
    compiled = train_mindspore(port_compiled(copy.deepcopy(model), data[0]), data)
    assert max(abs(a - b) / abs(b) for a, b in zip(compiled, interpreted)) <= 1e-5, (compiled, interpreted)


class SmallNet(nn.Module):
    """A network no other test compiles, so that the tests below start from an empty cache."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(7, 9), nn.Linear(9, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x))).square().mean()


def test_a_package_is_compiled_once_then_loaded_from_the_cache_without_a_compiler(aot_cache, tmp_path):
    """The first port compiles (and says so on stderr); a second process with no compiler on its PATH loads
    the packages, and its results are torch's."""
    script = textwrap.dedent("""
        import sys, time, warnings
        import torch
        import aot_ops
        from aot_ops._port.programs.compiled import is_compiled
        from aot_ops._core.convert import to_ms, to_torch
        sys.path.insert(0, sys.argv[1])
        from test_compiled import SmallNet
        warnings.simplefilter("error", aot_ops.CompileFallbackWarning)
        torch.set_num_threads(1)  # part of the key
        torch.manual_seed(0)
        model, x = SmallNet(), torch.randn(5, 7)
        start = time.perf_counter()
        cell = aot_ops.from_torch(model, (x,), fuse="compile")  # training mode: forward and backward
        cell.set_train(False)                                   # evaluation: the inference program
        seconds = time.perf_counter() - start
        (programs,) = cell.mode_programs.values()
        assert all(is_compiled(programs.program(p)) for p in ("forward", "backward", "inference"))
        torch.testing.assert_close(to_torch(cell(to_ms(x))), model(x).detach(), rtol=1e-5, atol=1e-6)
        print(f"seconds={seconds:.2f}")
    """)
    path = tmp_path / "port.py"
    path.write_text(script)
    tests = os.path.dirname(os.path.abspath(__file__))
    # The environment is given explicitly to both: MindSpore sets OMP_NUM_THREADS in this process's C environment,
    # which a child without `env` inherits and one with env=os.environ does not.
    first = subprocess.run([sys.executable, str(path), tests], capture_output=True, text=True, timeout=600,
                           env=dict(os.environ))
    assert first.returncode == 0, first.stderr[-3000:]
    assert "with AOTInductor" in first.stderr and "finished after" in first.stderr
    packages = sorted((aot_cache / "compiled").glob("*/package"))
    assert len(packages) == 3  # forward, backward, inference

    bare = tmp_path / "bin"  # a PATH with python and nothing else: no g++, no c++
    bare.mkdir()
    os.symlink(sys.executable, bare / "python")
    env = dict(os.environ, PATH=str(bare))
    second = subprocess.run([sys.executable, str(path), tests], capture_output=True, text=True, timeout=600, env=env)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "with AOTInductor" not in second.stderr  # nothing compiled
    assert sorted((aot_cache / "compiled").glob("*/package")) == packages


def test_an_error_in_aot_ops_own_code_is_raised_not_taken_for_a_compile_failure(aot_cache, monkeypatch):
    """Only what torch cannot compile falls back with a warning: an exception raised in aot_ops' own code while
    compiling (here the package's key, made to fail) is a bug to see, and propagates as it is."""
    from aot_ops._port.programs import compiled
    from aot_ops._port.errors import raised_by_aot_ops

    def bad_key(source, examples):
        return compiled.private.file_sha256(None)  # aot_ops' own helper, failing inside

    monkeypatch.setattr(compiled, "_key", bad_key)
    model, x = SmallNet(), torch.randn(5, 7)
    with warnings.catch_warnings():
        warnings.simplefilter("error", aot_ops.CompileFallbackWarning)
        with pytest.raises(TypeError) as caught:
            aot_ops.from_torch(model.eval(), (x,), fuse="compile")
    assert raised_by_aot_ops(caught.value)


def test_a_graph_that_does_not_compile_runs_interpreted_with_a_warning(aot_cache, mode, tmp_path):
    """A compiler that fails (here: one that rejects every file) leaves each graph interpreted, with a warning
    naming the graph and the reason; results are fuse=True's."""
    from torch._inductor import config

    failing = tmp_path / "failing-c++"
    failing.write_text("#!/bin/sh\ncase \"$*\" in *--version*) echo 'failing-c++ 1.0'; exit 0;; esac\n"
                       "echo 'failing-c++: error: this compiler refuses everything' >&2\nexit 1\n")
    failing.chmod(0o755)
    torch.manual_seed(3)
    model, x = SmallNet(), torch.randn(5, 7)
    with config.patch({"cpp.cxx": (None, str(failing))}):
        with pytest.warns(aot_ops.CompileFallbackWarning) as caught:
            cell = aot_ops.from_torch(model, (x,), fuse="compile")  # training mode: the forward and the backward
        messages = [str(w.message) for w in caught if w.category is aot_ops.CompileFallbackWarning]
    assert len(messages) == 2, messages
    for graph, message in zip(("forward", "backward"), messages):
        prefix = f"SmallNet (training and evaluation) {graph}: not compiled, runs interpreted (as fuse=True): "
        assert message.startswith(prefix) and len(message) > len(prefix) + 10, message  # and the reason
    torch.testing.assert_close(to_torch(cell(to_ms(x))), model(x).detach(), rtol=1e-5, atol=1e-6)
    grads = ms.grad(cell, grad_position=None, weights=cell.trainable_params())(to_ms(x))
    model(x).backward()
    for param, grad in zip(cell.trainable_params(), grads):
        torch.testing.assert_close(to_torch(grad), dict(model.named_parameters())[param.name].grad, rtol=1e-4,
                                   atol=1e-6)
    with config.patch({"cpp.cxx": (None, str(failing))}):
        with pytest.warns(aot_ops.CompileFallbackWarning,
                          match=r"SmallNet \(training and evaluation\) inference: not compiled"):
            cell.set_train(False)
    torch.testing.assert_close(to_torch(cell(to_ms(x))), model(x).detach(), rtol=1e-5, atol=1e-6)
    assert not any(compiled_programs(cell).values())
    assert not list((aot_cache / "compiled").glob("*/entry.json"))


def test_dynamic_shapes_are_refused_with_advice():
    x = torch.randn(4, 7)
    with pytest.raises(aot_ops.PortError, match=r"fuse='compile' needs static shapes.*fuse=True"):
        aot_ops.from_torch(SmallNet(), (x,), fuse="compile", dynamic_batch=True)
    with pytest.raises(ValueError, match=r"fuse='fast'.*'compile'"):
        aot_ops.from_torch(SmallNet(), (x,), fuse="fast")


def test_a_compiled_program_refuses_inputs_it_was_not_compiled_for(mode, shared_ports):
    """The generated code indexes its inputs with the compiled sizes: another shape or dtype reaching the
    program operator directly is refused by name, never read out of bounds, and the next call works."""
    torch.manual_seed(4)
    model, x = SmallNet().eval(), torch.randn(5, 7)
    cell = port_compiled(model, (x,), shared_ports, "SmallNet")
    (programs,) = cell.mode_programs.values()
    operator = program_operator(programs.program("inference"))
    inputs = programs.fused.inference_inputs
    assert inputs[-1] == ProgramInput.user("x") and all(i.source is Source.STATE for i in inputs[:-1])
    state = dict(model.named_parameters())
    weights = [to_ms(state[i.name]) for i in inputs[:-1]]
    with pytest.raises(RuntimeError, match=r"SmallNet \(training and evaluation\) inference.*input 4 is Float of "
                                           r"shape \[6, 7\]; the program was compiled for Float of shape \[5, 7\]"):
        to_torch(operator(*weights, to_ms(torch.randn(6, 7))))
    with pytest.raises(RuntimeError, match=r"input 4 is Double of shape \[5, 7\]; the program was compiled for Float"):
        to_torch(operator(*weights, to_ms(x.double())))
    torch.testing.assert_close(to_torch(operator(*weights, to_ms(x))), model(x).detach(), rtol=1e-5, atol=1e-6)


class Projections(nn.Module):
    """Two linear layers with and without a bias: a decoding step's matrix products in miniature."""

    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(64, 96), nn.Linear(96, 40, bias=False)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def test_a_half_precision_evaluation_program_multiplies_one_row_in_inductor_loops(aot_cache):
    """Batch 1 in bfloat16, a decoding step's shape: the inference program is compiled with Inductor's decomposition
    of one-row matrix products (HALF_PRECISION_MATVEC_CONFIGS: Inductor's loops stream the weights faster than
    ATen's bfloat16 product), both products decomposed, the result within bfloat16 rounding of torch eager's. The
    same network in float32 keeps Inductor's defaults (its products stay ATen's)."""
    from torch._dynamo.utils import counters

    from aot_ops._port.programs.compiled import HALF_PRECISION_MATVEC_CONFIGS, inference_configs

    torch.manual_seed(5)
    model, x = Projections().to(torch.bfloat16).eval(), torch.randn(1, 64, dtype=torch.bfloat16)
    counters["inductor"].clear()
    cell = port_compiled(model, (x,))
    (programs,) = cell.mode_programs.values()
    assert programs.fused.sources["inference"].configs == HALF_PRECISION_MATVEC_CONFIGS
    assert counters["inductor"]["decompose_addmm"] == 1 and counters["inductor"]["decompose_mm"] == 1, counters
    out = to_torch(cell(to_ms(x)))
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, model(x).detach(), rtol=1.6e-2, atol=1e-2)

    exported = torch.export.export(Projections().eval(), (x.float(),)).run_decompositions({})
    assert inference_configs(exported.graph_module) == {}
    assert inference_configs(torch.export.export(model, (x,)).run_decompositions({}).graph_module) \
        == HALF_PRECISION_MATVEC_CONFIGS
