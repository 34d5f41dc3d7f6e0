// y = leaky_relu(x) = max(x, 0) + negativeSlope * min(x, 0), fp16, with a scalar parameter.
//
// Handles tails: the length is split over the cores in 32-B blocks (some cores may get one block more, or none), and
// the last tile of a core may be shorter than tileLength. Precondition (leaky_relu_custom_tiling,
// aot_ops/ascendc/_bundled.py): the length is a multiple of 16 elements, because INVARIANTS.md requires every DataCopy
// to move a multiple of 32 B.
#include "kernel_operator.h"

#include "split.h"

using namespace AscendC;

namespace {

constexpr int32_t kBuffersPerQueue = 2;
constexpr uint32_t BLOCK_ELEMENTS = 16;  // 32 B of fp16; also in leaky_relu_custom_tiling (bundled.py)

class LeakyReluCore {
 public:
  __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, uint32_t totalLength, uint32_t tileLength, float negativeSlope) {
    const auto share = ascendc_tiling::core_share(totalLength / BLOCK_ELEMENTS,
                                                  GetBlockNum(), GetBlockIdx());
    length_ = static_cast<uint32_t>(share.count * BLOCK_ELEMENTS);
    const uint64_t start = share.first * BLOCK_ELEMENTS;
    tileLength_ = tileLength;
    slope_ = negativeSlope;  // rounded to half: vector scalars have the operand's type on the NPU
    xGm_.SetGlobalBuffer((__gm__ half *)x + start, length_);
    yGm_.SetGlobalBuffer((__gm__ half *)y + start, length_);
    pipe_.InitBuffer(inQueue_, kBuffersPerQueue, tileLength_ * sizeof(half));
    pipe_.InitBuffer(outQueue_, kBuffersPerQueue, tileLength_ * sizeof(half));
    pipe_.InitBuffer(negative_, tileLength_ * sizeof(half));
  }

  __aicore__ inline void Process() {
    for (uint32_t offset = 0; offset < length_; offset += tileLength_) {
      const uint32_t count = length_ - offset < tileLength_ ? length_ - offset : tileLength_;  // the tail
      LoadTile(offset, count);
      ComputeTile(count);
      StoreTile(offset, count);
    }
  }

 private:
  __aicore__ inline void LoadTile(uint32_t offset, uint32_t count) {
    LocalTensor<half> xLocal = inQueue_.AllocTensor<half>();
    DataCopy(xLocal, xGm_[offset], count);
    inQueue_.EnQue(xLocal);
  }

  __aicore__ inline void ComputeTile(uint32_t count) {
    LocalTensor<half> xLocal = inQueue_.DeQue<half>();
    LocalTensor<half> yLocal = outQueue_.AllocTensor<half>();
    LocalTensor<half> negative = negative_.Get<half>();
    const half zero = 0.0f;
    Maxs(yLocal, xLocal, zero, count);
    Mins(negative, xLocal, zero, count);
    PipeBarrier<PIPE_V>();
    Muls(negative, negative, slope_, count);
    PipeBarrier<PIPE_V>();
    Add(yLocal, yLocal, negative, count);
    outQueue_.EnQue(yLocal);
    inQueue_.FreeTensor(xLocal);
  }

  __aicore__ inline void StoreTile(uint32_t offset, uint32_t count) {
    LocalTensor<half> yLocal = outQueue_.DeQue<half>();
    DataCopy(yGm_[offset], yLocal, count);
    outQueue_.FreeTensor(yLocal);
  }

  TPipe pipe_;
  TQue<QuePosition::VECIN, 1> inQueue_;
  TQue<QuePosition::VECOUT, 1> outQueue_;
  TBuf<TPosition::VECCALC> negative_;
  GlobalTensor<half> xGm_, yGm_;
  uint32_t length_ = 0;
  uint32_t tileLength_ = 0;
  half slope_;
};

}  // namespace

extern "C" __global__ __aicore__ void leaky_relu_custom(GM_ADDR x, GM_ADDR y, uint32_t totalLength,
                                                        uint32_t tileLength, float negativeSlope) {
  LeakyReluCore op;
  op.Init(x, y, totalLength, tileLength, negativeSlope);
  op.Process();
}
