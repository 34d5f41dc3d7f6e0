// A count of live per-kernel state objects (ms_ext::detail::KernelDataBase), so tests and users can check that
// MindSpore frees kernel states with their kernels.
#include <atomic>

#include "ms_ext/c_api.h"

namespace {
std::atomic<int64_t> g_live_kernel_states{0};
}

extern "C" {
void ms_ext_kernel_state_created(void) { g_live_kernel_states.fetch_add(1, std::memory_order_relaxed); }
void ms_ext_kernel_state_destroyed(void) { g_live_kernel_states.fetch_sub(1, std::memory_order_relaxed); }
int64_t ms_ext_live_kernel_states(void) { return g_live_kernel_states.load(std::memory_order_relaxed); }
}
