// A program of ATen operator calls run as ONE MindSpore aot call: a whole ported forward graph, or its backward
// (aot_ops.from_torch(..., fuse=True)). MindSpore's Custom dispatch costs tens of microseconds per call while torch's
// dispatcher costs a few, so crossing MindSpore once per graph instead of once per node is what makes a ported
// network run at torch's speed.
//
// Attributes (aot_ops/_port/program.py writes them):
//   program_name         str        what errors are named after ("Net forward (training)")
//   program_key          str        a digest of the program: equal keys are equal programs (parsed once while
//                                   in use; see ProgramRegistry: who owns a program)
//   program_num_inputs   int        the tensors MindSpore passes as inputs
//   program_num_nodes    int
//   program_outputs      int list   the slot of each output
//   program_writes       int list   optional: (input index, slot) pairs, flattened: after the nodes, each slot's value
//                                   is written into that input's memory (a buffer the program updates where it
//                                   lives: a key/value cache). A node that already wrote it in place (its result
//                                   is the input itself) costs nothing; any other value is copied. MindSpore is
//                                   given no output for it.
//   program_out_shapes   str        output shapes as size expressions over the inputs (size_expr.h), for the C++
//                                   shape inference (also with a dynamic batch in GRAPH_MODE)
//   program_nodes        str        the nodes' attributes below, packed (ms_ext::Attrs::unpack): MindSpore converts
//                                   each attribute on every PyNative call, and a program has over a thousand
//   program_package      str        instead of the nodes (fuse="compile"): the folder of an unpacked AOTInductor
//                                   package computing the outputs from the inputs (aot_ops/_port/compiled.py); with
//                                   the nodes too (dynamic sizes), it runs the inputs it was compiled for and the
//                                   nodes run every other size
//   program_input_shapes int list   with a package: each input's rank then its sizes, as compiled
//   program_input_dtypes str        with a package: each input's dtype (MindSpore's names), comma-separated
//   program_input_ranges int list   with a package (optional): (input, dim, min, max) quadruples, flattened: sizes
//                                   the package takes anywhere in [min, max] (max -1: no bound), not only as given
//   program_package_writes bool     with a package and program_writes: the package writes those inputs itself (it
//                                   returns the outputs alone); without it, it returns the outputs, then the
//                                   written values in program_writes' order
//   program_kept_from    int        optional, a forward program: the outputs from this position on are the tensors
//                                   saved for the backward, kept here (SavedSets below) instead of handed to
//                                   MindSpore; MindSpore gets the outputs before it and one int64 [1] ticket
//   program_store_inputs int list   optional, a backward program: (input index, position in the saved set) pairs,
//                                   flattened: those inputs are taken from the saved set of the ticket MindSpore
//                                   passes as its first input, followed by the other inputs in order
// and packed in program_nodes:
//   n<k>_...             node k: the attributes of one generic ATen call (aten_op.cpp: aten_op, aten_kinds,
//                        aten_arg_<i>, ...), plus
//   n<k>_slots           int list   the slot of each of its tensor inputs, in the order AtenOp numbers them
//   n<k>_results         int        how many tensors it returns (they take the next slots)
//   n<k>_source          str        the torch node and source line it came from, for errors
//   n<k>_graph_shapes    bool       its size expressions also read the program inputs' shapes (optional)
//   n<k>_writes_input    bool       it writes its first argument in place (optional): a buffer of program_writes
// Slots 0..inputs-1 hold MindSpore's inputs; each node's results take the next free slot numbers in node order.
// Sizes that depend on input shapes are evaluated per node at run time, from its own inputs' shapes, followed for
// an n<k>_graph_shapes node by the program inputs' shapes (a size its own inputs do not show: expanding a 0-dim
// gradient to the batch size).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <ms_ext/ms_ext.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include "aten_plan.h"

namespace {

using namespace aten_bridge;

struct ProgramNode {
  AtenPlan plan;
  std::vector<int64_t> slots;
  int first_result;
  int num_results;
  std::string source;
  bool graph_shapes;             // sizes may read the program inputs' shapes, after the node's own
  std::vector<int64_t> release;  // slots last read by this node: freed after it runs (peak memory as torch's)
  std::vector<int64_t> publish;  // result slots that are program outputs: copied into MindSpore's buffer at once

  ProgramNode(const ms_ext::Attrs &attrs, int first)
      : plan(attrs, /*allow_factories=*/true, attrs.get<bool>("writes_input", false)), slots(attrs.get<std::vector<int64_t>>("slots")), first_result(first),
        num_results(static_cast<int>(attrs.get<int64_t>("results"))), source(attrs.get<std::string>("source", "")),
        graph_shapes(attrs.get<bool>("graph_shapes", false)) {
    if (plan.num_inputs < 0 || static_cast<size_t>(plan.num_inputs) != slots.size())
      throw std::invalid_argument(plan.name + ": " + std::to_string(slots.size()) + " input slots for " +
                                  std::to_string(plan.num_inputs) + " inputs");
  }

