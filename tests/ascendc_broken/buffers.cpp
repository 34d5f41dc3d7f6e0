// UB carving invariants (INVARIANTS.md invariant 1 and TPipe::InitBuffer's rules).
#include "broken.h"

using namespace AscendC;

// 2 x 100 KB on a 192 KB Unified Buffer.
BROKEN_KERNEL(ub_overflow, 1) {
  TPipe pipe;
  TQue<QuePosition::VECIN, 1> que;
  pipe.InitBuffer(que, 2, 100 * 1024);
}

// 65 buffers in one pipe (the limit is 64).
BROKEN_KERNEL(more_than_64_buffers, 1) {
  TPipe pipe;
  TQue<QuePosition::VECIN, 1> a, b;
  pipe.InitBuffer(a, 64, 32);
  pipe.InitBuffer(b, 1, 32);
}

BROKEN_KERNEL(init_buffer_length_zero, 1) {
  TPipe pipe;
  TQue<QuePosition::VECIN, 1> que;
  pipe.InitBuffer(que, 2, 0);
}
