#include "operators.h"

#include <ATen/ops/add.h>
#include <ATen/ops/leaky_relu.h>
#include <ATen/ops/softmax.h>

#include <stdexcept>
#include <string>

#include "add_custom_tiling.h"
#include "emulator_settings.h"
#include "launchers.h"
#include "leaky_relu_custom_tiling.h"
#include "paths.h"
#include "softmax_custom_tiling.h"

namespace ascendc_aot {

namespace {

void check_contiguous_cpu(const at::Tensor &t, const char *what) {
  if (!t.is_cpu() || !t.is_contiguous())
    throw std::invalid_argument(std::string(what) + " must be a contiguous CPU tensor");
}

}  // namespace

void add_custom(const at::Tensor &x, const at::Tensor &y, const at::Tensor &out, int64_t blockDim) {
  check_contiguous_cpu(x, "x");
  check_contiguous_cpu(y, "y");
  check_contiguous_cpu(out, "out");
  const ascendc_emu::LaunchOptions options = launch_options();
  std::string unmet = x.scalar_type() == at::kHalf ? add_custom_tiling::unmet_precondition(
                                                         x.numel(), blockDim, static_cast<int64_t>(options.ub_bytes))
                                                   : "dtype is not float16";
  if (!unmet.empty()) {
    note_path("AddCustom", "aten", unmet.c_str());
    at::add_out(const_cast<at::Tensor &>(out), x, y);
    return;
  }
  note_path("AddCustom", "kernel");
  ascendc_host::add_custom(blockDim, options, x.data_ptr(), y.data_ptr(), out.data_ptr(),
                           static_cast<uint32_t>(x.numel()));
}

void leaky_relu_custom(const at::Tensor &x, const at::Tensor &out, double negativeSlope, int64_t blockDim) {
  check_contiguous_cpu(x, "x");
  check_contiguous_cpu(out, "out");
  const ascendc_emu::LaunchOptions options = launch_options();
  leaky_relu_custom_tiling::Plan plan;
  if (x.scalar_type() == at::kHalf)
    plan = leaky_relu_custom_tiling::plan(x.numel(), blockDim, static_cast<int64_t>(options.ub_bytes));
  else
    plan.unmet = "dtype is not float16";
  if (!plan.unmet.empty()) {
    note_path("LeakyReluCustom", "aten", plan.unmet.c_str());
    at::leaky_relu_out(const_cast<at::Tensor &>(out), x, negativeSlope);
    return;
  }
  note_path("LeakyReluCustom", "kernel");
  ascendc_host::leaky_relu_custom(blockDim, options, x.data_ptr(), out.data_ptr(), static_cast<uint32_t>(x.numel()),
                                  plan.tileLength, static_cast<float>(negativeSlope));
}

void softmax_custom(const at::Tensor &x, const at::Tensor &out, int64_t blockDim) {
  check_contiguous_cpu(x, "x");
  check_contiguous_cpu(out, "out");
  const ascendc_emu::LaunchOptions options = launch_options();
  const int64_t cols = x.dim() == 0 ? 1 : x.size(-1);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  softmax_custom_tiling::Plan plan;
  if (x.scalar_type() == at::kFloat)
    plan = softmax_custom_tiling::plan(rows, cols, blockDim, static_cast<int64_t>(options.ub_bytes));
  else
    plan.unmet = "dtype is not float32";
  if (!plan.unmet.empty()) {
    note_path("SoftmaxCustom", "aten", plan.unmet.c_str());
    at::softmax_out(const_cast<at::Tensor &>(out), x, -1);
    return;
  }
  note_path("SoftmaxCustom", "kernel");
  ascendc_host::softmax_custom(blockDim, options, x.data_ptr(), out.data_ptr(), static_cast<uint32_t>(rows),
                               static_cast<uint32_t>(cols), plan.tileRows);
}

}  // namespace ascendc_aot