  std::string describe(size_t index) const {
    return "node " + std::to_string(index) + " (" + plan.name + (source.empty() ? "" : " at " + source) + ")";
  }
};

// A program compiled by AOTInductor: its generated code computes every output at once. That code trusts its
// inputs to be what it was compiled for (it indexes them with fixed sizes, or with the sizes it was compiled to
// take within a range), so each launch checks them first.
struct CompiledBody {
  struct DynamicSize {
    size_t input, dim;
    int64_t min, max;  // max < 0: no upper bound
  };
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader;
  size_t num_outputs;
  std::vector<ms_ext::Shape> shapes;
  std::vector<at::ScalarType> dtypes;
  std::vector<DynamicSize> dynamic;  // program_input_ranges: sizes compiled as dynamic, within their range

  CompiledBody(const ms_ext::Attrs &attrs, size_t outputs) : num_outputs(outputs) {
    const std::vector<int64_t> flat = attrs.get<std::vector<int64_t>>("program_input_shapes");
    for (size_t k = 0; k < flat.size();) {
      const int64_t rank = flat[k++];
      if (rank < 0 || k + static_cast<size_t>(rank) > flat.size())
        throw std::invalid_argument("program_input_shapes is malformed");
      shapes.emplace_back(flat.begin() + static_cast<std::ptrdiff_t>(k), flat.begin() + static_cast<std::ptrdiff_t>(k + rank));
      k += static_cast<size_t>(rank);
    }
    for (const std::optional<at::ScalarType> &dtype : parse_dtype_list(attrs.get<std::string>("program_input_dtypes"))) {
      if (!dtype) throw std::invalid_argument("program_input_dtypes names no dtype for an input");
      dtypes.push_back(*dtype);
    }
    if (dtypes.size() != shapes.size())
      throw std::invalid_argument(std::to_string(shapes.size()) + " input shapes for " + std::to_string(dtypes.size()) +
                                  " input dtypes");
    const std::vector<int64_t> ranges = attrs.get<std::vector<int64_t>>("program_input_ranges", {});
    if (ranges.size() % 4 != 0) throw std::invalid_argument("program_input_ranges is not a list of quadruples");
    for (size_t k = 0; k < ranges.size(); k += 4) {
      if (ranges[k] < 0 || static_cast<size_t>(ranges[k]) >= shapes.size() || ranges[k + 1] < 0 ||
          static_cast<size_t>(ranges[k + 1]) >= shapes[ranges[k]].size())
        throw std::invalid_argument("program_input_ranges names a size no input has");
      dynamic.push_back({static_cast<size_t>(ranges[k]), static_cast<size_t>(ranges[k + 1]), ranges[k + 2], ranges[k + 3]});
    }
    // A folder is loaded in place (a .pt2 archive would be unpacked to a temporary folder in every process).
    loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>(attrs.get<std::string>("program_package"));
  }

  // The range of size d of input i where the package takes it dynamic, nullptr where it was compiled for one size.
  const DynamicSize *range_of(size_t i, size_t d) const {
    const auto found = std::find_if(dynamic.begin(), dynamic.end(),
                                    [&](const DynamicSize &s) { return s.input == i && s.dim == d; });
    return found == dynamic.end() ? nullptr : &*found;
  }

  // Whether input i has the shape the package takes: the compiled sizes, a dynamic size anywhere in its range.
  bool fits(size_t i, const at::Tensor &t) const {
    if (t.dim() != static_cast<int64_t>(shapes[i].size()) || t.scalar_type() != dtypes[i] || !t.is_contiguous())
      return false;
    for (size_t d = 0; d < shapes[i].size(); ++d) {
      const int64_t size = t.size(static_cast<int64_t>(d));
      const DynamicSize *range = range_of(i, d);
      if (range == nullptr ? size != shapes[i][d] : size < range->min || (range->max >= 0 && size > range->max))
        return false;
    }
    return true;
  }

  std::string compiled_for(size_t i) const {
    std::string shape = "[";
    for (size_t d = 0; d < shapes[i].size(); ++d) {
      const DynamicSize *range = range_of(i, d);
      shape += (d ? ", " : "") + (range == nullptr ? std::to_string(shapes[i][d])
                                                   : std::to_string(range->min) + ".." +
                                                         (range->max >= 0 ? std::to_string(range->max) : ""));
    }
    return std::string(c10::toString(dtypes[i])) + " of shape " + shape + "]";
  }

  // Whether the package was compiled for these inputs (with dynamic sizes, other sizes run the nodes).
  bool accepts(const std::vector<at::Tensor> &inputs) const {
    if (inputs.size() != shapes.size()) return false;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (!fits(i, inputs[i])) return false;
    return true;
  }

