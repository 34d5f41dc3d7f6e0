// Broadcasting binary operators (Add, Mul) and their backwards on ATen (CPU).
//
// Outputs follow torch's broadcasting and type promotion: the Python side infers them with torch on the meta
// device, and the kernel re-checks them with ATen's own rules (infer_size, result_type) before writing.
#include <ATen/ExpandUtils.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/add.h>
#include <ATen/ops/mul.h>

#include <ms_ext/ms_ext.h>

namespace {

// ATen's CPU add has no kernel for uint16/32/64; mul has.
const ms_ext::DtypeSet kAddTypes =
    ms_ext::floating_types() | ms_ext::integral_types() | ms_ext::complex_types() | ms_ext::bool_type();
const ms_ext::DtypeSet kMulTypes = kAddTypes | ms_ext::barebones_unsigned_types();

bool differentiable(const at::Tensor &t) { return at::isFloatingType(t.scalar_type()) || t.is_complex(); }

// The gradient of an input that was broadcast is the incoming gradient summed back to the input's shape.
// Integer and bool inputs are not differentiable: their gradient is zero, in their own dtype.
void write_input_grad(ms_ext::Call &call, int i, const at::Tensor &input, const at::Tensor &grad) {
  if (!differentiable(input)) {
    call.output_like(i, input).zero_();
    return;
  }
  call.set_output(i, at::sum_to(grad, input.sizes()).to(input.scalar_type()));
}

at::Tensor &broadcast_output(ms_ext::Call &call, const at::Tensor &a, const at::Tensor &b) {
  return call.output(0, at::infer_size(a.sizes(), b.sizes()), at::native::result_type({a, b}));
}

}  // namespace

// out = a + b
MS_EXT_KERNEL(Add, ms_ext::Signature().inputs(2).outputs(1).dtypes(kAddTypes)) {
  const at::Tensor &a = call.input(0), &b = call.input(1);
  at::add_out(broadcast_output(call, a, b), a, b);
}

// (da, db) = AddGrad(dout, a, b)
MS_EXT_KERNEL(AddGrad, ms_ext::Signature().inputs(3).outputs(2).dtypes(kAddTypes)) {
  const at::Tensor &dout = call.input(0), &a = call.input(1), &b = call.input(2);
  write_input_grad(call, 0, a, dout);
  write_input_grad(call, 1, b, dout);
}

// out = a * b
MS_EXT_KERNEL(Mul, ms_ext::Signature().inputs(2).outputs(1).dtypes(kMulTypes)) {
  const at::Tensor &a = call.input(0), &b = call.input(1);
  at::mul_out(broadcast_output(call, a, b), a, b);
}

// (da, db) = MulGrad(dout, a, b): da = sum_to(dout * conj(b), a.shape), db likewise.
MS_EXT_KERNEL(MulGrad, ms_ext::Signature().inputs(3).outputs(2).dtypes(kMulTypes)) {
  const at::Tensor &dout = call.input(0), &a = call.input(1), &b = call.input(2);
  write_input_grad(call, 0, a, differentiable(a) ? at::mul(dout, b.conj()) : at::Tensor());
  write_input_grad(call, 1, b, differentiable(b) ? at::mul(dout, a.conj()) : at::Tensor());
}
