"""How an operator is defined (aot_ops/_core): its counts are one Arity, its identity comes from one module, and
its inferred outputs live in one cache that MindSpore's callbacks and the PyNative front share."""
from __future__ import annotations

import mindspore as ms
import pytest
import torch

import aot_ops
from aot_ops import Backward, OpDef, aten
from aot_ops._core import bprops
from aot_ops._core import front
from aot_ops._core.arity import Arity
from aot_ops._core.identity import FRESH, STABLE
from aot_ops._core.primitive import IDENTITY_ATTR, IO_ATTR
from support import assert_same, sample, to_ms, to_torch


def test_arity_checks_calls_with_the_operators_name():
    arity = Arity(3, 1, required=1)
    arity.check_call("Op", 1, may_omit_optional=True)
    arity.check_call("Op", 3, may_omit_optional=False)
    with pytest.raises(TypeError, match=r"^Op: expected 1 to 3 inputs, got 4$"):
        arity.check_call("Op", 4, may_omit_optional=True)
    with pytest.raises(TypeError, match=r"^Op: expected 3 input\(s\), got 1$"):  # a graph passes all of them
        arity.check_call("Op", 1, may_omit_optional=False)
    Arity().check_call("Op", 17, may_omit_optional=False)  # decided per call: anything goes
    assert arity.has_optional_inputs and not Arity(2).has_optional_inputs
    assert (Arity(2).io_attribute(), Arity(2, 3).io_attribute(), Arity().io_attribute()) == ([2], [2, 3], None)
    assert Arity(2, 1).registration_name("AtenOp") == "AtenOp_2_1"
    with pytest.raises(ValueError, match="both counts"):
        Arity(2).registration_name("AtenOp")
    with pytest.raises(ValueError, match="required"):
        Arity(2, required=3)


def test_the_arity_reaches_the_kernel_and_comes_from_the_signature_when_there_is_one():
    add = aot_ops.add()
    assert add.arity == Arity(2, 1)  # MS_EXT_KERNEL's exported signature
    assert list(add.attrs[IO_ATTR]) == [2, 1]
    # An ATen operator with an optional trailing tensor: the arity given by its definition.
    layer_norm = aten.op("aten::layer_norm", normalized_shape=[4])
    primitive = getattr(layer_norm, "op", layer_norm)
    assert primitive.arity.inputs == 3 and primitive.arity.min_inputs == 1
    x = sample((2, 4), torch.float32)
    assert_same(to_torch(layer_norm(to_ms(x))), torch.nn.functional.layer_norm(x, [4]))


def test_identity_policies():
    library = aot_ops.library_path()

    def identity(op):
        return op.attrs[IDENTITY_ATTR]

    one, two = (OpDef(library, "LeakyRelu", {"negative_slope": 0.25}).build() for _ in range(2))
    assert identity(one) == identity(two) == "libaot_ops_cpu.so:LeakyRelu(negative_slope=0.25)"
    assert identity(OpDef(library, "LeakyRelu", {"negative_slope": 0.5}).build()) != identity(one)
    fresh = [identity(OpDef(library, "LeakyRelu", {"negative_slope": 0.25}, identity=FRESH).build()) for _ in "ab"]
    assert fresh[0] != fresh[1] and identity(one) not in fresh
    assert identity(OpDef(library, "LeakyRelu", {"negative_slope": 0.25}, identity="mine").build()) == "mine"
    assert identity(OpDef(library, "LeakyRelu", identity=STABLE).build()) == "libaot_ops_cpu.so:LeakyRelu()"
    with pytest.raises(TypeError, match="LeakyRelu: an identity is STABLE, FRESH or a non-empty string"):
        OpDef(library, "LeakyRelu", identity=3).build()
    # A bare AotOp (made by hand) gets a fresh one.
    assert identity(aot_ops.AotOp(library, "LeakyRelu")) != identity(aot_ops.AotOp(library, "LeakyRelu"))


@pytest.mark.skipif(not front.active(), reason=f"the fast front is not active: {front.status()}")
@pytest.mark.parametrize("make", [
    # An operator of its own (FRESH): the ready add is shared within the process, and its cache is keyed by
    # dtypes alone (shapes come from C++).
    lambda: OpDef(aot_ops.library_path(), "Add", backward=Backward("AddGrad", bprops.cotangent_then_inputs, 2),
                  identity=FRESH).build(),
    lambda: aten.op("aten::atan2"),
], ids=["inferred_in_cpp", "inferred_in_python"])
def test_one_cache_entry_per_input_signature_for_the_front_and_the_custom_path(make):
    op = make()
    primitive = getattr(op, "op", op)
    # A shape no other test uses: aten.op's operators are shared within the process.
    x, y = sample((3, 11, 5), torch.float32), sample((3, 11, 5), torch.float32, seed=1)
    entries = len(primitive.outputs)
    before = front.launches()
    eager = to_torch(op(to_ms(x), to_ms(y)))  # reading waits for the launch
    assert front.launches() == before + 1
    assert len(primitive.outputs) == entries + 1

    # Under gradient recording the call takes the Custom path, and MindSpore asks for the outputs again.
    def loss(a, b):
        return op(a, b).sum()

    ms.grad(loss, grad_position=(0, 1))(to_ms(x), to_ms(y))
    assert len(primitive.outputs) == entries + 1  # the front's entry answered it
    assert_same(eager, torch.add(x, y) if primitive.symbol == "Add" else torch.atan2(x, y))
    op(to_ms(x.double()), to_ms(y.double()))
    assert len(primitive.outputs) == entries + 2


def test_generic_bprops_name_every_input_for_any_count():
    """GRAPH_MODE compiles a bprop from its source, which must name every input: the generic bprops are written
    per count into an imported file, for counts the old fixed definitions stopped at (8), and call the backward
    with the inputs in order."""
    import inspect

    from aot_ops._core import bprops

    calls = []
    bprop = bprops.inputs_then_cotangent(lambda *args: calls.append(args) or args, 11)
    parameters = list(inspect.signature(bprop).parameters)
    assert parameters == [f"a{i}" for i in range(11)] + ["out", "dout"]
    assert "backward(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, dout)" in inspect.getsource(bprop)
    bprop(*range(11), "out", "dout")
    assert calls == [(*range(11), "dout")]
    spread = bprops.inputs_then_cotangents(lambda *args: args, 2)
    assert spread("x", "y", "out", ("d0", "d1")) == ("x", "y", "d0", "d1")
    single = bprops.cotangent_then_inputs(lambda *args: args, 1)
    assert single("x", "out", "d") == (("d", "x"),)  # one input: one gradient, returned as a 1-tuple
    assert bprops.inputs_then_cotangent(lambda *args: args, 0) is None
