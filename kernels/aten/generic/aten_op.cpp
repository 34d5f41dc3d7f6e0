// Any ATen operator, called by schema name through the c10 dispatcher's boxed API: one precompiled entry point
// (AtenOp) and its generic backward (AtenOpBackward).
//
// aot_ops binds a call to the operator's schema in Python and sends the result as attributes:
//   aten_op           "aten::add.Tensor"          the functional overload
//   aten_out_op       "aten::add.out" or ""        its out= overload with the same arguments, when one exists
//   aten_num_inputs   int                          how many tensors MindSpore passes as inputs; -1 when a tensor
//                                                  list given at call time decides (aten_num_outputs is then set)
//   aten_num_outputs  int                          how many outputs the operator has (-1: unknown until called)
//   aten_kinds        int list                     one ArgKind per schema argument, in schema order
//   aten_arg_<i>      value of argument i          (absent for tensors' None and for NONE)
//   aten_out_shapes   str, optional                output shapes as size expressions (size_expr.h), for the C++
//                                                  shape inference of operators with dynamic shapes
// The kinds and their encodings must match aot_ops/_aten/encode.py. An optional tensor argument may arrive as
// None (MindSpore passes NULL and "none"), which the operator receives as None.
//
// Entry points: AtenOp (one output) and AtenOpMulti (several), which differ only in the C++ shape inference
// MindSpore calls (it expects std::vector<int64_t> for one output and a vector of them for several); likewise
// AtenOpBackward / AtenOpBackwardMulti.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/autograd.h>

#include <atomic>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <ms_ext/ms_ext.h>

#include "aten_plan.h"

