// The emulator launches of the bundled kernels. The kernel entry points are plain functions here (g++ compiles
// the same source CANN compiles for the NPU), so a launch is a call per core through ascendc_emu::launch.
#include "launchers.h"

#include "kernel_operator.h"

extern "C" void add_custom(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t totalLength);
extern "C" void leaky_relu_custom(GM_ADDR x, GM_ADDR y, uint32_t totalLength, uint32_t tileLength,
                                  float negativeSlope);
extern "C" void softmax_custom(GM_ADDR x, GM_ADDR y, uint32_t rows, uint32_t cols, uint32_t tileRows);

namespace ascendc_host {

namespace {
// Kernels receive GM_ADDR (a non-const byte pointer) for inputs too; they only read them.
GM_ADDR gm(const void *p) { return static_cast<GM_ADDR>(const_cast<void *>(p)); }
}  // namespace

void add_custom(int64_t blockDim, const ascendc_emu::LaunchOptions &options, const void *x, const void *y, void *z,
                uint32_t totalLength) {
  ascendc_emu::launch("add_custom", blockDim, options, ::add_custom, gm(x), gm(y), gm(z), totalLength);
}

void leaky_relu_custom(int64_t blockDim, const ascendc_emu::LaunchOptions &options, const void *x, void *y,
                       uint32_t totalLength, uint32_t tileLength, float negativeSlope) {
  ascendc_emu::launch("leaky_relu_custom", blockDim, options, ::leaky_relu_custom, gm(x), gm(y), totalLength,
                      tileLength, negativeSlope);
}

void softmax_custom(int64_t blockDim, const ascendc_emu::LaunchOptions &options, const void *x, void *y,
                    uint32_t rows, uint32_t cols, uint32_t tileRows) {
  ascendc_emu::launch("softmax_custom", blockDim, options, ::softmax_custom, gm(x), gm(y), rows, cols, tileRows);
}

}  // namespace ascendc_host
