"""Seeded generation of hostile calls: plain data (JSON), so a worker process can run a case and a report can
name it. The same (seed, index) always gives the same case.

A case is a dict with `kind` (how the operator is made), `mode` (0 GRAPH_MODE, 1 PyNative), `inputs` (tensor
specs) and what the kind needs. A tensor spec says how to make a tensor, not its values:
    {"shape": [2, 3], "dtype": "float32", "fill": "normal" | "special" | "small_int", "view": None | "transpose"
     | "slice", "seed": 123}
"""
from __future__ import annotations

import random

DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool",
          "complex64"]
FLOATS = ["float32", "float64", "float16", "bfloat16"]

# The ready operators (aot_ops.<name>): how many tensors a call takes and which keyword arguments to vary.
READY = {
    "add": 2, "mul": 2, "matmul": 2, "leaky_relu": 1, "sum": 1, "mean": 1, "softmax": 1, "max": 1, "gelu": 1,
    "permute": 1, "layer_norm": 3,
}

# ATen operators the bridge takes, with their tensor arity ("list": one tensor list) and fixed arguments to vary.
ATEN = {
    "aten::neg": 1, "aten::abs": 1, "aten::exp": 1, "aten::relu": 1, "aten::sigmoid": 1, "aten::tanh": 1,
    "aten::add.Tensor": 2, "aten::sub.Tensor": 2, "aten::mul.Tensor": 2, "aten::div.Tensor": 2,
    "aten::add.Scalar": 1, "aten::pow.Tensor_Scalar": 1, "aten::clamp": 1, "aten::sum.dim_IntList": 1,
    "aten::mean.dim": 1, "aten::softmax.int": 1, "aten::cumsum": 1, "aten::topk": 1, "aten::sort": 1,
    "aten::max.dim": 1, "aten::where.self": 3, "aten::mm": 2, "aten::bmm": 2, "aten::transpose.int": 1,
    "aten::reshape": 1, "aten::leaky_relu": 1, "aten::cat": "list", "aten::stack": "list",
}
# Names the bridge must refuse by name: malformed, not ATen, in-place, random, data-dependent, out=, file access.
BAD_ATEN_NAMES = [
    "", "aten::", "aten::__dict__", "aten::.Tensor", "prims::neg", "aten::neg_", "aten::fill_.Scalar",
    "aten::from_file", "aten::does_not_exist", "aten::bernoulli", "aten::nonzero", "aten::add.out", "aten::rand",
    "aten::neg.Tensor.extra", "torch.neg", "aten::dropout", "aten::add.Tensor\x00", "aten::set_",
]

# Kernels of the bundled library called through a hand-written ops.Custom: inputs and outputs they really have.
KERNELS = {
    "Add": (2, 1), "Mul": (2, 1), "LeakyRelu": (1, 1), "Sum": (1, 1), "Softmax": (1, 1), "Gelu": (1, 1),
    "Matmul": (2, 1), "MaxDim": (1, 2), "Permute": (1, 1), "LayerNorm": (3, 3), "AddGrad": (3, 2),
}
# Attributes those kernels read, with a right value; a case drops one, or gives it a wrong kind.
KERNEL_ATTRS = {
    "LeakyRelu": {"negative_slope": 0.2}, "Softmax": {"dim": -1}, "Gelu": {"approximate": "none"},
    "MaxDim": {"dim": -1, "keepdim": False}, "Permute": {"dims": [1, 0]},
    "LayerNorm": {"normalized_shape": [4], "eps": 1e-5},
}
# The generic ATen entry's attributes, written by hand (what aten.op writes, and what it must never accept).
RAW_ATEN_OPS = ["aten::neg", "aten::abs", "aten::exp", "aten::neg_", "aten::fill_.Scalar", "aten::from_file",
                "prims::neg", "aten::abs.out", "aten::nonzero", "aten::bernoulli", "not an operator", ""]

WRONG_VALUES = [None, "text", 2**70, -2**70, float("nan"), float("inf"), [], [1, "a"], [2**63], True, -1, 0, 99]