namespace {

using namespace aten_bridge;

// The plan, parsed once in the Init hook and kept as MindSpore's kernel data, or per call without Init.
// Launches of the generic entries since the library was loaded: [0] forward, [1] backward. A diagnostic: how many
// bridged calls a network makes per step (aot_ops.aten_launches()).
std::atomic<int64_t> g_launches[2];

// ms_ext's launch boundary and state lookup (ms_ext/entry.h), with errors named after the ATen operator
// once the plan is known. The generic entries have no fixed Signature (their arity comes from the attributes), so
// they check their arguments themselves instead of through ms_ext::Call.
template <typename Body>
int run(const char *entry, const ms_ext::detail::RawArgs &raw, Body body) {
  std::string op_name = entry;
  ms_ext::detail::guarded(op_name, [&] {
    ms_ext::detail::DefaultPlacement::Scope scope(raw);  // the device (and on CUDA, MindSpore's stream)
    const ms_ext::Attrs attrs(raw.extra);
    std::optional<AtenPlan> local;
    const AtenPlan &plan =
        ms_ext::detail::launch_state(attrs, ms_ext::detail::kernel_data<AtenPlan>(raw.extra), local);
    op_name = plan.name;
    body(plan, attrs, scope.device());
    scope.finish();
  });
  return 0;
}

// C++ shape inference (the forward's output shapes, or the backward's gradient shapes), which GRAPH_MODE needs
// for inputs whose shapes are unknown until run time. `several`: the entry serves operators with several outputs.
template <typename Rule>
std::vector<ms_ext::Shape> infer_shapes(const char *entry, void *extra, bool several, Rule rule) {
  std::string op_name = entry;
  std::vector<ms_ext::Shape> out;
  ms_ext::detail::guarded(op_name, [&] {
    const ms_ext::Attrs attrs(extra);
    const AtenPlan plan(attrs);
    op_name = plan.name;
    if (plan.num_inputs < 0)
      throw std::logic_error("a tensor list given at call time has no C++ shape inference; fix its length");
    out = rule(plan);
    if (several ? out.empty() : out.size() != 1)
      throw std::logic_error(std::string("the kernel has ") + std::to_string(out.size()) + " output(s); use " +
                             (several ? "the single-output entry" : "the entry for several outputs"));
  });
  return out;
}

// Forward: the output shapes aot_ops sent as size expressions (aten_out_shapes).
std::vector<ms_ext::Shape> forward_shapes(const char *entry, int *ndims, int64_t **shapes, void *extra, bool several) {
  return infer_shapes(entry, extra, several, [&](const AtenPlan &plan) {
    if (!plan.out_shapes)
      throw std::logic_error("no output shape expressions (aten_out_shapes): its outputs are inferred in Python");
    return plan.out_shapes->evaluate(ms_ext::detail::read_input_shapes(plan.num_inputs, ndims, shapes));
  });
}

// Backward: one gradient per forward input, shaped like it.
std::vector<ms_ext::Shape> backward_shapes(const char *entry, int *ndims, int64_t **shapes, void *extra, bool several) {
  return infer_shapes(entry, extra, several, [&](const AtenPlan &plan) {
    return ms_ext::detail::read_input_shapes(plan.num_inputs, ndims, shapes);  // checked: a C caller may pass junk
  });
}

// outputs = op(inputs): into MindSpore's buffers through the out= overload when there is one, else computed and
// copied after checking each result against its buffer.
int forward_launch(const char *entry, const ms_ext::detail::RawArgs &raw) {
  g_launches[0].fetch_add(1, std::memory_order_relaxed);
  return run(entry, raw, [&](const AtenPlan &plan, const ms_ext::Attrs &attrs, at::Device device) {
    const int n_in = plan.forward_inputs(raw.nparam);
    const ms_ext::Signature sig = ms_ext::Signature().inputs(n_in).outputs(raw.nparam - n_in).split_from_attributes();
    ms_ext::Call call(plan.name.c_str(), sig, raw, attrs, 0, device, /*none_inputs=*/true);
    const CallLayout layout = plan.layout(n_in);
    torch::jit::Stack s =
        plan.stack(layout, [&](int64_t i) { return call.input(static_cast<int>(i)); }, input_shapes(call));
    plan.align_inputs(s);
    if (plan.out_op && !plan.out_op_resizes.load()) {
      // Aliases of the output views: a failed resize changes an alias's shape, not the views Call checks.
      torch::jit::Stack with_outputs = s;
      std::vector<at::Tensor> aliases;
      for (int i = 0; i < call.num_outputs(); ++i) {
        aliases.push_back(call.output(i).alias());
        with_outputs.emplace_back(aliases.back());
      }
      try {
        plan.out_op->callBoxed(with_outputs);
        for (int i = 0; i < call.num_outputs(); ++i) {
          if (!aliases[i].is_alias_of(call.output(i)) || aliases[i].sizes() != call.output(i).sizes())
            throw std::logic_error("the out= overload left output " + std::to_string(i) + " with shape " +
                                   ms_ext::shape_string(aliases[i].sizes()) + " instead of " +
                                   ms_ext::shape_string(call.output(i).sizes()));
        }
        call.check_outputs_intact();
        return;
      } catch (const c10::Error &e) {
        if (std::string(e.what()).find(kTorchResizeRefused) == std::string::npos) throw;
        plan.out_op_resizes.store(true);
      }
    }
    plan.op->callBoxed(s);
    const std::vector<at::Tensor> results = flatten_results(s);
    if (static_cast<int>(results.size()) != call.num_outputs())
      throw std::invalid_argument("the operator returned " + std::to_string(results.size()) + " tensors for " +
                                  std::to_string(call.num_outputs()) + " outputs");
    for (int i = 0; i < call.num_outputs(); ++i) call.set_output(i, results[i]);
    call.check_outputs_intact();
  });
}

// (grad inputs...) = backward(inputs..., cotangents of the outputs...): the operator replayed under torch autograd
// on leaf copies of the inputs, and its vector-Jacobian product. Inputs that are not floating or complex (indices,
// masks), inputs the outputs do not depend on and None inputs (a 0-dim gradient) get zero gradients.
int backward_launch(const char *entry, const ms_ext::detail::RawArgs &raw) {
  g_launches[1].fetch_add(1, std::memory_order_relaxed);
  return run(entry, raw, [&](const AtenPlan &plan, const ms_ext::Attrs &attrs, at::Device device) {
    const int n_in = plan.backward_inputs(raw.nparam), n_cotangents = raw.nparam - 2 * n_in;
    const ms_ext::Signature sig = ms_ext::Signature().inputs(n_in + n_cotangents).outputs(n_in).split_from_attributes();
    ms_ext::Call call(plan.name.c_str(), sig, raw, attrs, 0, device, /*none_inputs=*/true);
    const CallLayout layout = plan.layout(n_in);
    std::vector<ms_ext::Shape> shapes = input_shapes(call);
    shapes.resize(n_in);
    at::AutoGradMode enable_grad(true);
    std::vector<bool> differentiable(n_in);
    for (int i = 0; i < n_in; ++i) {
      const at::Tensor &t = call.input(i);
      differentiable[i] = t.defined() && (at::isFloatingType(t.scalar_type()) || t.is_complex());
    }
    // Outputs of integer or boolean dtype carry no gradient (cumsum of float counts with dtype=int32): with no
    // floating cotangent there is nothing to replay (torch's autograd would refuse the integer result).
    bool any_gradient = false;
    for (int k = 0; k < n_cotangents; ++k) {
      const at::Tensor &c = call.input(n_in + k);
      any_gradient = any_gradient || (c.defined() && (at::isFloatingType(c.scalar_type()) || c.is_complex()));
    }
    if (!any_gradient) {
      for (int i = 0; i < n_in; ++i) call.output(i).zero_();
      call.check_outputs_intact();
      return;
    }
    std::vector<at::Tensor> leaves;
    std::vector<at::Tensor> results;
    // Some operators refuse a gradient for some floating inputs (batch norm's running statistics, a loss's target):
    // torch names the argument, which then becomes non-differentiable, and the replay runs again.
    for (int attempt = 0;; ++attempt) {
      leaves.clear();
      for (int i = 0; i < n_in; ++i)
        leaves.push_back(differentiable[i] ? call.input(i).detach().requires_grad_(true) : call.input(i));
      torch::jit::Stack s = plan.stack(layout, [&](int64_t i) { return leaves.at(i); }, shapes);
      try {
        plan.op->callBoxed(s);
      } catch (const c10::Error &e) {
        const std::string what = e.what_without_backtrace();
        const size_t at = what.find(kTorchNotDifferentiable);
        if (at == std::string::npos || attempt >= n_in) throw;
        const size_t start = at + std::strlen(kTorchNotDifferentiable);
        const std::string argument = what.substr(start, what.find('\'', start) - start);
        if (!plan.mark_not_differentiable(argument, layout, differentiable)) throw;
        continue;
      }
      results = flatten_results(s);
      break;
    }
    if (static_cast<int>(results.size()) != n_cotangents)
      throw std::invalid_argument("the operator returned " + std::to_string(results.size()) + " tensors for " +
                                  std::to_string(n_cotangents) + " cotangents");
    std::vector<at::Tensor> outputs, cotangents, wrt;
    for (int k = 0; k < n_cotangents; ++k) {
      if (results[k].requires_grad()) {
        outputs.push_back(results[k]);
        cotangents.push_back(call.input(n_in + k));
      }
    }
    for (const at::Tensor &leaf : leaves)
      if (leaf.defined() && leaf.requires_grad()) wrt.push_back(leaf);
    std::vector<at::Tensor> grads;
    if (!outputs.empty() && !wrt.empty())
      grads = torch::autograd::grad(outputs, wrt, cotangents, /*retain_graph=*/false, /*create_graph=*/false,
                                    /*allow_unused=*/true);
    size_t next = 0;
    for (int i = 0; i < n_in; ++i) {
      const bool has_grad = leaves[i].defined() && leaves[i].requires_grad();
      at::Tensor grad = has_grad && next < grads.size() ? grads[next++] : at::Tensor();
      if (grad.defined()) {
        call.set_output(i, grad);
      } else {
        call.output(i).zero_();
      }
    }
    call.check_outputs_intact();
  });
}

}  // namespace

