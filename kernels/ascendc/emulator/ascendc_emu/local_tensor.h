// LocalTensor<T>: a view of one UB buffer handed out by a queue (AllocTensor/DeQue) or a TBuf (Get).
//
// A tensor remembers the generation of the buffer it came from; FreeTensor starts a new generation, so any copy
// kept past FreeTensor is recognised as "use after FreeTensor" (INVARIANTS.md invariant 3).
#pragma once

#include <cstdint>
#include <string>

#include "core.h"

namespace ascendc_emu {

// The life of a queue buffer: FREE -> AllocTensor -> HELD -> EnQue -> QUEUED -> DeQue -> HELD -> FreeTensor -> FREE.
enum class BufferState { kFree, kHeld, kQueued };

struct BufferSlot {
  uint8_t *addr = nullptr;
  uint32_t bytes = 0;  // rounded up to 32 B
  BufferState state = BufferState::kFree;
  uint64_t generation = 0;
  const void *owner = nullptr;  // the queue (or TBuf) that carved it
  std::string owner_name;       // "queue 0 (VECIN)", for messages
};

enum class Access { kRead, kWrite, kReadWrite };

template <typename T>
class LocalTensor {
 public:
  LocalTensor() = default;
  LocalTensor(BufferSlot *slot, uint64_t generation, uint32_t offset = 0)
      : slot_(slot), generation_(generation), offset_(offset) {}

  // A view starting `offset` elements further (the UB address must stay 32-B aligned to be a vector operand).
  LocalTensor operator[](uint32_t offset) const { return LocalTensor(slot_, generation_, offset_ + offset); }

  uint32_t GetSize() const { return slot_ == nullptr ? 0 : slot_->bytes / sizeof(T) - offset_; }

  T GetValue(uint32_t index) const { return *elements("LocalTensor::GetValue", "tensor", index, 1, Access::kRead, false); }
  void SetValue(uint32_t index, T value) const {
    *elements("LocalTensor::SetValue", "tensor", index, 1, Access::kWrite, false) = value;
  }

  // Emulator side: the address of elements [index, index + count) after checking that the tensor is alive, not
  // sitting in a queue, big enough, 32-B aligned when it is a vector/DataCopy operand, and (for reads) written.
  T *elements(const char *call, const char *role, uint32_t index, uint32_t count, Access access,
              bool operand = true) const {
    CoreContext &core = current_core(call);
    const std::string who = std::string(role) + " ";
    if (slot_ == nullptr) core.fail(call, who + "was never allocated (default-constructed LocalTensor)");
    if (slot_->generation != generation_ || slot_->state == BufferState::kFree)
      core.fail(call, who + "of " + slot_->owner_name + " is used after FreeTensor");
    if (slot_->state == BufferState::kQueued)
      core.fail(call, who + "of " + slot_->owner_name + " is used while enqueued (DeQue it first)");
    const uint64_t first = static_cast<uint64_t>(offset_) + index;
    const uint64_t capacity = slot_->bytes / sizeof(T);
    if (first + count > capacity)
      core.fail(call, who + "needs elements [" + std::to_string(first) + ", " + std::to_string(first + count) +
                          ") but its buffer holds " + std::to_string(capacity));
    T *p = reinterpret_cast<T *>(slot_->addr) + first;
    if (operand && (reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(core.ub_begin())) % kBlockBytes != 0)
      core.fail(call, who + "UB address is not 32-byte aligned (element offset " + std::to_string(first) + ")");
    if (access != Access::kWrite) {
      const int64_t hole = core.first_unwritten(p, static_cast<size_t>(count) * sizeof(T));
      if (hole >= 0)
        core.fail(call, who + "element " + std::to_string(first + hole / sizeof(T)) + " of " + slot_->owner_name +
                            " is read but was never written (fresh UB holds NaN)");
    }
    if (access != Access::kRead) core.mark_written(p, static_cast<size_t>(count) * sizeof(T));
    return p;
  }

  BufferSlot *slot() const { return slot_; }
  uint64_t generation() const { return generation_; }
  uint32_t offset() const { return offset_; }

 private:
  BufferSlot *slot_ = nullptr;
  uint64_t generation_ = 0;
  uint32_t offset_ = 0;
};

}  // namespace ascendc_emu
