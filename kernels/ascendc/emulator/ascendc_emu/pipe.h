// TPipe, TQue and TBuf: UB buffers and the queue protocol between the copy-in, compute and copy-out stages.
//
// InitBuffer takes `num` buffers of `len` bytes, each rounded up to 32 B, from the core's Unified Buffer; at most
// 64 buffers per pipe; len 0 is invalid. A TQue's depth is how many EnQue may be outstanding without a DeQue (not
// the number of buffers); a buffer cycles FREE -> AllocTensor -> EnQue -> DeQue -> FreeTensor -> FREE. On the
// NPU, AllocTensor with every buffer busy hangs and DeQue on an empty queue waits forever: here both are errors.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "core.h"
#include "local_tensor.h"

namespace ascendc_emu {

enum class TPosition { GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, LCM = VECCALC };
using QuePosition = TPosition;

inline const char *position_name(TPosition pos) {
  switch (pos) {
    case TPosition::VECIN: return "VECIN";
    case TPosition::VECOUT: return "VECOUT";
    case TPosition::VECCALC: return "VECCALC";
    case TPosition::GM: return "GM";
    default: return "other position";
  }
}

// What TPipe needs from a queue or a TBuf to hand it buffers.
class BufferOwner {
 public:
  virtual ~BufferOwner() = default;
  bool initialised() const { return count_ > 0; }

 protected:
  friend class TPipe;
  std::unique_ptr<BufferSlot[]> slots_;  // never reallocated: tensors point into it
  int count_ = 0;
  std::string name_;
  CoreContext *core_ = nullptr;
};

template <TPosition Pos, int32_t Depth>
class TQue : public BufferOwner {
  static_assert(Depth >= 1, "a queue's depth is at least 1");

 public:
  TQue() = default;
  TQue(const TQue &) = delete;
  TQue &operator=(const TQue &) = delete;

  // Kernel end: every tensor freed and every queue empty (INVARIANTS.md, invariant 3).
  ~TQue() override {
    if (core_ == nullptr) return;
    if (!fifo_.empty()) {
      core_->defer("kernel end", name_ + " still holds " + std::to_string(fifo_.size()) +
                                     " enqueued tensor(s) (EnQue without DeQue)");
      return;
    }
    for (int i = 0; i < count_; ++i) {
      if (slots_[i].state != BufferState::kFree) {
        core_->defer("kernel end", "a tensor of " + name_ + " was never freed (AllocTensor/DeQue without FreeTensor)");
        return;
      }
    }
  }

  template <typename T>
  LocalTensor<T> AllocTensor() {
    CoreContext &core = checked_core("AllocTensor");
    for (int i = 0; i < count_; ++i) {
      BufferSlot &slot = slots_[i];
      if (slot.state == BufferState::kFree) {
        slot.state = BufferState::kHeld;
        core.mark_fresh(slot.addr, slot.bytes);  // a reused buffer must not pass for written data
        return LocalTensor<T>(&slot, slot.generation);
      }
    }
    core.fail("AllocTensor", "all " + std::to_string(count_) + " buffers of " + name_ +
                                 " are in use (on the NPU this waits forever); FreeTensor one first");
  }

  template <typename T>
  bool EnQue(const LocalTensor<T> &tensor) {
    CoreContext &core = checked_core("EnQue");
    BufferSlot *slot = own_live_tensor(core, "EnQue", tensor);
    if (slot->state == BufferState::kQueued) core.fail("EnQue", "the tensor is already in " + name_);
    if (static_cast<int32_t>(fifo_.size()) >= Depth)
      core.fail("EnQue", name_ + " already holds " + std::to_string(fifo_.size()) +
                             " tensor(s), its depth; DeQue before enqueueing more");
    slot->state = BufferState::kQueued;
    fifo_.push_back(slot);
    return true;
  }

  template <typename T>
  LocalTensor<T> DeQue() {
    CoreContext &core = checked_core("DeQue");
    if (fifo_.empty()) core.fail("DeQue", name_ + " is empty (on the NPU this waits forever); EnQue first");
    BufferSlot *slot = fifo_.front();
    fifo_.pop_front();
    slot->state = BufferState::kHeld;
    return LocalTensor<T>(slot, slot->generation);
  }

  template <typename T>
  void FreeTensor(const LocalTensor<T> &tensor) {
    CoreContext &core = checked_core("FreeTensor");
    BufferSlot *slot = own_live_tensor(core, "FreeTensor", tensor);
    if (slot->state == BufferState::kQueued)
      core.fail("FreeTensor", "the tensor is still enqueued in " + name_ + "; DeQue it first");
    slot->state = BufferState::kFree;
    ++slot->generation;
  }

