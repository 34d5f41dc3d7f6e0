// Queue protocol and end-of-kernel invariants (INVARIANTS.md invariant 3).
#include "broken.h"

using namespace AscendC;

// Two buffers, three AllocTensor without FreeTensor: the NPU would wait forever.
BROKEN_KERNEL(alloc_when_all_buffers_busy, 1) {
  TPipe pipe;
  TQue<QuePosition::VECIN, 1> que;
  pipe.InitBuffer(que, 2, 32);
  LocalTensor<half> a = que.AllocTensor<half>();
  LocalTensor<half> b = que.AllocTensor<half>();
  LocalTensor<half> c = que.AllocTensor<half>();
}

BROKEN_KERNEL(deque_empty_queue, 1) {
  TPipe pipe;
  TQue<QuePosition::VECIN, 1> que;
  pipe.InitBuffer(que, 2, 32);
  LocalTensor<half> t = que.DeQue<half>();
}

// Depth 1 with two buffers: the second EnQue before any DeQue exceeds the depth.
BROKEN_KERNEL(enque_beyond_depth, 1) {
  TPipe pipe;
  TQue<QuePosition::VECIN, 1> que;
  pipe.InitBuffer(que, 2, 32);
  LocalTensor<half> a = que.AllocTensor<half>();
  LocalTensor<half> b = que.AllocTensor<half>();
  Duplicate(a, half(1.0f), 16);
  Duplicate(b, half(1.0f), 16);
  que.EnQue(a);
  que.EnQue(b);
}

BROKEN_KERNEL(use_after_free, 1) {
  TPipe pipe;
  TQue<QuePosition::VECIN, 1> que;
  pipe.InitBuffer(que, 1, 32);
  LocalTensor<half> t = que.AllocTensor<half>();
  Duplicate(t, half(1.0f), 16);
  que.FreeTensor(t);
  Duplicate(t, half(2.0f), 16);
}

// The tensor is copied to GM without ever being written: it holds the NaN of fresh UB.
BROKEN_KERNEL(read_never_written, 1) {
  TPipe pipe;
  TQue<QuePosition::VECOUT, 1> que;
  GlobalTensor<half> yGm;
  yGm.SetGlobalBuffer((__gm__ half *)y, 16);
  pipe.InitBuffer(que, 1, 32);
  LocalTensor<half> t = que.AllocTensor<half>();
  DataCopy(yGm, t, 16);
  que.FreeTensor(t);
}

// Only the first half of the tile is computed, then the whole tile is copied out: an unwritten tail.
BROKEN_KERNEL(read_unwritten_tail, 1) {
  TPipe pipe;
  TQue<QuePosition::VECOUT, 1> que;
  GlobalTensor<half> yGm;
  yGm.SetGlobalBuffer((__gm__ half *)y, 32);
  pipe.InitBuffer(que, 1, 64);
  LocalTensor<half> t = que.AllocTensor<half>();
  Duplicate(t, half(1.0f), 16);
  DataCopy(yGm, t, 32);
  que.FreeTensor(t);
}

BROKEN_KERNEL(leak_tensor_not_freed, 1) {
  TPipe pipe;
  TQue<QuePosition::VECIN, 1> que;
  pipe.InitBuffer(que, 1, 32);
  LocalTensor<half> t = que.AllocTensor<half>();
  Duplicate(t, half(1.0f), 16);
}

BROKEN_KERNEL(leak_queue_not_empty, 1) {
  TPipe pipe;
  TQue<QuePosition::VECIN, 1> que;
  pipe.InitBuffer(que, 1, 32);
  LocalTensor<half> t = que.AllocTensor<half>();
  Duplicate(t, half(1.0f), 16);
  que.EnQue(t);
}