// Why the bridge refuses an operator ("" when it runs it), for aot_ops to ask before it makes an operator: the
// policy lives here, once. `qualified` is "aten::add.Tensor"; an unknown operator gives its reason too. The text
// is the calling thread's until its next call.
extern "C" MS_EXT_EXPORT const char *aot_ops_aten_refusal(const char *qualified, int allow_factories) {
  thread_local std::string answer;
  try {
    answer = refusal_of(find_operator(qualified), allow_factories != 0);
  } catch (...) {
    answer = ms_ext::detail::describe_current_exception();
  }
  return answer.c_str();
}

// Why the bridge refuses this call ("" when it runs it): the operator's policy, then the call's own arguments
// (CallRule: dropout_p, integer indices). `packed_attrs` are the call's attributes as aot_ops encodes them, packed
// (ms_ext::Attrs::unpack); `input_dtypes` the MindSpore dtype names of its inputs, comma-separated ("" for a None
// input), or NULL when unknown (the operator is made before it is called: its inference asks again with them).
// `*checks_dtypes` is set to whether the inputs' dtypes can still refuse the call. Malformed attributes are
// refused too, with the kernel's own words.
extern "C" MS_EXT_EXPORT const char *aot_ops_aten_call_refusal(const char *packed_attrs, const char *input_dtypes,
                                                              int allow_factories, int *checks_dtypes) {
  thread_local std::string answer;
  answer.clear();
  *checks_dtypes = 0;
  try {
    const ms_ext::Attrs attrs = ms_ext::Attrs::unpack(packed_attrs);
    const AtenPlan plan(attrs, allow_factories != 0);
    for (const Arg &arg : plan.args) *checks_dtypes = *checks_dtypes || arg.integer_only;
    if (input_dtypes != nullptr && *checks_dtypes) {
      const std::vector<std::optional<at::ScalarType>> dtypes = parse_dtype_list(input_dtypes);
      const CallLayout layout = plan.layout(static_cast<int>(dtypes.size()));
      answer = plan.value_refusal(layout, [&](int64_t i) {
        return i < static_cast<int64_t>(dtypes.size()) ? dtypes[i] : std::nullopt;
      });
    }
  } catch (const Refused &refused) {
    answer = refused.reason;
  } catch (...) {
    answer = ms_ext::detail::describe_current_exception();
  }
  return answer.c_str();
}

