// One emulated AI core: its private Unified Buffer (UB), which UB bytes hold written data, the GM bytes it wrote,
// and the first problem found while objects were being destroyed at kernel end.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "error.h"

namespace ascendc_emu {

// INVARIANTS.md: DataCopy lengths are multiples of 32 B and UB operands are 32-B aligned; InitBuffer rounds every
// buffer up to 32 B.
constexpr size_t kBlockBytes = 32;
// INVARIANTS.md: 192 KB of UB on 910B (A2/A3), 256 KB on 910A/310P. The A2 budget is the default.
constexpr size_t kUb910B = 192 * 1024;
constexpr size_t kUb910A = 256 * 1024;
constexpr int kMaxBuffersPerPipe = 64;
constexpr int64_t kMaxBlockDim = 65535;

inline size_t round_up_to_block(size_t bytes) { return (bytes + kBlockBytes - 1) / kBlockBytes * kBlockBytes; }

// A range of GM bytes one core wrote, and with which call (for the race report).
struct GmWrite {
  uintptr_t begin;
  uintptr_t end;
  const char *call;
};

class CoreContext {
 public:
  CoreContext(const char *kernel, int64_t core, int64_t block_dim, size_t ub_bytes)
      : kernel_(kernel), core_(core), block_dim_(block_dim), ub_bytes_(ub_bytes),
        written_(new uint8_t[ub_bytes == 0 ? 1 : ub_bytes]) {
    // Left uninitialised here: carve() prepares only what InitBuffer hands out, so a launch of many cores that
    // use little UB stays cheap.
    ub_ = static_cast<uint8_t *>(std::aligned_alloc(kBlockBytes, round_up_to_block(ub_bytes == 0 ? 1 : ub_bytes)));
    if (ub_ == nullptr) throw std::bad_alloc();
  }
  ~CoreContext() { std::free(ub_); }
  CoreContext(const CoreContext &) = delete;
  CoreContext &operator=(const CoreContext &) = delete;

  const char *kernel() const { return kernel_; }
  int64_t core() const { return core_; }
  int64_t block_dim() const { return block_dim_; }
  size_t ub_bytes() const { return ub_bytes_; }

  [[noreturn]] void fail(const std::string &call, const std::string &what) const {
    throw AscendcEmulatorError(kernel_, core_, call, what);
  }

  // Carves `bytes` (already rounded to 32 B) from the UB; the caller checks capacity first.
  uint8_t *carve(size_t bytes) {
    uint8_t *p = ub_ + ub_used_;
    ub_used_ += bytes;
    mark_fresh(p, bytes);
    return p;
  }
  size_t ub_used() const { return ub_used_; }
  const uint8_t *ub_begin() const { return ub_; }

  // ---- which UB bytes hold data a kernel wrote ------------------------------------------------------------------
  // INVARIANTS.md: fresh UB is filled with NaN so that unwritten tails show up (0xFF bytes are NaN in fp16 and fp32),
  // and none of it counts as written.
  void mark_fresh(void *p, size_t bytes) {
    std::memset(p, 0xFF, bytes);
    std::memset(&written_[offset_of(p)], 0, bytes);
  }
  void mark_written(const void *p, size_t bytes) { std::memset(&written_[offset_of(p)], 1, bytes); }
  // Byte offset (from p) of the first byte never written, or -1 when all were written.
  int64_t first_unwritten(const void *p, size_t bytes) const {
    const uint8_t *w = &written_[offset_of(p)];
    const void *hole = std::memchr(w, 0, bytes);
    return hole == nullptr ? -1 : static_cast<const uint8_t *>(hole) - w;
  }

  // ---- GM writes, for the check that no two cores write the same bytes ----------------------------------------
  void record_gm_write(const void *p, size_t bytes, const char *call) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
    if (bytes == 0) return;
    if (!gm_writes_.empty() && gm_writes_.back().end == begin && gm_writes_.back().call == call) {
      gm_writes_.back().end += bytes;  // consecutive tiles coalesce into one range
    } else {
      gm_writes_.push_back({begin, begin + bytes, call});
    }
  }
  std::vector<GmWrite> take_gm_writes() { return std::move(gm_writes_); }

  // ---- problems found by destructors (which must not throw) ---------------------------------------------------
  // A queue or pipe destroyed while the kernel unwinds from an earlier error says nothing: that error is the cause.
  void defer(const std::string &call, const std::string &what) {
    if (std::uncaught_exceptions() > 0 || !deferred_.empty()) return;
    deferred_call_ = call;
    deferred_ = what;
  }
  void throw_deferred() const {
    if (!deferred_.empty()) fail(deferred_call_, deferred_);
  }

 private:
  size_t offset_of(const void *p) const { return static_cast<const uint8_t *>(p) - ub_; }

  const char *kernel_;
  int64_t core_;
  int64_t block_dim_;
  size_t ub_bytes_;
  uint8_t *ub_ = nullptr;
  size_t ub_used_ = 0;
  std::unique_ptr<uint8_t[]> written_;  // one flag per UB byte
  std::vector<GmWrite> gm_writes_;
  std::string deferred_call_;
  std::string deferred_;
};

// The core the calling thread is running (set by launch for the duration of one core's kernel call).
inline thread_local CoreContext *t_current_core = nullptr;

inline CoreContext &current_core(const char *call) {
  if (t_current_core == nullptr)
    throw AscendcEmulatorError("?", -1, call, "called outside a kernel launch (use ascendc_emu::launch)");
  return *t_current_core;
}

}  // namespace ascendc_emu