class Generator:
    def __init__(self, seed: int):
        self.seed = seed

    def case(self, index: int) -> dict:
        rng = random.Random(self.seed * 1_000_003 + index)
        kind = rng.choices(["ready", "aten", "custom", "aten_raw"], weights=[4, 4, 3, 2])[0]
        case = getattr(self, f"_{kind}")(rng)
        case.update(id=index, seed=self.seed, kind=kind, mode=rng.choice([0, 1]))
        return case

    # -- tensors ----------------------------------------------------------------------------------------------
    def _tensor(self, rng: random.Random, shape=None, dtype=None) -> dict:
        if shape is None:
            shape = self._shape(rng)
        if dtype is None:
            dtype = rng.choice(FLOATS) if rng.random() < 0.7 else rng.choice(DTYPES)
        fill = rng.choices(["normal", "special", "small_int"], weights=[6, 2, 1])[0]
        view = rng.choices([None, "transpose", "slice"], weights=[6, 1, 1])[0] if len(shape) >= 2 else None
        return {"shape": list(shape), "dtype": dtype, "fill": fill, "view": view, "seed": rng.randrange(2**31)}

    def _shape(self, rng: random.Random) -> list[int]:
        form = rng.choices(["small", "scalar", "empty", "long"], weights=[8, 1, 1, 1])[0]
        if form == "scalar":
            return []
        if form == "empty":
            shape = [rng.randint(1, 4) for _ in range(rng.randint(1, 3))]
            shape[rng.randrange(len(shape))] = 0
            return shape
        if form == "long":
            return [rng.randint(1, 3), rng.randint(1000, 5000)]
        return [rng.randint(1, 5) for _ in range(rng.randint(1, 4))]

    def _inputs(self, rng: random.Random, arity: int, related: bool = True) -> list[dict]:
        """`arity` tensors, usually of one shape and dtype (so the call may be valid), sometimes a count off by
        one, sometimes unrelated shapes or dtypes."""
        count = arity
        if rng.random() < 0.2:
            count = max(0, arity + rng.choice([-1, 1, 2]))
        first = self._tensor(rng)
        out = [first]
        for _ in range(count - 1):
            if related and rng.random() < 0.75:
                twin = dict(first, seed=rng.randrange(2**31))
                if rng.random() < 0.15:
                    twin["dtype"] = rng.choice(DTYPES)
                out.append(twin)
            else:
                out.append(self._tensor(rng))
        return out[:count]

    def _value(self, rng: random.Random, good):
        return good if rng.random() < 0.75 else rng.choice(WRONG_VALUES)

    # -- kinds ------------------------------------------------------------------------------------------------
    def _ready(self, rng: random.Random) -> dict:
        name = rng.choice(sorted(READY))
        inputs = self._inputs(rng, READY[name])
        rank = len(inputs[0]["shape"]) if inputs else 1
        kwargs = {}
        if name == "leaky_relu":
            kwargs["negative_slope"] = self._value(rng, rng.choice([0.01, 0.2, -1.5]))
        elif name in ("sum", "mean"):
            if rng.random() < 0.7:
                kwargs["dim"] = self._value(rng, rng.choice([None, rng.randint(-rank, max(rank - 1, 0))]))
            kwargs["keepdim"] = rng.random() < 0.3
        elif name in ("softmax", "max"):
            kwargs["dim"] = self._value(rng, rng.randint(-rank, max(rank - 1, 0)))
            if name == "max":
                kwargs["keepdim"] = rng.random() < 0.3
        elif name == "gelu":
            kwargs["approximate"] = self._value(rng, rng.choice(["none", "tanh"]))
        elif name == "permute":
            dims = list(range(rank))
            rng.shuffle(dims)
            kwargs["dims"] = self._value(rng, dims)
        elif name == "layer_norm":
            last = inputs[0]["shape"][-1:] if inputs and inputs[0]["shape"] else [1]
            kwargs["normalized_shape"] = self._value(rng, last)
            for spec in inputs[1:]:
                spec["shape"] = list(last)
        return {"op": name, "kwargs": kwargs, "inputs": inputs}

    def _aten(self, rng: random.Random) -> dict:
        if rng.random() < 0.12:
            name = rng.choice(BAD_ATEN_NAMES)
            return {"op": name, "kwargs": {}, "inputs": self._inputs(rng, 1)}
        name = rng.choice(sorted(ATEN))
        arity = ATEN[name]
        inputs = self._inputs(rng, rng.randint(1, 3) if arity == "list" else arity)
        rank = len(inputs[0]["shape"]) if inputs else 1
        dim = rng.randint(-rank, max(rank - 1, 0))
        kwargs: dict = {}
        if name in ("aten::sum.dim_IntList", "aten::mean.dim"):
            kwargs = {"dim": [dim], "keepdim": rng.random() < 0.3}
        elif name in ("aten::softmax.int", "aten::cumsum", "aten::cat", "aten::stack"):
            kwargs = {"dim": dim}
        elif name == "aten::topk":
            kwargs = {"k": rng.randint(0, 3), "dim": dim}
        elif name in ("aten::sort", "aten::max.dim"):
            kwargs = {"dim": dim}
        elif name == "aten::transpose.int":
            kwargs = {"dim0": dim, "dim1": rng.randint(-rank, max(rank - 1, 0))}
        elif name == "aten::reshape":
            kwargs = {"shape": [-1]}
        elif name == "aten::add.Scalar":
            kwargs = {"other": rng.choice([1, 2.5, -3])}
        elif name == "aten::pow.Tensor_Scalar":
            kwargs = {"exponent": rng.choice([2, 0.5, -1])}
        elif name == "aten::clamp":
            kwargs = {"min": -0.5, "max": 0.5}
        elif name == "aten::leaky_relu":
            kwargs = {"negative_slope": 0.1}
        elif name == "aten::where.self":
            inputs[0]["dtype"] = "bool" if rng.random() < 0.8 else inputs[0]["dtype"]
        if kwargs and rng.random() < 0.25:  # one argument of a wrong kind or value
            key = rng.choice(sorted(kwargs))
            kwargs[key] = rng.choice(WRONG_VALUES)
        if rng.random() < 0.05:
            kwargs["no_such_argument"] = 1
        return {"op": name, "kwargs": kwargs, "inputs": inputs}

    def _custom(self, rng: random.Random) -> dict:
        symbol = rng.choice(sorted(KERNELS))
        n_in, n_out = KERNELS[symbol]
        inputs = self._inputs(rng, n_in)
        if symbol == "LayerNorm":
            for spec in inputs[1:]:
                spec["shape"] = [4]
            if inputs:
                inputs[0]["shape"] = inputs[0]["shape"][:-1] + [4] if inputs[0]["shape"] else [4]
        attrs = dict(KERNEL_ATTRS.get(symbol, {}))
        if attrs and rng.random() < 0.3:
            key = rng.choice(sorted(attrs))
            if rng.random() < 0.5:
                del attrs[key]
            else:
                attrs[key] = rng.choice(WRONG_VALUES)
        # out_shape: from the kernel's own C++ inference (reg_info), the right answer, or a wrong one.
        declared = rng.choices(["cpp", "right", "wrong", "negative", "huge"], weights=[3, 3, 2, 1, 1])[0]
        outputs = n_out if rng.random() < 0.8 else max(1, n_out + rng.choice([-1, 1]))
        dtype = rng.choice(["same", "same", "same", rng.choice(DTYPES)])
        return {"op": symbol, "inputs": inputs, "attrs": attrs, "declared": declared, "outputs": outputs,
                "out_dtype": dtype, "reg_info": rng.random() < 0.5}

    def _aten_raw(self, rng: random.Random) -> dict:
        aten_op = rng.choice(RAW_ATEN_OPS)
        inputs = self._inputs(rng, 1)
        attrs = {"aten_op": aten_op, "aten_num_inputs": len(inputs), "aten_num_outputs": 1, "aten_kinds": [0],
                 "aten_arg_0": 0, "aten_out_op": ""}
        if rng.random() < 0.5:
            key = rng.choice(sorted(attrs))
            attrs[key] = rng.choice(WRONG_VALUES + [len(inputs) + 1, 5])
        if rng.random() < 0.2:
            attrs["aten_out_op"] = rng.choice(["aten::abs.out", "aten::neg.out", "aten::exp.out", "bogus"])
        return {"op": aten_op, "inputs": inputs, "attrs": attrs}
