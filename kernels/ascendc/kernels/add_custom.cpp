// z = x + y in fp16, split evenly across blockDim cores, each core's share in TILE_NUM tiles with two buffers per
// queue so the copy of one tile overlaps the addition of the other on the NPU.
//
// Preconditions (checked by the host before launch, see add_custom_tiling.h): totalLength is a multiple of
// 256 * blockDim, so every tile is a whole number of 32-B blocks (ascend-c.md: DataCopy lengths are multiples of
// 32 B), and the six tile buffers fit in the UB. The kernel has no tail handling.
#include "kernel_operator.h"

using namespace AscendC;

namespace {

// Mirrored by add_custom_tiling.h (kBufferNum, kTileNum), which the hosts use to check the preconditions; the
// kernel includes no host header because CANN compiles this file for the AI core.
constexpr int32_t BUFFER_NUM = 2;
constexpr int32_t TILE_NUM = 8;

class KernelAdd {
 public:
  __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t totalLength) {
    blockLength_ = totalLength / GetBlockNum();
    tileLength_ = blockLength_ / TILE_NUM / BUFFER_NUM;
    const uint64_t start = blockLength_ * GetBlockIdx();
    xGm_.SetGlobalBuffer((__gm__ half *)x + start, blockLength_);
    yGm_.SetGlobalBuffer((__gm__ half *)y + start, blockLength_);
    zGm_.SetGlobalBuffer((__gm__ half *)z + start, blockLength_);
    pipe_.InitBuffer(inQueueX_, BUFFER_NUM, tileLength_ * sizeof(half));
    pipe_.InitBuffer(inQueueY_, BUFFER_NUM, tileLength_ * sizeof(half));
    pipe_.InitBuffer(outQueueZ_, BUFFER_NUM, tileLength_ * sizeof(half));
  }

  __aicore__ inline void Process() {
    const int32_t loopCount = TILE_NUM * BUFFER_NUM;
    for (int32_t i = 0; i < loopCount; i++) {
      CopyIn(i);
      Compute();
      CopyOut(i);
    }
  }

 private:
  __aicore__ inline void CopyIn(int32_t progress) {
    LocalTensor<half> xLocal = inQueueX_.AllocTensor<half>();
    LocalTensor<half> yLocal = inQueueY_.AllocTensor<half>();
    DataCopy(xLocal, xGm_[progress * tileLength_], tileLength_);
    DataCopy(yLocal, yGm_[progress * tileLength_], tileLength_);
    inQueueX_.EnQue(xLocal);
    inQueueY_.EnQue(yLocal);
  }

  __aicore__ inline void Compute() {
    LocalTensor<half> xLocal = inQueueX_.DeQue<half>();
    LocalTensor<half> yLocal = inQueueY_.DeQue<half>();
    LocalTensor<half> zLocal = outQueueZ_.AllocTensor<half>();
    Add(zLocal, xLocal, yLocal, tileLength_);
    outQueueZ_.EnQue<half>(zLocal);
    inQueueX_.FreeTensor(xLocal);
    inQueueY_.FreeTensor(yLocal);
  }

  __aicore__ inline void CopyOut(int32_t progress) {
    LocalTensor<half> zLocal = outQueueZ_.DeQue<half>();
    DataCopy(zGm_[progress * tileLength_], zLocal, tileLength_);
    outQueueZ_.FreeTensor(zLocal);
  }

  TPipe pipe_;
  // Depth 1: each stage enqueues one tile and the next stage dequeues it before another is enqueued; the two
  // buffers per queue are the double buffering (ascend-c.md: depth is not the buffer count).
  TQue<QuePosition::VECIN, 1> inQueueX_, inQueueY_;
  TQue<QuePosition::VECOUT, 1> outQueueZ_;
  GlobalTensor<half> xGm_, yGm_, zGm_;
  uint32_t blockLength_ = 0;
  uint32_t tileLength_ = 0;
};

}  // namespace

extern "C" __global__ __aicore__ void add_custom(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t totalLength) {
  KernelAdd op;
  op.Init(x, y, z, totalLength);
  op.Process();
}
