// DataCopy and GM-window invariants (INVARIANTS.md invariant 2), plus a correct kernel as the control.
#include "broken.h"

using namespace AscendC;

// The control: every core copies its 16-element share of x to y through one queue, as a correct kernel does.
BROKEN_KERNEL(correct_copy, 4) {
  TPipe pipe;
  TQue<QuePosition::VECIN, 1> que;
  GlobalTensor<half> xGm, yGm;
  xGm.SetGlobalBuffer((__gm__ half *)x + 16 * GetBlockIdx(), 16);
  yGm.SetGlobalBuffer((__gm__ half *)y + 16 * GetBlockIdx(), 16);
  pipe.InitBuffer(que, 2, 16 * sizeof(half));
  LocalTensor<half> t = que.AllocTensor<half>();
  DataCopy(t, xGm, 16);
  que.EnQue(t);
  t = que.DeQue<half>();
  DataCopy(yGm, t, 16);
  que.FreeTensor(t);
}

// 10 fp16 = 20 B: the NPU would copy 0 B.
BROKEN_KERNEL(copy_length_not_32_bytes, 1) {
  TPipe pipe;
  TQue<QuePosition::VECIN, 1> que;
  GlobalTensor<half> xGm;
  xGm.SetGlobalBuffer((__gm__ half *)x, 64);
  pipe.InitBuffer(que, 1, 64 * sizeof(half));
  LocalTensor<half> t = que.AllocTensor<half>();
  DataCopy(t, xGm, 10);
  que.FreeTensor(t);
}

// A UB destination 8 fp16 (16 B) into the buffer.
BROKEN_KERNEL(copy_ub_unaligned, 1) {
  TPipe pipe;
  TQue<QuePosition::VECIN, 1> que;
  GlobalTensor<half> xGm;
  xGm.SetGlobalBuffer((__gm__ half *)x, 64);
  pipe.InitBuffer(que, 1, 64 * sizeof(half));
  LocalTensor<half> t = que.AllocTensor<half>();
  DataCopy(t[8], xGm, 16);
  que.FreeTensor(t);
}

// The window holds 16 elements; the copy reads 32.
BROKEN_KERNEL(gm_window_overrun, 1) {
  TPipe pipe;
  TQue<QuePosition::VECIN, 1> que;
  GlobalTensor<half> xGm;
  xGm.SetGlobalBuffer((__gm__ half *)x, 16);
  pipe.InitBuffer(que, 1, 64 * sizeof(half));
  LocalTensor<half> t = que.AllocTensor<half>();
  DataCopy(t, xGm, 32);
  que.FreeTensor(t);
}

// An offset past the window's end through operator[] (the view is made fine; the copy out of it is the bug).
BROKEN_KERNEL(gm_write_past_window, 1) {
  TPipe pipe;
  TQue<QuePosition::VECOUT, 1> que;
  GlobalTensor<half> yGm;
  yGm.SetGlobalBuffer((__gm__ half *)y, 64);
  pipe.InitBuffer(que, 1, 16 * sizeof(half));
  LocalTensor<half> t = que.AllocTensor<half>();
  Duplicate(t, half(0.0f), 16);
  DataCopy(yGm[56], t, 16);
  que.FreeTensor(t);
}

// Every core writes the same first 16 elements of y.
BROKEN_KERNEL(cores_write_same_bytes, 4) {
  TPipe pipe;
  TQue<QuePosition::VECOUT, 1> que;
  GlobalTensor<half> yGm;
  yGm.SetGlobalBuffer((__gm__ half *)y, 16);
  pipe.InitBuffer(que, 1, 16 * sizeof(half));
  LocalTensor<half> t = que.AllocTensor<half>();
  Duplicate(t, half(static_cast<float>(GetBlockIdx())), 16);
  DataCopy(yGm, t, 16);
  que.FreeTensor(t);
}

// dst starts 16 elements into src: a partial overlap.
BROKEN_KERNEL(vector_partial_overlap, 1) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> buf;
  pipe.InitBuffer(buf, 64 * sizeof(half));
  LocalTensor<half> t = buf.Get<half>();
  Duplicate(t, half(1.0f), 64);
  Add(t[16], t, t, 32);
}

// Only core 0 works; the others return at once (a legal way to launch more cores than there is work for).
BROKEN_KERNEL(core_zero_only, 1) {
  if (GetBlockIdx() != 0) return;
  TPipe pipe;
  TQue<QuePosition::VECIN, 1> que;
  GlobalTensor<half> xGm, yGm;
  xGm.SetGlobalBuffer((__gm__ half *)x, 16);
  yGm.SetGlobalBuffer((__gm__ half *)y, 16);
  pipe.InitBuffer(que, 1, 16 * sizeof(half));
  LocalTensor<half> t = que.AllocTensor<half>();
  DataCopy(t, xGm, 16);
  DataCopy(yGm, t, 16);
  que.FreeTensor(t);
}