extern "C" MS_EXT_EXPORT int64_t aot_ops_aten_launches(int backward) {
  return g_launches[backward != 0 ? 1 : 0].load(std::memory_order_relaxed);
}

MS_EXT_RUNTIME_ARITY_ENTRY(AtenOp, AtenPlan, forward_launch)
MS_EXT_RUNTIME_ARITY_ENTRY(AtenOpMulti, AtenPlan, forward_launch)
MS_EXT_RUNTIME_ARITY_ENTRY(AtenOpBackward, AtenPlan, backward_launch)
MS_EXT_RUNTIME_ARITY_ENTRY(AtenOpBackwardMulti, AtenPlan, backward_launch)

extern "C" MS_EXT_EXPORT std::vector<int64_t> AtenOpInferShape(int *ndims, int64_t **shapes, void *extra) {
  return forward_shapes("AtenOp", ndims, shapes, extra, false).at(0);
}
extern "C" MS_EXT_EXPORT std::vector<std::vector<int64_t>> AtenOpMultiInferShape(int *ndims, int64_t **shapes,
                                                                                 void *extra) {
  return forward_shapes("AtenOpMulti", ndims, shapes, extra, true);
}
extern "C" MS_EXT_EXPORT std::vector<int64_t> AtenOpBackwardInferShape(int *ndims, int64_t **shapes, void *extra) {
  return backward_shapes("AtenOpBackward", ndims, shapes, extra, false).at(0);
}
extern "C" MS_EXT_EXPORT std::vector<std::vector<int64_t>> AtenOpBackwardMultiInferShape(int *ndims,
                                                                                         int64_t **shapes,
                                                                                         void *extra) {
  return backward_shapes("AtenOpBackwardMulti", ndims, shapes, extra, true);
}
