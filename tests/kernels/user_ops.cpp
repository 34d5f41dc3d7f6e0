// A user's own aot source, as `python -m aot_ops build` compiles it. Used by the tests.
#include <ATen/ops/mul.h>

#include <ms_ext/ms_ext.h>

// out = x * 2 (any dtype torch can multiply)
MS_EXT_KERNEL(Double, ms_ext::Signature().inputs(1).outputs(1)) {
  const at::Tensor &x = call.input(0);
  const at::Tensor result = at::mul(x, 2);
  call.set_output(0, result);
}

// out = x, byte for byte: shows each dtype string maps to a type of the right size.
MS_EXT_KERNEL(Identity, ms_ext::Signature().inputs(1).outputs(1)) {
  call.output_like(0, call.input(0)).copy_(call.input(0));
}

// Throws something that is not a std::exception. Without ms_ext's boundary this aborts MindSpore's process.
MS_EXT_KERNEL(ThrowsInt, ms_ext::Signature().inputs(1).outputs(1)) {
  throw 42;
}

// The same throw with no ms_ext boundary: what a hand-written entry point does.
extern "C" int ThrowsIntUnguarded(int, void **, int *, int64_t **, const char **, void *, void *) { throw 42; }

// Shrinks its output view instead of filling it: ms_ext must refuse to return such a result.
MS_EXT_KERNEL(ShrinksOutput, ms_ext::Signature().inputs(1).outputs(1)) {
  call.output_unchecked(0).resize_({1});
}

// Increments its input in place (and returns the new value): proves input views alias the caller's buffer.
MS_EXT_KERNEL(IncrementInput, ms_ext::Signature().inputs(1).outputs(1)) {
  at::Tensor x = call.input(0);
  x.add_(1);
  call.output_like(0, x).copy_(x);
}
