"""The PyNative fast front for AotOp calls: pynative_front.cpp (the CustomOpBuilder module), front.py (when and
how AotOp uses it), build.py (its build at install time). Only the switch lives here: setup.py and `aot_ops
doctor` import this package in processes that must not import MindSpore."""
import os

ENV_SWITCH = "AOT_OPS_FAST_FRONT"


def switched_off() -> bool:
    """AOT_OPS_FAST_FRONT=0 (or false/off/no): eager calls keep the ops.Custom path."""
    return os.environ.get(ENV_SWITCH, "1").strip().lower() in ("0", "false", "off", "no")
