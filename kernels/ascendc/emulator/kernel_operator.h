// CPU emulation of the Ascend C kernel API subset this project's kernels use, under the header name CANN gives it,
// so one kernel source compiles with CANN's compiler for the NPU and with g++ here.
//
// Every invariant of the real hardware that would otherwise fail silently or hang (INVARIANTS.md, beside this header) is checked
// and reported as ascendc_emu::AscendcEmulatorError "kernel <name>, core <i>, <Call>: <what>". Kernels run through
// ascendc_emu::launch (ascendc_emu/launch.h), never through <<<>>>.
//
// Differences from the real header that kernel authors can see:
//   - GlobalTensor::SetGlobalBuffer needs the window size (the emulator checks accesses against it).
//   - Vector operations exist in the count form only (no repeat/mask parameters).
#pragma once

#include <cstdint>

#include "ascendc_emu/core.h"
#include "ascendc_emu/data_copy.h"
#include "ascendc_emu/error.h"
#include "ascendc_emu/global_tensor.h"
#include "ascendc_emu/half.h"
#include "ascendc_emu/launch.h"
#include "ascendc_emu/local_tensor.h"
#include "ascendc_emu/pipe.h"
#include "ascendc_emu/vector_ops.h"

// Address-space and function qualifiers of the NPU compiler mean nothing on the CPU.
#define __aicore__
#define __global__
#define __gm__

using GM_ADDR = uint8_t *;
using half = ascendc_emu::Half;

namespace AscendC {

using ascendc_emu::GlobalTensor;
using ascendc_emu::LocalTensor;
using ascendc_emu::QuePosition;
using ascendc_emu::TBuf;
using ascendc_emu::TPipe;
using ascendc_emu::TPosition;
using ascendc_emu::TQue;

using ascendc_emu::DataCopy;

using ascendc_emu::Abs;
using ascendc_emu::Add;
using ascendc_emu::Adds;
using ascendc_emu::Div;
using ascendc_emu::Duplicate;
using ascendc_emu::Exp;
using ascendc_emu::Ln;
using ascendc_emu::Max;
using ascendc_emu::Maxs;
using ascendc_emu::Min;
using ascendc_emu::Mins;
using ascendc_emu::Mul;
using ascendc_emu::Muls;
using ascendc_emu::PipeBarrier;
using ascendc_emu::ReduceMax;
using ascendc_emu::ReduceSum;
using ascendc_emu::Relu;
using ascendc_emu::Sqrt;
using ascendc_emu::Sub;

using ascendc_emu::pipe_t;
using ascendc_emu::PIPE_ALL;
using ascendc_emu::PIPE_MTE2;
using ascendc_emu::PIPE_MTE3;
using ascendc_emu::PIPE_S;
using ascendc_emu::PIPE_V;

inline int64_t GetBlockNum() { return ascendc_emu::current_core("GetBlockNum").block_dim(); }
inline int64_t GetBlockIdx() { return ascendc_emu::current_core("GetBlockIdx").core(); }

}  // namespace AscendC
