// y = max(x, x * negativeSlope) in fp16 (leaky_relu for slopes in [0, 1]): a user's Ascend C kernel with a float
// argument that comes from an operator attribute. Each core takes totalLength / blockDim elements as one tile.
#include "kernel_operator.h"

using namespace AscendC;

namespace {

class HalfLeaky {
 public:
  __aicore__ inline HalfLeaky(GM_ADDR x, GM_ADDR y, uint32_t totalLength, float negativeSlope)
      : share_(totalLength / GetBlockNum()), slope_(negativeSlope) {
    const uint64_t first = static_cast<uint64_t>(share_) * GetBlockIdx();
    x_.SetGlobalBuffer(reinterpret_cast<__gm__ half *>(x) + first, share_);
    y_.SetGlobalBuffer(reinterpret_cast<__gm__ half *>(y) + first, share_);
    pipe_.InitBuffer(xq_, 1, share_ * sizeof(half));
    pipe_.InitBuffer(yq_, 1, share_ * sizeof(half));
  }

  __aicore__ inline void Run() {
    LocalTensor<half> a = xq_.AllocTensor<half>();
    DataCopy(a, x_[0], share_);
    xq_.EnQue(a);
    a = xq_.DeQue<half>();
    LocalTensor<half> b = yq_.AllocTensor<half>();
    Muls(b, a, static_cast<half>(slope_), share_);  // the slope in fp16, as the vector unit takes it
    Max(b, a, b, share_);
    yq_.EnQue<half>(b);
    xq_.FreeTensor(a);
    b = yq_.DeQue<half>();
    DataCopy(y_[0], b, share_);
    yq_.FreeTensor(b);
  }

 private:
  uint32_t share_;
  float slope_;
  GlobalTensor<half> x_, y_;
  TPipe pipe_;
  TQue<QuePosition::VECIN, 1> xq_;
  TQue<QuePosition::VECOUT, 1> yq_;
};

}  // namespace

extern "C" __global__ __aicore__ void leaky_custom(GM_ADDR x, GM_ADDR y, uint32_t totalLength, float negativeSlope) {
  HalfLeaky op(x, y, totalLength, negativeSlope);
  op.Run();
}
