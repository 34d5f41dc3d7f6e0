"""bprop functions of fixed arity: how MindSpore's autodiff calls an operator's backward kernel.

MindSpore calls a Custom primitive's bprop as bprop(*inputs, out, dout), and GRAPH_MODE compiles it from its
source: it must name every parameter (a `*args` bprop is refused) and cannot be generated with exec (MindSpore
needs the source file). Hence one definition per number of tensor inputs, up to MAX_INPUTS. `dout` is a tuple
when the operator has several outputs; MindSpore passes a tuple argument to a Custom primitive as consecutive
tensors, which is what the backward kernel expects.
"""
from __future__ import annotations

MAX_INPUTS = 8


def inputs_then_cotangent(backward, num_inputs: int):
    """bprop calling backward(*inputs, dout): the generic ATen backward (AtenOpBackward), `num_inputs` tensors."""
    if num_inputs == 1:
        def bprop(a, out, dout):
            return (backward(a, dout),)  # one input: the backward kernel has one output
    elif num_inputs == 2:
        def bprop(a, b, out, dout):
            return backward(a, b, dout)
    elif num_inputs == 3:
        def bprop(a, b, c, out, dout):
            return backward(a, b, c, dout)
    elif num_inputs == 4:
        def bprop(a, b, c, d, out, dout):
            return backward(a, b, c, d, dout)
    elif num_inputs == 5:
        def bprop(a, b, c, d, e, out, dout):
            return backward(a, b, c, d, e, dout)
    elif num_inputs == 6:
        def bprop(a, b, c, d, e, f, out, dout):
            return backward(a, b, c, d, e, f, dout)
    elif num_inputs == 7:
        def bprop(a, b, c, d, e, f, g, out, dout):
            return backward(a, b, c, d, e, f, g, dout)
    elif num_inputs == 8:
        def bprop(a, b, c, d, e, f, g, h, out, dout):
            return backward(a, b, c, d, e, f, g, h, dout)
    else:
        return None  # no gradient: MindSpore reports "bprop not defined" if one is asked for
    return bprop


def inputs_then_cotangents(backward, num_inputs: int):
    """inputs_then_cotangent for an operator of several outputs whose backward MindSpore infers in C++ (dynamic
    shapes): its kernel is registered with one input per cotangent, and a tuple argument would not match that
    registration (PyNative selects no kernel, GRAPH_MODE converts the tuple to a tensor), so the cotangents go
    one by one."""
    if num_inputs == 1:
        def bprop(a, out, dout):
            return (backward(a, *dout),)  # one input: the backward kernel has one output
    elif num_inputs == 2:
        def bprop(a, b, out, dout):
            return backward(a, b, *dout)
    elif num_inputs == 3:
        def bprop(a, b, c, out, dout):
            return backward(a, b, c, *dout)
    elif num_inputs == 4:
        def bprop(a, b, c, d, out, dout):
            return backward(a, b, c, d, *dout)
    elif num_inputs == 5:
        def bprop(a, b, c, d, e, out, dout):
            return backward(a, b, c, d, e, *dout)
    elif num_inputs == 6:
        def bprop(a, b, c, d, e, f, out, dout):
            return backward(a, b, c, d, e, f, *dout)
    elif num_inputs == 7:
        def bprop(a, b, c, d, e, f, g, out, dout):
            return backward(a, b, c, d, e, f, g, *dout)
    elif num_inputs == 8:
        def bprop(a, b, c, d, e, f, g, h, out, dout):
            return backward(a, b, c, d, e, f, g, h, *dout)
    else:
        return None  # no gradient: MindSpore reports "bprop not defined" if one is asked for
    return bprop


def cotangent_then_inputs(backward, num_inputs: int):
    """bprop calling backward(dout, *inputs): the bundled kernels' <Op>Grad entries (one or two inputs)."""
    if num_inputs == 1:
        def bprop(x, out, dout):
            return (backward(dout, x),)  # one input: the backward kernel has one output
    elif num_inputs == 2:
        def bprop(a, b, out, dout):
            return backward(dout, a, b)
    else:
        raise ValueError(f"cotangent_then_inputs: {num_inputs} inputs (the bundled <Op>Grad kernels take 1 or 2)")
    return bprop


def cotangent_then_output(backward, num_inputs: int = 1):
    """bprop calling backward(dout, out): kernels whose gradient is a function of their output (softmax)."""
    if num_inputs != 1:
        raise ValueError(f"cotangent_then_output: {num_inputs} inputs (one expected)")

    def bprop(x, out, dout):
        return (backward(dout, out),)
    return bprop