  std::vector<at::Tensor> run(const std::vector<at::Tensor> &inputs) const {
    if (inputs.size() != shapes.size())
      throw std::invalid_argument(std::to_string(inputs.size()) + " inputs, the compiled program takes " +
                                  std::to_string(shapes.size()));
    for (size_t i = 0; i < inputs.size(); ++i) {
      const at::Tensor &t = inputs[i];
      if (!fits(i, t))
        throw std::invalid_argument("input " + std::to_string(i) + " is " + std::string(c10::toString(t.scalar_type())) +
                                    " of shape " + c10::str(t.sizes()) + (t.is_contiguous() ? "" : " (not contiguous)") +
                                    "; the program was compiled for " + compiled_for(i));
    }
    c10::InferenceMode inference;
    std::vector<at::Tensor> results = loader->run(inputs);
    if (results.size() != num_outputs)
      throw std::logic_error("the compiled program returned " + std::to_string(results.size()) + " tensors for " +
                             std::to_string(num_outputs) + " outputs");
    return results;
  }
};

// The tensors forward programs saved for their backward programs, while MindSpore holds only a ticket
// (program_kept_from, program_store_inputs; aot_ops/_port/programs/saved_in_library.py says when and why: under a
// PyNative gradient MindSpore held the saved outputs, and its graphs their memory, beside the next step's). Kept
// here, a set lives until its backward takes it, and each tensor is freed as soon as the backward has read it for
// the last time, as torch's autograd frees it.
// A set whose backward never runs (an exception between the forward and the backward, a forward whose outputs do
// not reach the loss) is dropped when a later forward of the same program keeps a set after a backward of that
// program took a newer set than it: backwards take sets newest first within one gradient, so an older set still
// here then belongs to a gradient that is over. A backward whose set was dropped raises an error naming it.
class SavedSets {
 public:
  int64_t keep(const std::string &program, std::vector<at::Tensor> tensors) {
    std::vector<std::vector<at::Tensor>> stale;  // freed after the lock is let go
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t ticket = next_++;
    const auto consumed = newest_taken_.find(program);
    if (consumed != newest_taken_.end())
      for (auto it = sets_.begin(); it != sets_.end();)
        if (it->second.program == program && it->first < consumed->second) {
          stale.push_back(std::move(it->second.tensors));
          dropped_.fetch_add(1, std::memory_order_relaxed);
          it = sets_.erase(it);
        } else {
          ++it;
        }
    sets_.emplace(ticket, Set{program, std::move(tensors)});
    return ticket;
  }

  // The set of `ticket`, no longer kept here.
  std::vector<at::Tensor> take(int64_t ticket) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = sets_.find(ticket);
    if (found == sets_.end())
      throw std::runtime_error(
          "the tensors its forward saved for it (ticket " + std::to_string(ticket) +
          ") are gone: each set is taken by one backward, and a set is dropped once a later gradient of the same "
          "program is over (a backward run twice for one forward, or after later gradients, is not supported)");
    int64_t &newest = newest_taken_[found->second.program];
    newest = std::max(newest, ticket);
    std::vector<at::Tensor> tensors = std::move(found->second.tensors);
    sets_.erase(found);
    return tensors;
  }

  int64_t count() {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int64_t>(sets_.size());
  }

  int64_t bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    int64_t total = 0;
    for (const auto &kv : sets_)
      for (const at::Tensor &t : kv.second.tensors)
        if (t.defined()) total += static_cast<int64_t>(t.storage().nbytes());
    return total;
  }

  int64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  struct Set {
    std::string program;
    std::vector<at::Tensor> tensors;
  };
  std::mutex mutex_;
  std::map<int64_t, Set> sets_;
  std::unordered_map<std::string, int64_t> newest_taken_;  // per program: the newest ticket a backward took
  int64_t next_ = 1;
  std::atomic<int64_t> dropped_{0};
};

// Never destroyed, as the program registry below.
SavedSets &saved_sets() {
  static SavedSets *const instance = new SavedSets();
  return *instance;
}

// A kept tensor must own its memory: one that is (a view of) an input or an output buffer lives in MindSpore's
// memory, which MindSpore may reuse once the launch returns.
at::Tensor owned(const at::Tensor &t, const std::vector<at::Tensor> &mindspore_buffers) {
  if (!t.defined()) return t;
  for (const at::Tensor &buffer : mindspore_buffers)
    if (buffer.defined() && t.storage().is_alias_of(buffer.storage())) return t.clone();
  return t;
}

// program_store_inputs read once for the kernel and for its shape inference: which program inputs come from a saved
// set, and where each of the others is among MindSpore's inputs (the ticket is MindSpore's input 0).
struct StoreInputs {
  std::vector<std::pair<int, size_t>> from_set;  // (program input, position in the set)
  std::vector<int> given_index;                   // per program input: its MindSpore input, or -1 (from the set)

