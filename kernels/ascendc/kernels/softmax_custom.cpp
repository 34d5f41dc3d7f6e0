// y = softmax(x) over each row of a [rows, cols] fp32 matrix: y = exp(x - max(x)) / sum(exp(x - max(x))).
//
// Handles tails: rows are split over the cores (some get one row more, or none), and a core's last tile may hold fewer
// than tileRows rows. Precondition (softmax_custom_tiling, aot_ops/ascendc/_bundled.py): cols is a multiple of 8, so
// every row is a whole number of 32-B blocks and starts 32-B aligned in the UB (INVARIANTS.md: UB operands must be 32-B
// aligned).
#include "kernel_operator.h"

#include "split.h"

using namespace AscendC;

namespace {

constexpr int32_t kBuffersPerQueue = 2;

class SoftmaxCore {
 public:
  __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, uint32_t rows, uint32_t cols, uint32_t tileRows) {
    const auto share = ascendc_tiling::core_share(rows, GetBlockNum(), GetBlockIdx());
    rows_ = static_cast<uint32_t>(share.count);
    cols_ = cols;
    tileRows_ = tileRows;
    const uint64_t start = static_cast<uint64_t>(share.first) * cols;
    xGm_.SetGlobalBuffer((__gm__ float *)x + start, static_cast<uint64_t>(rows_) * cols);
    yGm_.SetGlobalBuffer((__gm__ float *)y + start, static_cast<uint64_t>(rows_) * cols);
    pipe_.InitBuffer(inQueue_, kBuffersPerQueue, tileRows_ * cols_ * sizeof(float));
    pipe_.InitBuffer(outQueue_, kBuffersPerQueue, tileRows_ * cols_ * sizeof(float));
    pipe_.InitBuffer(work_, cols_ * sizeof(float));
    pipe_.InitBuffer(reduced_, 32);
  }

  __aicore__ inline void Process() {
    for (uint32_t row = 0; row < rows_; row += tileRows_) {
      const uint32_t count = rows_ - row < tileRows_ ? rows_ - row : tileRows_;  // the tail tile
      LoadTile(row, count);
      ComputeTile(count);
      StoreTile(row, count);
    }
  }

 private:
  __aicore__ inline void LoadTile(uint32_t row, uint32_t count) {
    LocalTensor<float> xLocal = inQueue_.AllocTensor<float>();
    DataCopy(xLocal, xGm_[static_cast<uint64_t>(row) * cols_], count * cols_);
    inQueue_.EnQue(xLocal);
  }

  __aicore__ inline void ComputeTile(uint32_t count) {
    LocalTensor<float> xLocal = inQueue_.DeQue<float>();
    LocalTensor<float> yLocal = outQueue_.AllocTensor<float>();
    LocalTensor<float> work = work_.Get<float>();
    LocalTensor<float> reduced = reduced_.Get<float>();
    for (uint32_t r = 0; r < count; ++r) {
      LocalTensor<float> xRow = xLocal[r * cols_];
      LocalTensor<float> yRow = yLocal[r * cols_];
      ReduceMax(reduced, xRow, work, cols_);
      const float rowMax = reduced.GetValue(0);  // the scalar unit reads the vector result
      Adds(yRow, xRow, -rowMax, cols_);
      Exp(yRow, yRow, cols_);
      ReduceSum(reduced, yRow, work, cols_);
      const float rowSum = reduced.GetValue(0);
      Muls(yRow, yRow, 1.0f / rowSum, cols_);
    }
    outQueue_.EnQue(yLocal);
    inQueue_.FreeTensor(xLocal);
  }

  __aicore__ inline void StoreTile(uint32_t row, uint32_t count) {
    LocalTensor<float> yLocal = outQueue_.DeQue<float>();
    DataCopy(yGm_[static_cast<uint64_t>(row) * cols_], yLocal, count * cols_);
    outQueue_.FreeTensor(yLocal);
  }

  TPipe pipe_;
  TQue<QuePosition::VECIN, 1> inQueue_;
  TQue<QuePosition::VECOUT, 1> outQueue_;
  TBuf<TPosition::VECCALC> work_, reduced_;
  GlobalTensor<float> xGm_, yGm_;
  uint32_t rows_ = 0;
  uint32_t cols_ = 0;
  uint32_t tileRows_ = 0;
};

}  // namespace

extern "C" __global__ __aicore__ void softmax_custom(GM_ADDR x, GM_ADDR y, uint32_t rows, uint32_t cols,
                                                     uint32_t tileRows) {
  SoftmaxCore op;
  op.Init(x, y, rows, cols, tileRows);
  op.Process();
}
