// z = x + y in fp16. Each core takes an equal contiguous share of the vectors and streams it through the Unified
// Buffer in kStages tile pairs: two buffers per queue let the NPU load tile i+1 while it adds tile i.
//
// Preconditions (checked by its tiling function before launch, aot_ops/ascendc/_bundled.py): totalLength is a multiple
// of 256 * blockDim, so every tile is a whole number of 32-B blocks (INVARIANTS.md: DataCopy lengths are multiples of
// 32 B), and the six tile buffers fit in the UB. The kernel has no tail handling.
#include "kernel_operator.h"

using namespace AscendC;

namespace {

// Mirrored by add_custom_tiling in aot_ops/ascendc/_bundled.py, which checks the preconditions before launch; the kernel
// includes no host header because CANN compiles this file for the AI core.
constexpr int32_t kBuffersPerQueue = 2;
constexpr int32_t kTilesPerBuffer = 8;
constexpr int32_t kStages = kTilesPerBuffer * kBuffersPerQueue;  // tiles each core streams

// One core's share: three global windows and the three queues its tiles travel through.
class HalfAdder {
 public:
  __aicore__ inline HalfAdder(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t totalLength)
      : share_(totalLength / GetBlockNum()), tile_(share_ / kStages) {
    const uint64_t first = static_cast<uint64_t>(share_) * GetBlockIdx();
    lhs_.SetGlobalBuffer(reinterpret_cast<__gm__ half *>(x) + first, share_);
    rhs_.SetGlobalBuffer(reinterpret_cast<__gm__ half *>(y) + first, share_);
    sum_.SetGlobalBuffer(reinterpret_cast<__gm__ half *>(z) + first, share_);
    pipe_.InitBuffer(lhsTiles_, kBuffersPerQueue, tile_ * sizeof(half));
    pipe_.InitBuffer(rhsTiles_, kBuffersPerQueue, tile_ * sizeof(half));
    pipe_.InitBuffer(sumTiles_, kBuffersPerQueue, tile_ * sizeof(half));
  }

  __aicore__ inline void Run() {
    for (int32_t stage = 0; stage < kStages; ++stage) {
      const uint32_t at = static_cast<uint32_t>(stage) * tile_;
      Load(at);
      AddLoaded();
      Store(at);
    }
  }

 private:
  // GM -> UB: both operands of one tile.
  __aicore__ inline void Load(uint32_t at) {
    LocalTensor<half> a = lhsTiles_.AllocTensor<half>();
    LocalTensor<half> b = rhsTiles_.AllocTensor<half>();
    DataCopy(a, lhs_[at], tile_);
    DataCopy(b, rhs_[at], tile_);
    lhsTiles_.EnQue(a);
    rhsTiles_.EnQue(b);
  }

  // UB -> UB: the vector unit adds the loaded pair into a result tile.
  __aicore__ inline void AddLoaded() {
    LocalTensor<half> a = lhsTiles_.DeQue<half>();
    LocalTensor<half> b = rhsTiles_.DeQue<half>();
    LocalTensor<half> c = sumTiles_.AllocTensor<half>();
    Add(c, a, b, tile_);
    sumTiles_.EnQue<half>(c);
    lhsTiles_.FreeTensor(a);
    rhsTiles_.FreeTensor(b);
  }

  // UB -> GM: the result tile.
  __aicore__ inline void Store(uint32_t at) {
    LocalTensor<half> c = sumTiles_.DeQue<half>();
    DataCopy(sum_[at], c, tile_);
    sumTiles_.FreeTensor(c);
  }

  uint32_t share_;
  uint32_t tile_;
  GlobalTensor<half> lhs_, rhs_, sum_;
  TPipe pipe_;
  // Depth 1: each stage enqueues one tile and the next stage dequeues it before another is enqueued; the two
  // buffers per queue are the double buffering (INVARIANTS.md: depth is not the buffer count).
  TQue<QuePosition::VECIN, 1> lhsTiles_, rhsTiles_;
  TQue<QuePosition::VECOUT, 1> sumTiles_;
};

}  // namespace

extern "C" __global__ __aicore__ void add_custom(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t totalLength) {
  HalfAdder adder(x, y, z, totalLength);
  adder.Run();
}