  StoreInputs(const ms_ext::Attrs &attrs, int num_inputs) : given_index(static_cast<size_t>(num_inputs), 0) {
    const std::vector<int64_t> flat = attrs.get<std::vector<int64_t>>("program_store_inputs", {});
    if (flat.size() % 2 != 0) throw std::invalid_argument("program_store_inputs is not a list of pairs");
    for (size_t k = 0; k < flat.size(); k += 2) {
      if (flat[k] < 0 || flat[k] >= num_inputs || given_index[static_cast<size_t>(flat[k])] < 0 || flat[k + 1] < 0)
        throw std::invalid_argument("program_store_inputs names input " + std::to_string(flat[k]) + " of " +
                                    std::to_string(num_inputs) + " twice or out of range");
      given_index[static_cast<size_t>(flat[k])] = -1;
      from_set.emplace_back(static_cast<int>(flat[k]), static_cast<size_t>(flat[k + 1]));
    }
    int next = from_set.empty() ? 0 : 1;
    for (int &index : given_index)
      if (index == 0) index = next++;
  }

  bool empty() const { return from_set.empty(); }
  int mindspore_inputs() const {
    return empty() ? static_cast<int>(given_index.size())
                   : static_cast<int>(given_index.size() - from_set.size()) + 1;
  }
};

struct Program {
  std::string name;
  std::string key;  // program_key
  int num_inputs = 0;
  int num_slots = 0;
  std::deque<ProgramNode> nodes;  // a deque: AtenPlan is neither copyable nor movable
  std::vector<int64_t> outputs;
  std::vector<std::pair<int, int64_t>> writes;  // (input index, slot): program_writes
  bool package_writes = false;                  // program_package_writes
  bool reads_input_shapes = false;  // some node's sizes read the program inputs' shapes (n<k>_graph_shapes)
  int64_t kept_from = -1;  // program_kept_from: outputs from here on are kept in saved_sets(), -1: none
  StoreInputs store_inputs;                          // program_store_inputs
  std::vector<bool> kept_slot;                       // per slot: a kept output (never replaced by a buffer)
  // program_package: runs instead of the nodes; with the nodes too (dynamic sizes), for the inputs it was
  // compiled for, the nodes running every other size.
  std::unique_ptr<const CompiledBody> compiled;

  explicit Program(const ms_ext::Attrs &attrs)
      : name(attrs.get<std::string>("program_name")), key(attrs.get<std::string>("program_key", "")),
        num_inputs(static_cast<int>(attrs.get<int64_t>("program_num_inputs"))),
        outputs(attrs.get<std::vector<int64_t>>("program_outputs")), store_inputs(attrs, num_inputs) {
    const std::vector<int64_t> flat_writes = attrs.get<std::vector<int64_t>>("program_writes", {});
    if (flat_writes.size() % 2 != 0) throw std::invalid_argument("program_writes is not a list of pairs");
    for (size_t k = 0; k < flat_writes.size(); k += 2) {
      if (flat_writes[k] < 0 || flat_writes[k] >= num_inputs)
        throw std::invalid_argument("program_writes names input " + std::to_string(flat_writes[k]) + " of " +
                                    std::to_string(num_inputs));
      writes.emplace_back(static_cast<int>(flat_writes[k]), flat_writes[k + 1]);
    }
    package_writes = attrs.get<bool>("program_package_writes", false);
    kept_from = attrs.get<int64_t>("program_kept_from", -1);
    if (kept_from < -1 || kept_from > static_cast<int64_t>(outputs.size()))
      throw std::invalid_argument("program_kept_from is " + std::to_string(kept_from) + " for " +
                                  std::to_string(outputs.size()) + " outputs");
    if (attrs.has("program_package")) {
      try {
        compiled = std::make_unique<const CompiledBody>(attrs, outputs.size() + (package_writes ? 0 : writes.size()));
      } catch (...) {
        throw std::runtime_error("cannot load the compiled package " + attrs.get<std::string>("program_package") +
                                 ": " + ms_ext::detail::describe_current_exception());
      }
      if (!attrs.has("program_nodes")) return;
    }
    num_slots = num_inputs;
    const int64_t count = attrs.get<int64_t>("program_num_nodes");
    const ms_ext::Attrs packed = ms_ext::Attrs::unpack(attrs.get<std::string>("program_nodes"));
    for (int64_t k = 0; k < count; ++k) {
      ProgramNode &node = nodes.emplace_back(packed.prefixed("n" + std::to_string(k) + "_"), num_slots);
      for (int64_t slot : node.slots)
        if (slot < 0 || slot >= num_slots)
          throw std::invalid_argument(node.describe(k) + " reads slot " + std::to_string(slot) +
                                      ", which no earlier node or input fills");
      num_slots += node.num_results;
      reads_input_shapes = reads_input_shapes || node.graph_shapes;
    }
    for (int64_t slot : outputs)
      if (slot < 0 || slot >= num_slots) throw std::invalid_argument("an output reads slot " + std::to_string(slot));
    for (const auto &[input, slot] : writes)
      if (slot < 0 || slot >= num_slots) throw std::invalid_argument("a write reads slot " + std::to_string(slot));
    // Each slot is freed after its last reader, unless it is an output or written back.
    std::vector<int64_t> last_reader(num_slots, -1);
    for (size_t k = 0; k < nodes.size(); ++k)
      for (int64_t slot : nodes[k].slots) last_reader[slot] = static_cast<int64_t>(k);
    for (int64_t slot : outputs) last_reader[slot] = -1;
    for (const auto &[input, slot] : writes) last_reader[slot] = -1;
    for (int64_t slot = 0; slot < num_slots; ++slot)
      if (last_reader[slot] >= 0) nodes[last_reader[slot]].release.push_back(slot);
    output_positions.resize(num_slots);
    kept_slot.assign(num_slots, false);
    for (size_t j = 0; j < outputs.size(); ++j) {
      if (static_cast<int>(j) < visible_outputs())
        output_positions[outputs[j]].push_back(static_cast<int>(j));
      else
        kept_slot[outputs[j]] = true;
    }
    for (ProgramNode &node : nodes)
      for (int r = 0; r < node.num_results; ++r)
        if (!output_positions[node.first_result + r].empty()) node.publish.push_back(node.first_result + r);
  }

