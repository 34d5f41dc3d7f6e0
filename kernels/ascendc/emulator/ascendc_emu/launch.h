// Running a kernel on blockDim emulated cores.
//
// INVARIANTS.md, invariant 4: blockDim in [1, 65535]; each core has a private UB; two cores writing the same GM
// bytes is a bug; the result must not depend on the order the cores run in (in order, reversed, on threads).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core.h"
#include "error.h"

namespace ascendc_emu {

enum class CoreOrder {
  kInOrder,   // core 0, 1, ..., blockDim-1, one after the other
  kReversed,  // blockDim-1 down to 0
  kThreads,   // a pool of threads takes cores as they come, so cores interleave
};

struct LaunchOptions {
  CoreOrder order = CoreOrder::kInOrder;
  size_t ub_bytes = kUb910B;  // per core
  unsigned threads = 0;       // kThreads: pool size (0: one per hardware thread, at least 2)
};

namespace detail {

struct CoreWrite {
  GmWrite range;
  int64_t core;
};

// Finds two cores whose GM writes overlap. Sorted by start address, a range overlaps an earlier one of another
// core exactly when it starts before the furthest end reached by some other core; tracking the furthest end of
// the two best cores is enough to know one of them.
inline void check_gm_races(const char *kernel, const std::vector<std::vector<GmWrite>> &per_core) {
  std::vector<CoreWrite> all;
  for (size_t core = 0; core < per_core.size(); ++core)
    for (const GmWrite &w : per_core[core]) all.push_back({w, static_cast<int64_t>(core)});
  std::sort(all.begin(), all.end(), [](const CoreWrite &a, const CoreWrite &b) {
    return a.range.begin != b.range.begin ? a.range.begin < b.range.begin : a.core < b.core;
  });
  CoreWrite first{{0, 0, nullptr}, -1}, second{{0, 0, nullptr}, -1};  // furthest ends, distinct cores
  for (const CoreWrite &w : all) {
    for (const CoreWrite *earlier : {&first, &second}) {
      if (earlier->core >= 0 && earlier->core != w.core && w.range.begin < earlier->range.end) {
        std::ostringstream what;
        what << "writes GM bytes [0x" << std::hex << w.range.begin << ", 0x"
             << std::min(w.range.end, earlier->range.end) << std::dec << ") that core " << earlier->core
             << " also wrote (" << earlier->range.call << "); cores must write disjoint GM ranges";
        throw AscendcEmulatorError(kernel, w.core, w.range.call, what.str());
      }
    }
    if (w.core == first.core) {
      if (w.range.end > first.range.end) first = w;
    } else if (w.range.end > first.range.end) {
      second = first;
      first = w;
    } else if (w.range.end > second.range.end) {
      second = w;
    }
  }
}

// Restores the thread's current core even when the kernel throws.
class CurrentCore {
 public:
  explicit CurrentCore(CoreContext *core) : previous_(t_current_core) { t_current_core = core; }
  ~CurrentCore() { t_current_core = previous_; }

 private:
  CoreContext *previous_;
};

}  // namespace detail

inline const char *core_order_name(CoreOrder order) {
  switch (order) {
    case CoreOrder::kInOrder: return "in_order";
    case CoreOrder::kReversed: return "reversed";
    case CoreOrder::kThreads: return "threads";
  }
  return "?";
}

// The order named `name` (core_order_name's names); false, leaving `order` as it was, for any other name.
inline bool parse_core_order(const char *name, CoreOrder *order) {
  for (CoreOrder candidate : {CoreOrder::kInOrder, CoreOrder::kReversed, CoreOrder::kThreads}) {
    if (name != nullptr && std::string(name) == core_order_name(candidate)) {
      *order = candidate;
      return true;
    }
  }
  return false;
}

// Runs `kernel_fn(args...)` once per core. Throws AscendcEmulatorError for the first invariant broken (with
// threads: the error of the lowest-numbered failing core, after every thread has joined).
template <typename... Params, typename... Args>
void launch(const char *kernel, int64_t blockDim, const LaunchOptions &options, void (*kernel_fn)(Params...),
            Args... args) {
  if (blockDim < 1 || blockDim > kMaxBlockDim)
    throw AscendcEmulatorError(kernel, -1, "launch",
                               "blockDim " + std::to_string(blockDim) + " is outside [1, " +
                                   std::to_string(kMaxBlockDim) + "]");
  std::vector<std::vector<GmWrite>> writes(static_cast<size_t>(blockDim));
  auto run_core = [&](int64_t core) {
    CoreContext context(kernel, core, blockDim, options.ub_bytes);
    {
      detail::CurrentCore scope(&context);
      kernel_fn(static_cast<Params>(args)...);
      context.throw_deferred();  // leaks found while the kernel's queues were destroyed
    }
    writes[static_cast<size_t>(core)] = context.take_gm_writes();
  };

  switch (options.order) {
    case CoreOrder::kInOrder:
      for (int64_t core = 0; core < blockDim; ++core) run_core(core);
      break;
    case CoreOrder::kReversed:
      for (int64_t core = blockDim - 1; core >= 0; --core) run_core(core);
      break;
    case CoreOrder::kThreads: {
      const unsigned hw = std::max(2u, std::thread::hardware_concurrency());
      const unsigned pool = static_cast<unsigned>(
          std::min<int64_t>(blockDim, options.threads > 0 ? options.threads : hw));
      std::atomic<int64_t> next{0};
      std::atomic<bool> failed{false};
      std::mutex mutex;
      int64_t error_core = -1;
      std::exception_ptr error;
      auto worker = [&] {
        for (int64_t core; !failed && (core = next++) < blockDim;) {
          try {
            run_core(core);
          } catch (...) {
            std::lock_guard<std::mutex> lock(mutex);
            failed = true;
            if (error_core < 0 || core < error_core) error_core = core, error = std::current_exception();
          }
        }
      };
      std::vector<std::thread> threads;
      for (unsigned i = 0; i < pool; ++i) threads.emplace_back(worker);
      for (std::thread &t : threads) t.join();
      if (error) std::rethrow_exception(error);
      break;
    }
  }
  detail::check_gm_races(kernel, writes);
}

}  // namespace ascendc_emu
