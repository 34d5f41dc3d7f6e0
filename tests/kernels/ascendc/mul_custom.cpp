// z = x * y in fp16: a user's Ascend C kernel (not one of the bundled ones), built by aot_ops.ascendc.load in
// tests/test_ascendc_load.py. Each core multiplies its share of the vectors (totalLength / blockDim elements) in
// tiles of tileLength elements, double-buffered; the tiling function in the test decides both and refuses what
// this kernel cannot do (shares that are not whole tiles of whole 32-byte blocks, tiles that overflow the UB).
//
// MUL_CUSTOM_BROKEN copies one element less than a tile: a DataCopy of a length that is not a whole number of
// 32-byte blocks, which the NPU silently mishandles and the emulator stops.
#include "kernel_operator.h"

using namespace AscendC;

namespace {

constexpr int32_t kBuffers = 2;

class HalfMultiplier {
 public:
  __aicore__ inline HalfMultiplier(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t totalLength, uint32_t tileLength)
      : share_(totalLength / GetBlockNum()), tile_(tileLength) {
    const uint64_t first = static_cast<uint64_t>(share_) * GetBlockIdx();
    x_.SetGlobalBuffer(reinterpret_cast<__gm__ half *>(x) + first, share_);
    y_.SetGlobalBuffer(reinterpret_cast<__gm__ half *>(y) + first, share_);
    z_.SetGlobalBuffer(reinterpret_cast<__gm__ half *>(z) + first, share_);
    pipe_.InitBuffer(xq_, kBuffers, tile_ * sizeof(half));
    pipe_.InitBuffer(yq_, kBuffers, tile_ * sizeof(half));
    pipe_.InitBuffer(zq_, kBuffers, tile_ * sizeof(half));
  }

  __aicore__ inline void Run() {
    for (uint32_t at = 0; at < share_; at += tile_) {
      LocalTensor<half> a = xq_.AllocTensor<half>();
      LocalTensor<half> b = yq_.AllocTensor<half>();
#ifdef MUL_CUSTOM_BROKEN
      DataCopy(a, x_[at], tile_ - 1);
#else
      DataCopy(a, x_[at], tile_);
#endif
      DataCopy(b, y_[at], tile_);
      xq_.EnQue(a);
      yq_.EnQue(b);
      a = xq_.DeQue<half>();
      b = yq_.DeQue<half>();
      LocalTensor<half> c = zq_.AllocTensor<half>();
      Mul(c, a, b, tile_);
      zq_.EnQue<half>(c);
      xq_.FreeTensor(a);
      yq_.FreeTensor(b);
      c = zq_.DeQue<half>();
      DataCopy(z_[at], c, tile_);
      zq_.FreeTensor(c);
    }
  }

 private:
  uint32_t share_, tile_;
  GlobalTensor<half> x_, y_, z_;
  TPipe pipe_;
  TQue<QuePosition::VECIN, 1> xq_, yq_;
  TQue<QuePosition::VECOUT, 1> zq_;
};

}  // namespace

extern "C" __global__ __aicore__ void mul_custom(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t totalLength,
                                                 uint32_t tileLength) {
  HalfMultiplier multiplier(x, y, z, totalLength, tileLength);
  multiplier.Run();
}