  std::vector<std::vector<int>> output_positions;  // per slot: the program outputs MindSpore gets it as, in order

  // The outputs MindSpore gets (a kept set's ticket aside), and MindSpore's counts of inputs and outputs.
  int visible_outputs() const { return kept_from < 0 ? static_cast<int>(outputs.size()) : static_cast<int>(kept_from); }
  int mindspore_outputs() const { return visible_outputs() + (kept_from < 0 ? 0 : 1); }
  int mindspore_inputs() const { return store_inputs.mindspore_inputs(); }

  // Whether `slot`'s value is published when made: an output a node computes (not one of the program's inputs).
  bool is_published(int64_t slot) const { return slot >= num_inputs; }

  // An output as soon as its node made it: copied into MindSpore's buffer (every position it is), and the slot
  // then holds that buffer for later readers, so the result's own memory is freed now instead of at the end.
  // Without this, a forward program held every tensor it saves for the backward twice at its end (its own
  // result and MindSpore's output buffer, allocated before the launch), and a backward program every gradient.
  void publish(ms_ext::Call &call, int64_t slot, std::vector<at::Tensor> &slots) const {
    const std::vector<int> &positions = output_positions[slot];
    for (int j : positions) call.set_output(j, slots[slot]);
    if (!kept_slot[slot]) slots[slot] = call.output(positions.front());  // a kept one stays the program's own
  }

  // Runs every node and writes program_writes' values into their inputs; the results of the output slots, in order.
  // With `call`, node-made outputs are already in its output buffers when this returns (publish).
  // The inputs are moved into the program's slots (unless written back), so that a tensor only they hold (one of a
  // kept set) is freed after its last reader.
  std::vector<at::Tensor> run(std::vector<at::Tensor> inputs, ms_ext::Call *call = nullptr) const {
    if (compiled && (nodes.empty() || compiled->accepts(inputs))) {
      std::vector<at::Tensor> results = compiled->run(inputs);
      if (!package_writes)
        for (size_t k = 0; k < writes.size(); ++k) write_back(inputs, writes[k].first, results[outputs.size() + k]);
      results.resize(outputs.size());
      return results;
    }
    // No tensor of a program outlives its launch (results are copied into MindSpore's buffers), so the dispatcher
    // may skip autograd and view tracking for every node.
    c10::InferenceMode inference;
    std::vector<ms_ext::Shape> input_shapes;
    if (reads_input_shapes)
      for (const at::Tensor &t : inputs) input_shapes.emplace_back(t.sizes().begin(), t.sizes().end());
    std::vector<at::Tensor> slots(num_slots);
    for (int i = 0; i < num_inputs; ++i) slots[i] = writes.empty() ? std::move(inputs[i]) : inputs[i];
    std::vector<at::Tensor> args;
    std::vector<ms_ext::Shape> shapes;
    for (size_t k = 0; k < nodes.size(); ++k) {
      const ProgramNode &node = nodes[k];
      try {
        args.clear();
        shapes.clear();
        for (int64_t slot : node.slots) {
          args.push_back(slots[slot]);
          shapes.emplace_back(slots[slot].sizes().begin(), slots[slot].sizes().end());
        }
        if (node.graph_shapes) shapes.insert(shapes.end(), input_shapes.begin(), input_shapes.end());
        torch::jit::Stack stack =
            node.plan.stack(node.plan.layout(static_cast<int>(args.size())), [&](int64_t i) { return args.at(i); },
                            shapes);
        node.plan.align_inputs(stack);
        node.plan.op->callBoxed(stack);
        std::vector<at::Tensor> results = flatten_results(stack);
        if (static_cast<int>(results.size()) != node.num_results)
          throw std::logic_error("returned " + std::to_string(results.size()) + " tensors, the program expects " +
                                 std::to_string(node.num_results));
        for (int r = 0; r < node.num_results; ++r) slots[node.first_result + r] = std::move(results[r]);
        if (call != nullptr)
          for (int64_t slot : node.publish) publish(*call, slot, slots);
      } catch (...) {
        throw std::runtime_error(node.describe(k) + ": " + ms_ext::detail::describe_current_exception());
      }
      for (int64_t slot : node.release) slots[slot].reset();
    }
    for (const auto &[input, slot] : writes) write_back(inputs, input, slots[slot]);
    std::vector<at::Tensor> out;
    for (size_t j = 0; j < outputs.size(); ++j) {  // a published output is its own buffer, at each of its positions
      const bool published = call != nullptr && is_published(outputs[j]) && static_cast<int>(j) < visible_outputs();
      out.push_back(published ? call->output(static_cast<int>(j)) : slots[outputs[j]]);
    }
    return out;
  }

