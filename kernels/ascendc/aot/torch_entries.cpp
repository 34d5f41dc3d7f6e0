// C entry points for PyTorch (aot_ops/ascendc/torch_ops.py registers them with torch.library): the same operators as
// the MindSpore entries, taking raw CPU buffers, one shape and MindSpore's dtype string. They return 0, or -1 with
// the reason in ms_ext_last_error() (an emulator error included), so ctypes callers never see a C++ exception.
#include <ATen/ops/from_blob.h>

#include <ms_ext/c_api.h>
#include <ms_ext/detail/boundary.h>
#include <ms_ext/dtypes.h>

#include <string>
#include <vector>

#include "operators.h"

namespace {

at::Tensor view(void *data, const int64_t *shape, int ndim, const char *dtype) {
  const std::vector<int64_t> sizes(shape, shape + ndim);
  return at::from_blob(data, sizes, at::TensorOptions().dtype(ms_ext::scalar_type_from_ms(dtype)));
}

}  // namespace

extern "C" MS_EXT_EXPORT int ascendc_torch_add_custom(void *x, void *y, void *out, const int64_t *shape, int ndim,
                                                      const char *dtype, int64_t block_dim) {
  return ms_ext::detail::guarded_status("add_custom", [&] {
    ascendc_aot::add_custom(view(x, shape, ndim, dtype), view(y, shape, ndim, dtype), view(out, shape, ndim, dtype),
                            block_dim);
  });
}

extern "C" MS_EXT_EXPORT int ascendc_torch_leaky_relu_custom(void *x, void *out, const int64_t *shape, int ndim,
                                                             const char *dtype, double negative_slope,
                                                             int64_t block_dim) {
  return ms_ext::detail::guarded_status("leaky_relu_custom", [&] {
    ascendc_aot::leaky_relu_custom(view(x, shape, ndim, dtype), view(out, shape, ndim, dtype), negative_slope,
                                   block_dim);
  });
}

extern "C" MS_EXT_EXPORT int ascendc_torch_softmax_custom(void *x, void *out, const int64_t *shape, int ndim,
                                                          const char *dtype, int64_t block_dim) {
  return ms_ext::detail::guarded_status("softmax_custom", [&] {
    if (ndim == 0) throw std::invalid_argument("softmax over the last dimension needs rank >= 1");
    ascendc_aot::softmax_custom(view(x, shape, ndim, dtype), view(out, shape, ndim, dtype), block_dim);
  });
}
