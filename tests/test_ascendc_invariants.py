"""Each deliberately broken kernel in tests/ascendc_broken is stopped by the emulator with a message naming the
kernel, the core and the call (kernels/ascendc/emulator/INVARIANTS.md, "Invariants the emulator must check")."""
import ctypes
import subprocess
import sys

import pytest

from ascendc_support import ORDERS
from support import REPO

EMULATOR = REPO / "kernels" / "ascendc" / "emulator"
SOURCES = sorted((REPO / "tests" / "ascendc_broken").glob("*.cpp"))

# kernel -> the message the emulator must give (core 0 unless stated).
EXPECTED = {
    "copy_length_not_32_bytes": "core 0, DataCopy(GM->UB): 10 elements = 20 B is not a multiple of 32 B",
    "copy_ub_unaligned": "core 0, DataCopy(GM->UB): dst UB address is not 32-byte aligned",
    "gm_window_overrun": "core 0, DataCopy(GM->UB): GM access of elements [0, 32) is outside the SetGlobalBuffer "
                         "window of 16 elements",
    "gm_write_past_window": "core 0, DataCopy(UB->GM): GM access of elements [56, 72) is outside the "
                            "SetGlobalBuffer window of 64 elements",
    "cores_write_same_bytes": "DataCopy(UB->GM): writes GM bytes",
    "vector_partial_overlap": "core 0, Add: dst and src0 overlap partially",
    "alloc_when_all_buffers_busy": "core 0, AllocTensor: all 2 buffers of queue 0 (VECIN) are in use",
    "deque_empty_queue": "core 0, DeQue: queue 0 (VECIN) is empty",
    "enque_beyond_depth": "core 0, EnQue: queue 0 (VECIN) already holds 1 tensor(s), its depth",
    "use_after_free": "core 0, Duplicate: dst of queue 0 (VECIN) is used after FreeTensor",
    "read_never_written": "core 0, DataCopy(UB->GM): src element 0 of queue 0 (VECOUT) is read but was never written",
    "read_unwritten_tail": "core 0, DataCopy(UB->GM): src element 16 of queue 0 (VECOUT) is read but was never "
                           "written",
    "leak_tensor_not_freed": "core 0, kernel end: a tensor of queue 0 (VECIN) was never freed",
    "leak_queue_not_empty": "core 0, kernel end: queue 0 (VECIN) still holds 1 enqueued tensor(s)",
    "ub_overflow": "core 0, InitBuffer: queue 0 (VECIN): 2 x 102400 B on top of 0 B already used exceeds the "
                   "196608 B Unified Buffer",
    "more_than_64_buffers": "core 0, InitBuffer: queue 1 (VECIN): 65 buffers in this pipe, more than the limit of 64",
    "init_buffer_length_zero": "core 0, InitBuffer: queue 0 (VECIN): buffer length 0",
}


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    out = tmp_path_factory.mktemp("ascendc_broken") / "libascendc_broken.so"
    proc = subprocess.run([sys.executable, "-m", "aot_ops", "build", *map(str, SOURCES), "-o", str(out),
                           "--no-torch", "-I", str(EMULATOR)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lib = ctypes.CDLL(str(out))
    lib.ascendc_broken_run.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int64, ctypes.c_char_p,
                                       ctypes.c_size_t]

    def run(name: str, order: str = "in_order", block_dim: int = -1) -> tuple[int, str]:
        message = ctypes.create_string_buffer(2048)
        status = lib.ascendc_broken_run(name.encode(), order.encode(), block_dim, message, len(message))
        return status, message.value.decode()

    return run


@pytest.mark.parametrize("order", ORDERS)
def test_the_correct_control_kernel_passes(broken, order):
    assert broken("correct_copy", order) == (0, "")


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("kernel", sorted(EXPECTED))
def test_broken_kernel_is_stopped_with_its_message(broken, kernel, order):
    status, message = broken(kernel, order)
    assert status == 1, f"{kernel} was not stopped by the emulator: status {status}, {message!r}"
    assert message.startswith(f"kernel {kernel}, ")
    assert EXPECTED[kernel] in message


@pytest.mark.parametrize("order", ORDERS)
def test_two_cores_writing_the_same_bytes_names_both_cores(broken, order):
    status, message = broken("cores_write_same_bytes", order)
    assert status == 1
    assert message.startswith("kernel cores_write_same_bytes, core 1, DataCopy(UB->GM): writes GM bytes")
    assert "that core 0 also wrote" in message


@pytest.mark.parametrize("block_dim", [0, 65536])
def test_block_dim_outside_the_hardware_range_is_refused(broken, block_dim):
    assert broken("correct_copy", "in_order", block_dim) == (
        1, f"kernel correct_copy, launch: blockDim {block_dim} is outside [1, 65535]")


@pytest.mark.parametrize("order", ORDERS)
def test_block_dim_65535_is_accepted(broken, order):
    assert broken("core_zero_only", order, 65535) == (0, "")