  // `value` into input `input`'s memory, unless a node wrote it there already (its result is that memory).
  void write_back(const std::vector<at::Tensor> &inputs, int input, const at::Tensor &value) const {
    const at::Tensor &target = inputs[input];
    if (value.data_ptr() == target.data_ptr() && value.sizes() == target.sizes() && value.strides() == target.strides())
      return;
    if (value.sizes() != target.sizes() || value.scalar_type() != target.scalar_type())
      throw std::logic_error("the value written into input " + std::to_string(input) + " is " +
                             std::string(c10::toString(value.scalar_type())) + c10::str(value.sizes()) +
                             ", the input " + std::string(c10::toString(target.scalar_type())) +
                             c10::str(target.sizes()));
    c10::InferenceMode inference;
    at::Tensor(target).copy_(value);
  }
};

// Who owns a program. A parsed Program (with its loaded AOTInductor package, if any) is owned by shared_ptrs
// only, and freed when the last goes:
// - each kernel's state (ProgramRef): the one MindSpore keeps in its kernel data from the Init hook, or the one a
//   launch without kernel data builds for itself (launch_state's `local`);
// - the registry below, strongly, while the program's key is held: aot_ops/_port/program.py holds the key of every
//   Program object it makes (aot_ops_program_hold) and releases it when that object is collected
//   (aot_ops_program_release). A ported cell keeps its Program objects, so its programs are parsed once and stay
//   parsed while it lives, even where PyNative initialises and destroys a kernel per call; the last cell of a
//   program going frees it (or the last kernel still using it, after).
// The registry also keeps a weak reference per key, so kernels of a key nobody holds (a C caller, a kernel that
// outlives its cell) share one parse while any of them lives; nothing is kept after. An entry is erased when its
// key is neither held nor alive, so the map holds only what is in use.
class ProgramRegistry {
 public:
  // The program of `attrs` (program_key): the live one of that key, or parsed now.
  std::shared_ptr<const Program> get(const ms_ext::Attrs &attrs) {
    const std::string key = attrs.get<std::string>("program_key");
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto found = entries_.find(key);
      if (found != entries_.end())
        if (std::shared_ptr<const Program> live = found->second.weak.lock()) return live;
    }
    // Parsed outside the lock (a package loads for a while); two threads parsing one key at once keep the first.
    std::shared_ptr<const Program> fresh(new Program(attrs), Forget{this, key});
    parses_.fetch_add(1, std::memory_order_relaxed);
    std::shared_ptr<const Program> unused;  // a duplicate parse, freed after the lock is let go
    std::lock_guard<std::mutex> lock(mutex_);
    Entry &entry = entries_[key];
    if (std::shared_ptr<const Program> live = entry.weak.lock()) {
      unused = std::move(fresh);
      return live;
    }
    entry.weak = fresh;
    if (entry.holds > 0) entry.strong = fresh;
    return fresh;
  }

  // Keeps the program of `key` once parsed (and while parsed now) until as many releases: the holds so far.
  int64_t hold(const std::string &key) {
    std::lock_guard<std::mutex> lock(mutex_);
    Entry &entry = entries_[key];
    if (!entry.strong) entry.strong = entry.weak.lock();
    return ++entry.holds;
  }

  // One hold of `key` fewer: the holds left, or -1 when the key was not held (nothing changes).
  int64_t release(const std::string &key) {
    std::shared_ptr<const Program> last;  // dropped after the lock is let go: its deleter takes the lock
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = entries_.find(key);
    if (found == entries_.end() || found->second.holds == 0) return -1;
    Entry &entry = found->second;
    const int64_t left = --entry.holds;
    if (left == 0) {
      last = std::move(entry.strong);
      entry.strong.reset();
      if (!last && entry.weak.expired()) entries_.erase(found);  // otherwise the program's deleter erases it
    }
    return left;
  }

  int64_t held() {
    std::lock_guard<std::mutex> lock(mutex_);
    int64_t n = 0;
    for (const auto &kv : entries_) n += kv.second.holds > 0;
    return n;
  }

  int64_t alive() {
    std::lock_guard<std::mutex> lock(mutex_);
    int64_t n = 0;
    for (const auto &kv : entries_) n += !kv.second.weak.expired();
    return n;
  }

  int64_t entries() {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int64_t>(entries_.size());
  }

  int64_t parses() const { return parses_.load(std::memory_order_relaxed); }

 private:
  struct Entry {
    int64_t holds = 0;
    std::shared_ptr<const Program> strong;  // while held and parsed
    std::weak_ptr<const Program> weak;      // the live parse, if any
  };

  // The deleter of a parsed program: frees it, then its entry if nothing holds the key or lives for it any more.
  struct Forget {
    ProgramRegistry *registry;
    std::string key;
    void operator()(const Program *program) const {
      delete program;
      std::lock_guard<std::mutex> lock(registry->mutex_);
      auto found = registry->entries_.find(key);
      if (found != registry->entries_.end() && found->second.holds == 0 && found->second.weak.expired())
        registry->entries_.erase(found);
    }
  };

  std::mutex mutex_;
  std::unordered_map<std::string, Entry> entries_;
  std::atomic<int64_t> parses_{0};
};

