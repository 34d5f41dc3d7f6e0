// Broadcasting binary operators (Add, Mul) and their backwards on ATen (CPU).
#include <ATen/ExpandUtils.h>
#include <ATen/ops/add.h>
#include <ATen/ops/mul.h>

#include <ms_ext/ms_ext.h>

namespace {

// ATen's CPU add has no kernel for uint16/32/64; mul has.
constexpr ms_ext::DtypeSet kAddTypes =
    ms_ext::floating_types() | ms_ext::integral_types() | ms_ext::complex_types() | ms_ext::bool_type();
constexpr ms_ext::DtypeSet kMulTypes = kAddTypes | ms_ext::barebones_unsigned_types();

std::vector<ms_ext::Shape> broadcast(const ms_ext::ShapeArgs &args) {
  return {ms_ext::broadcast_shapes(args.shape(0), args.shape(1))};
}

// The output dtype is torch.promote_types of both inputs whatever their ranks (MindSpore infers dtypes without
// shapes). ATen would compute in its own common dtype, in which a 0-dim operand has lower priority (half + 0-dim
// double is computed in half, then widened), so both operands are converted to the output dtype first.
at::Tensor in_dtype_of(const at::Tensor &t, const at::Tensor &out) { return t.to(out.scalar_type()); }

bool differentiable(const at::Tensor &t) { return at::isFloatingType(t.scalar_type()) || t.is_complex(); }

// The gradient of an input that was broadcast is the incoming gradient summed back to the input's shape.
// Integer and bool inputs are not differentiable: their gradient is zero.
void write_input_grad(ms_ext::Call &call, int i, const at::Tensor &input, const at::Tensor &grad) {
  if (differentiable(input)) {
    call.output(i).copy_(at::sum_to(grad, input.sizes()));
  } else {
    call.output(i).zero_();
  }
}

}  // namespace

// out = a + b
MS_EXT_KERNEL(Add, ms_ext::Signature().inputs(2).outputs(1).dtypes(kAddTypes).shapes(broadcast)
                       .types(ms_ext::promoted_type_of_inputs)) {
  at::Tensor &out = call.output(0);
  at::add_out(out, in_dtype_of(call.input(0), out), in_dtype_of(call.input(1), out));
}

// (da, db) = AddGrad(dout, a, b)
MS_EXT_KERNEL(AddGrad, ms_ext::Signature().inputs(3).outputs(2).dtypes(kAddTypes)
                           .shapes(ms_ext::shapes_of_inputs_after_first)
                           .types(ms_ext::types_of_inputs_after_first)) {
  const at::Tensor &dout = call.input(0), &a = call.input(1), &b = call.input(2);
  write_input_grad(call, 0, a, dout);
  write_input_grad(call, 1, b, dout);
}

// out = a * b
MS_EXT_KERNEL(Mul, ms_ext::Signature().inputs(2).outputs(1).dtypes(kMulTypes).shapes(broadcast)
                       .types(ms_ext::promoted_type_of_inputs)) {
  at::Tensor &out = call.output(0);
  at::mul_out(out, in_dtype_of(call.input(0), out), in_dtype_of(call.input(1), out));
}

// (da, db) = MulGrad(dout, a, b): da = sum_to(dout * conj(b), a.shape), db likewise.
MS_EXT_KERNEL(MulGrad, ms_ext::Signature().inputs(3).outputs(2).dtypes(kMulTypes)
                           .shapes(ms_ext::shapes_of_inputs_after_first)
                           .types(ms_ext::types_of_inputs_after_first)) {
  const at::Tensor &dout = call.input(0), &a = call.input(1), &b = call.input(2);
  write_input_grad(call, 0, a, differentiable(a) ? at::mul(dout, b.conj()) : at::Tensor());
  write_input_grad(call, 1, b, differentiable(b) ? at::mul(dout, a.conj()) : at::Tensor());
}