  int32_t GetTensorCountInQue() const { return static_cast<int32_t>(fifo_.size()); }

 private:
  CoreContext &checked_core(const char *call) {
    CoreContext &core = current_core(call);
    if (!initialised()) core.fail(call, std::string("queue (") + position_name(Pos) + ") used before TPipe::InitBuffer");
    return core;
  }

  template <typename T>
  BufferSlot *own_live_tensor(CoreContext &core, const char *call, const LocalTensor<T> &tensor) {
    BufferSlot *slot = tensor.slot();
    if (slot == nullptr) core.fail(call, "the tensor was never allocated");
    if (slot->owner != this) core.fail(call, "the tensor belongs to " + slot->owner_name + ", not to " + name_);
    if (slot->generation != tensor.generation() || slot->state == BufferState::kFree)
      core.fail(call, "the tensor of " + name_ + " is used after FreeTensor");
    return slot;
  }

  std::deque<BufferSlot *> fifo_;
};

// A single scratch buffer outside the queue protocol (TPosition::VECCALC); Get() hands out views of it.
template <TPosition Pos = TPosition::VECCALC>
class TBuf : public BufferOwner {
 public:
  template <typename T>
  LocalTensor<T> Get() {
    CoreContext &core = current_core("TBuf::Get");
    if (!initialised()) core.fail("TBuf::Get", "TBuf used before TPipe::InitBuffer");
    return LocalTensor<T>(&slots_[0], slots_[0].generation);
  }
  template <typename T>
  LocalTensor<T> Get(uint32_t len) {
    LocalTensor<T> t = Get<T>();
    if (static_cast<uint64_t>(len) * sizeof(T) > slots_[0].bytes)
      current_core("TBuf::Get").fail("TBuf::Get", "asked for " + std::to_string(len) + " elements, the buffer holds " +
                                                      std::to_string(slots_[0].bytes / sizeof(T)));
    return t;
  }
};

class TPipe {
 public:
  TPipe() = default;
  TPipe(const TPipe &) = delete;
  TPipe &operator=(const TPipe &) = delete;

  template <TPosition Pos, int32_t Depth>
  bool InitBuffer(TQue<Pos, Depth> &que, uint8_t num, uint32_t len) {
    return carve(que, num, len, "queue " + std::to_string(queues_++) + " (" + position_name(Pos) + ")", true);
  }

  template <TPosition Pos>
  bool InitBuffer(TBuf<Pos> &buf, uint32_t len) {
    return carve(buf, 1, len, "TBuf " + std::to_string(tbufs_++) + " (" + position_name(Pos) + ")", false);
  }

  void Destroy() {}

 private:
  bool carve(BufferOwner &owner, int num, uint32_t len, const std::string &name, bool queue) {
    CoreContext &core = current_core("InitBuffer");
    if (owner.initialised()) core.fail("InitBuffer", name + ": InitBuffer called twice for the same queue/TBuf");
    if (len == 0) core.fail("InitBuffer", name + ": buffer length 0");
    if (num <= 0) core.fail("InitBuffer", name + ": buffer count 0");
    if (buffers_ + num > kMaxBuffersPerPipe)
      core.fail("InitBuffer", name + ": " + std::to_string(buffers_ + num) +
                                  " buffers in this pipe, more than the limit of " + std::to_string(kMaxBuffersPerPipe));
    const size_t each = round_up_to_block(len);
    if (core.ub_used() + each * num > core.ub_bytes())
      core.fail("InitBuffer", name + ": " + std::to_string(num) + " x " + std::to_string(each) + " B on top of " +
                                  std::to_string(core.ub_used()) + " B already used exceeds the " +
                                  std::to_string(core.ub_bytes()) + " B Unified Buffer");
    owner.slots_.reset(new BufferSlot[num]);
    owner.count_ = num;
    owner.name_ = name;
    owner.core_ = queue ? &core : nullptr;  // only queues check for leaks at kernel end
    for (int i = 0; i < num; ++i) {
      BufferSlot &slot = owner.slots_[i];
      slot.addr = core.carve(each);
      slot.bytes = static_cast<uint32_t>(each);
      slot.owner = &owner;
      slot.owner_name = name;
      slot.state = queue ? BufferState::kFree : BufferState::kHeld;  // a TBuf is always usable
    }
    buffers_ += num;
    return true;
  }

  int buffers_ = 0;
  int queues_ = 0;
  int tbufs_ = 0;
};

}  // namespace ascendc_emu