// Never destroyed: MindSpore may destroy kernels (and their programs) after static destructors ran at exit.
ProgramRegistry &registry() {
  static ProgramRegistry *const instance = new ProgramRegistry();
  return *instance;
}

// The kernel's state: its program, shared with every kernel of equal program_key (see ProgramRegistry: parsed
// once while a cell holds it).
struct ProgramRef {
  std::shared_ptr<const Program> program;

  explicit ProgramRef(const ms_ext::Attrs &attrs) : program(registry().get(attrs)) {}
};

std::atomic<int64_t> g_program_launches{0};
std::atomic<int64_t> g_program_nanoseconds{0};  // wall time inside launches: what a step spends outside is MindSpore's

// Counts one launch and its duration, however it ends.
struct LaunchTimer {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  LaunchTimer() { g_program_launches.fetch_add(1, std::memory_order_relaxed); }
  ~LaunchTimer() {
    const auto spent = std::chrono::steady_clock::now() - start;
    g_program_nanoseconds.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(spent).count(),
                                    std::memory_order_relaxed);
  }
};

// The program's inputs from MindSpore's: as given, or (program_store_inputs) the saved set of the ticket given
// first, with the other inputs after it.
std::vector<at::Tensor> program_inputs(const Program &program, const std::vector<at::Tensor> &given) {
  if (program.store_inputs.empty()) return given;
  const at::Tensor &ticket = given.at(0);
  if (ticket.scalar_type() != at::kLong || ticket.numel() != 1)
    throw std::invalid_argument("input 0 must be the int64 ticket of the forward's saved tensors, got " +
                                std::string(c10::toString(ticket.scalar_type())) + c10::str(ticket.sizes()));
  std::vector<at::Tensor> set = saved_sets().take(ticket.item<int64_t>());
  std::vector<at::Tensor> inputs(static_cast<size_t>(program.num_inputs));
  for (const auto &[input, position] : program.store_inputs.from_set) {
    if (position >= set.size())
      throw std::logic_error("the saved set holds " + std::to_string(set.size()) + " tensors, input " +
                             std::to_string(input) + " reads its tensor " + std::to_string(position));
    inputs[input] = set[position];
  }
  set.clear();  // the program's slots are now the only holders: each is freed after its last reader
  for (size_t i = 0; i < inputs.size(); ++i)
    if (program.store_inputs.given_index[i] >= 0) inputs[i] = given.at(program.store_inputs.given_index[i]);
  return inputs;
}

int program_launch(const char *entry, const ms_ext::detail::RawArgs &raw) {
  const LaunchTimer timer;
  std::string op_name = entry;
  ms_ext::detail::guarded(op_name, [&] {
    ms_ext::detail::DefaultPlacement::Scope scope(raw);
    const ms_ext::Attrs attrs(raw.extra);
    std::optional<ProgramRef> local;
    const Program &program =
        *ms_ext::detail::launch_state(attrs, ms_ext::detail::kernel_data<ProgramRef>(raw.extra), local).program;
    op_name = program.name;
    const ms_ext::Signature sig = ms_ext::Signature()
                                      .inputs(program.mindspore_inputs())
                                      .outputs(program.mindspore_outputs())
                                      .split_from_attributes();
    ms_ext::Call call(program.name.c_str(), sig, raw, attrs, 0, scope.device());
    std::vector<at::Tensor> given;  // MindSpore's inputs
    for (int i = 0; i < call.num_inputs(); ++i) given.push_back(call.input(i));
    const std::vector<at::Tensor> results = program.run(program_inputs(program, given), &call);
    for (int j = 0; j < program.visible_outputs(); ++j)  // what run() published is there already
      if (!results[j].is_same(call.output(j))) call.set_output(j, results[j]);
    if (program.kept_from >= 0) {
      std::vector<at::Tensor> mindspore_buffers = given;
      for (int j = 0; j < call.num_outputs(); ++j) mindspore_buffers.push_back(call.output(j));
      std::vector<at::Tensor> kept;
      for (size_t j = static_cast<size_t>(program.kept_from); j < results.size(); ++j)
        kept.push_back(owned(results[j], mindspore_buffers));
      const int64_t ticket = saved_sets().keep(program.key, std::move(kept));
      call.output(program.visible_outputs()).fill_(ticket);
    }
    call.check_outputs_intact();
    scope.finish();
  });
  return 0;
}

