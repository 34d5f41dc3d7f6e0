"""Garbage in the raw C arguments of a kernel library's exported functions: what a C caller (not MindSpore) could
pass them. raw_worker.py runs these cases; campaign.py counts deaths and hangs.

MindSpore always passes well-formed arguments; the functions must still refuse garbage with a named error (a
non-zero status and "<Operator>: <cause>" in ms_ext_last_error) instead of crashing, and the next valid call must
still give the right result. A case is plain data (JSON):
    {"kind": "raw", "entry": "launch" | "init" | "infer_shape" | "output_types", "target": "LeakyRelu",
     "faults": [{"arg": "rank", "index": 0, "value": 2147483647}, ...]}
`catalogue()` lists every single fault once for every target; `RawGenerator` draws seeded combinations.
"""
from __future__ import annotations

import random

INT_MIN, INT_MAX = -2**31, 2**31 - 1

ENTRIES = ("launch", "init", "infer_shape", "output_types")

# The exported functions tried (raw_worker.TARGETS says how each is called validly): a kernel per macro shape
# (one input, two inputs, two outputs), the generic ATen entry, the program entry, and the Ascend C library.
# Each maps to its number of tensors (inputs and outputs) and the entries it exports.
TARGETS = {
    "LeakyRelu": (2, ENTRIES),
    "Add": (3, ENTRIES),
    "MaxDim": (3, ENTRIES),
    "AtenOp": (2, ("launch", "init", "infer_shape")),
    "AtenProgram": (2, ("launch", "init", "infer_shape")),
    "LeakyReluCustom": (2, ENTRIES),
}

# `extra` values: MindSpore's AotExtra replaced by memory that is not one. "null" is a valid launch and shape
# inference without attributes (the harness passes it), but not a valid Init: Init keeps the kernel state there.
EXTRAS = ("null", "zeros", "ones", "text", "zero_vtable", "heap_vtable", "unmapped", "low", "misaligned")

RANKS = (-1, INT_MIN, INT_MAX, INT_MAX - 1, 65, 2**20)
PARAM_COUNTS = (-1, INT_MIN, INT_MAX, 2**30, 0)
NUM_INPUTS = (-1, INT_MIN, INT_MAX, 1000)
CAPACITIES = (-1, INT_MIN, 0)

# Words one of which an error about a fault must contain: its cause, in the library's words.
CAUSES = {
    "nparam": ("parameters",), "params": ("params",), "ndims": ("ndims", "rank"), "shapes": ("shape",),
    "dtypes": ("dtypes",), "rank": ("rank",), "shape_row": ("shape",), "dtype_entry": ("dtype",),
    "extra": ("extra",), "input_dtypes": ("input_dtypes",), "output_dtypes": ("output_dtypes",),
    "num_inputs": ("input",), "capacity": ("capacity",), "input_dtype_entry": ("dtype",),
}


def _array_faults(tensors: int) -> list[dict]:
    """NULL arrays, impossible ranks and missing shape rows and dtypes, on the first input and the last tensor."""
    faults = [{"arg": name, "value": None} for name in ("ndims", "shapes", "dtypes")]
    for index in sorted({0, tensors - 1}):
        faults += [{"arg": "rank", "index": index, "value": v} for v in RANKS]
        faults += [{"arg": "shape_row", "index": index, "value": None},
                   {"arg": "dtype_entry", "index": index, "value": None}]
    return faults


def _extra_faults() -> list[dict]:
    return [{"arg": "extra", "value": kind} for kind in EXTRAS]


def faults_of(entry: str, tensors: int) -> list[dict]:
    """Every single fault an entry's arguments can carry."""
    if entry == "launch":
        return ([{"arg": "nparam", "value": v} for v in PARAM_COUNTS] + [{"arg": "params", "value": None}]
                + _array_faults(tensors) + _extra_faults())
    if entry in ("init", "infer_shape"):
        arrays = [f for f in _array_faults(tensors) if entry == "init" or f["arg"] not in ("dtypes", "dtype_entry")]
        return arrays + _extra_faults()
    return ([{"arg": "input_dtypes", "value": None}, {"arg": "output_dtypes", "value": None},
             {"arg": "input_dtype_entry", "index": 0, "value": None}]
            + [{"arg": "num_inputs", "value": v} for v in NUM_INPUTS]
            + [{"arg": "capacity", "value": v} for v in CAPACITIES])


def may_succeed(entry: str, fault: dict) -> bool:
    """Whether a call carrying only this fault may still succeed (then its result must be right).

    No extra is a call without attributes, except for Init, which must refuse it. Init reads ranks and shapes
    only to size scratch buffers, and shape inference reads only its inputs' ranks and shapes, so garbage they
    never read cannot fail them."""
    arg = fault["arg"]
    if arg == "extra":
        return fault["value"] == "null" and entry != "init"
    if entry == "init":
        return arg in ("ndims", "shapes", "dtypes", "rank", "shape_row", "dtype_entry")
    if entry == "infer_shape":
        return fault.get("index", 0) > 0  # an output's rank or shape row: shape inference gets inputs only
    return False


def catalogue(targets=None) -> list[dict]:
    """Every single fault of every entry of every target, once: the deterministic part of a raw campaign."""
    cases = []
    for target in targets or sorted(TARGETS):
        tensors, entries = TARGETS[target]
        for entry in entries:
            for fault in faults_of(entry, tensors):
                cases.append({"kind": "raw", "entry": entry, "target": target, "faults": [fault]})
    for index, case in enumerate(cases):
        case.update(id=index, seed=-1)
    return cases


class RawGenerator:
    """Seeded combinations of one to three faults (random ranks and counts among them)."""

    def __init__(self, seed: int):
        self.seed = seed

    def case(self, index: int) -> dict:
        rng = random.Random(self.seed * 1_000_033 + index)
        target = rng.choice(sorted(TARGETS))
        tensors, entries = TARGETS[target]
        entry = rng.choice(entries)
        pool = faults_of(entry, tensors)
        faults = []
        for _ in range(rng.choice([1, 1, 2, 3])):
            fault = dict(rng.choice(pool))
            if fault["arg"] in ("rank", "nparam", "num_inputs") and rng.random() < 0.3:
                fault["value"] = rng.choice([rng.randint(INT_MIN, -1), rng.randint(2**16, INT_MAX)])
            if any(f["arg"] == fault["arg"] and f.get("index") == fault.get("index") for f in faults):
                continue  # one value per argument
            faults.append(fault)
        return {"kind": "raw", "entry": entry, "target": target, "faults": faults, "id": index, "seed": self.seed}