// The output shapes from the size expressions alone: cheap enough for PyNative's per-call shape inference.
std::vector<ms_ext::Shape> program_shapes(const char *entry, int *ndims, int64_t **shapes, void *extra) {
  std::string op_name = entry;
  std::vector<ms_ext::Shape> out;
  ms_ext::detail::guarded(op_name, [&] {
    const ms_ext::Attrs attrs(extra);
    op_name = attrs.get<std::string>("program_name");
    const int num_inputs = static_cast<int>(attrs.get<int64_t>("program_num_inputs"));
    const int num_outputs = static_cast<int>(attrs.get<std::vector<int64_t>>("program_outputs").size());
    const ShapeExprs exprs(attrs.get<std::string>("program_out_shapes"), num_outputs);
    // Inputs from a saved set have no shape here: aot_ops keeps sets only where the output shapes do not read them.
    const StoreInputs store(attrs, num_inputs);
    const std::vector<ms_ext::Shape> given_shapes =
        ms_ext::detail::read_input_shapes(store.mindspore_inputs(), ndims, shapes);
    std::vector<ms_ext::Shape> input_shapes;
    for (int index : store.given_index)
      input_shapes.push_back(index < 0 ? ms_ext::Shape{} : given_shapes.at(static_cast<size_t>(index)));
    out = exprs.evaluate(input_shapes);
    const int64_t kept_from = attrs.get<int64_t>("program_kept_from", -1);
    if (kept_from >= 0 && kept_from <= static_cast<int64_t>(out.size())) {
      out.resize(static_cast<size_t>(kept_from));
      out.push_back({1});  // the ticket
    }
  });
  return out;
}

}  // namespace

// Saved sets kept for backward programs (SavedSets): how many, their bytes, and how many were dropped unused.
extern "C" MS_EXT_EXPORT int64_t aot_ops_saved_sets(void) { return saved_sets().count(); }
extern "C" MS_EXT_EXPORT int64_t aot_ops_saved_bytes(void) { return saved_sets().bytes(); }
extern "C" MS_EXT_EXPORT int64_t aot_ops_saved_sets_dropped(void) { return saved_sets().dropped(); }

extern "C" MS_EXT_EXPORT int64_t aot_ops_program_launches(void) {
  return g_program_launches.load(std::memory_order_relaxed);
}

extern "C" MS_EXT_EXPORT int64_t aot_ops_program_nanoseconds(void) {
  return g_program_nanoseconds.load(std::memory_order_relaxed);
}

// Ownership of parsed programs (ProgramRegistry above). Hold and release return the key's holds left (release: -1
// when it was not held); they never throw.
extern "C" MS_EXT_EXPORT int64_t aot_ops_program_hold(const char *key) {
  if (key == nullptr) return -1;
  try {
    return registry().hold(key);
  } catch (...) {
    return -1;
  }
}

extern "C" MS_EXT_EXPORT int64_t aot_ops_program_release(const char *key) {
  if (key == nullptr) return -1;
  try {
    return registry().release(key);
  } catch (...) {
    return -1;
  }
}

// Keys held (by live Program objects), parsed programs alive (held or used by a kernel), registry entries (keys
// held or alive), and parses so far.
extern "C" MS_EXT_EXPORT int64_t aot_ops_programs_held(void) { return registry().held(); }
extern "C" MS_EXT_EXPORT int64_t aot_ops_programs_alive(void) { return registry().alive(); }
extern "C" MS_EXT_EXPORT int64_t aot_ops_program_entries(void) { return registry().entries(); }
extern "C" MS_EXT_EXPORT int64_t aot_ops_program_parses(void) { return registry().parses(); }

// AtenProgram (one output) and AtenProgramMulti (several) differ only in the C++ shape inference's return type.
MS_EXT_RUNTIME_ARITY_ENTRY(AtenProgram, ProgramRef, program_launch)
MS_EXT_RUNTIME_ARITY_ENTRY(AtenProgramMulti, ProgramRef, program_launch)

extern "C" MS_EXT_EXPORT std::vector<int64_t> AtenProgramInferShape(int *ndims, int64_t **shapes, void *extra) {
  return program_shapes("AtenProgram", ndims, shapes, extra).at(0);
}
extern "C" MS_EXT_EXPORT std::vector<std::vector<int64_t>> AtenProgramMultiInferShape(int *ndims, int64_t **shapes,
                                                                                    void *extra) {
  return program_shapes("AtenProgramMulti", ndims, shapes, extra);
}
