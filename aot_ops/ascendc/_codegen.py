"""The C++ that one `ascendc.load` declaration becomes: for each kernel, its emulator launch behind the compiled
tiling and the ATen fallback, a MindSpore aot entry point and a C entry point for torch; and, for real NPUs, a CANN
project (CMake's ascendc_library plus host launches through ACLRT_LAUNCH_KERNEL) with the same tiling.

Generated text only: compiling is the builder's job (aot_ops.load), loading is library.py's.
"""
from __future__ import annotations

from ._declare import Kernel, attr_kind, fallback_argument_names
from ._tiling import CompiledTiling, compile_tiling, cpp_string

# C types a kernel's scalar parameters may have, by the names a declaration uses.
SCALAR_TYPES = {"int32": "int32_t", "uint32": "uint32_t", "int64": "int64_t", "uint64": "uint64_t",
                "float32": "float", "float64": "double"}

HEADER = "// Generated from the Ascend C kernel declarations of library {name} (aot_ops.ascendc): do not edit.\n"


def entry_symbol(kernel: str) -> str:
    """The MindSpore entry point of a kernel: mul_custom -> MulCustom."""
    return "".join(part[:1].upper() + part[1:] for part in kernel.split("_"))


def torch_symbol(kernel: str) -> str:
    return f"ascendc_torch_{kernel}"


def tilings(kernels: dict[str, Kernel]) -> dict[str, CompiledTiling]:
    """Every kernel's tiling function, traced once (library_source and npu_files share the result)."""
    return {name: compile_tiling(k.tiling, len(k.inputs), dict(k.scalars), name, dict(k.attrs))
            for name, k in kernels.items()}


def _scalar_arguments(kernel: Kernel) -> str:
    """The kernel call's scalar arguments after its GM addresses: integers from args[], floats from fargs[]."""
    return "".join(f", static_cast<{SCALAR_TYPES[t]}>({'fargs' if t.startswith('float') else 'args'}[{i + 1}])"
                   for i, t in enumerate(kernel.scalars.values()))


def _tiling_function(name: str, kernel: Kernel, tiling: CompiledTiling) -> str:
    return f"""
// The tiling function of {name}, compiled from Python: "" and args[]/fargs[] = block_dim,
// {", ".join(tiling.names[1:])}, or why the kernel cannot run on these shapes. attrs[]: the operator's attributes.
std::string tile_{name}(const Shapes &s, int64_t block_dim, int64_t ub_bytes, const double *attrs, int64_t *args,
                        double *fargs) {{
  (void)ub_bytes, (void)attrs, (void)fargs;
  try {{
{tiling.body}
  }} catch (const DivisionByZero &) {{
    return "the tiling divides by zero for these shapes";
  }}
  return {{}};
}}
"""


def _emulator_part(name: str, kernel: Kernel, tiling: CompiledTiling) -> str:
    n_in, n_out = len(kernel.inputs), len(kernel.outputs)
    dtypes = ", ".join(f'ms_ext::scalar_type_from_ms("{d}")' for d in kernel.dtypes)
    fits = "\n".join(f'  if (unmet.empty()) unmet = fits<{SCALAR_TYPES[t]}>("{n}", args[{i + 1}]);'
                     for i, (n, t) in enumerate(kernel.scalars.items()) if not t.startswith("float"))
    gm_args = ", ".join([f"gm(inputs[{i}])" for i in range(n_in)] + [f"gm(outputs[{i}])" for i in range(n_out)])
    # The fallback's arguments named like an attribute take its value.
    schema_args = fallback_argument_names(kernel.fallback)
    missing = sorted(set(kernel.fallback_args) - schema_args)
    if missing:
        raise ValueError(f"{name}: {kernel.fallback} has no argument {', '.join(missing)} (fallback_args)")
    bound = ", ".join([f'{{"{a}", c10::IValue(static_cast<{attr_kind(d)[0]}>(attrs[{i}]))}}'
                       for i, (a, d) in enumerate(kernel.attrs.items()) if a in schema_args] +
                      [f'{{"{a}", c10::IValue({_ivalue_literal(v)})}}' for a, v in kernel.fallback_args.items()])
    return f"""{_tiling_function(name, kernel, tiling)}
// {name} on the emulator where the dtypes and the tiling allow it, {kernel.fallback} otherwise.
void run_{name}(const std::vector<at::Tensor> &inputs, const std::vector<at::Tensor> &outputs, int64_t block_dim,
              const double *attrs) {{
  static const std::vector<at::ScalarType> kernel_dtypes{{{dtypes}}};
  std::string unmet;
  Shapes shapes;
  for (const at::Tensor &t : inputs) shapes.emplace_back(t.sizes().begin(), t.sizes().end());
  for (const std::vector<at::Tensor> *group : {{&inputs, &outputs}})
    for (const at::Tensor &t : *group) {{
      if (!unmet.empty()) break;
      if (std::find(kernel_dtypes.begin(), kernel_dtypes.end(), t.scalar_type()) == kernel_dtypes.end()) unmet = std::string("dtype ") + c10::toString(t.scalar_type()) + " is not one the kernel runs";
      else if (!t.is_contiguous()) unmet = "a tensor is not contiguous";
    }}
  const ascendc_emu::LaunchOptions options = runtime().launch_options();
  int64_t args[{len(tiling.names)}] = {{}};
  double fargs[{len(tiling.names)}] = {{}};
  if (unmet.empty()) unmet = tile_{name}(shapes, block_dim, static_cast<int64_t>(options.ub_bytes), attrs, args, fargs);
{fits}
  if (!unmet.empty()) {{
    runtime().note_path("{name}", "aten", unmet);
    run_fallback("{kernel.fallback}", unmet, inputs, outputs, {{{bound}}});
    return;
  }}
  runtime().note_path("{name}", "kernel");
  ascendc_emu::launch("{name}", args[0], options, ::{name}, {gm_args}{_scalar_arguments(kernel)});
}}
"""


def _aot_entry(name: str, kernel: Kernel) -> str:
    n_in, n_out = len(kernel.inputs), len(kernel.outputs)
    symbol = entry_symbol(name)
    rules = ""
    if kernel.output_like is not None:
        like = [kernel.inputs.index(kernel.output_like[o]) for o in kernel.outputs]
        shapes = ", ".join(f"a.shape({i})" for i in like)
        types = ", ".join(f"a.dtype({i})" for i in like)
        rules = (f"\n        .shapes([](const ms_ext::ShapeArgs &a) {{ return std::vector<ms_ext::Shape>{{{shapes}}}; }})"
                 f"\n        .types([](const ms_ext::TypeArgs &a) {{ return std::vector<at::ScalarType>{{{types}}}; }})")
    inputs = ", ".join(f"call.input({i})" for i in range(n_in))
    outputs = ", ".join(f"call.output({i})" for i in range(n_out))
    attrs = "".join(f'.attr<{attr_kind(d)[0]}>("{a}")' for a, d in kernel.attrs.items())
    reads = "".join(f'\n    attrs[{i}] = static_cast<double>(a.get<{attr_kind(d)[0]}>("{n}", {_cpp_literal(d)}));'
                    for i, (n, d) in enumerate(kernel.attrs.items()))
    return f"""
// The attributes of {symbol}, read once per kernel: block_dim, and attrs[] in declaration order.
struct {symbol}State {{
  int64_t block_dim;
  double attrs[{max(len(kernel.attrs), 1)}] = {{}};
  explicit {symbol}State(const ms_ext::Attrs &a) : block_dim(a.get<int64_t>("block_dim", 8)) {{{reads}
  }}
}};

// {", ".join(kernel.outputs)} = {symbol}({", ".join(kernel.inputs)}), attributes block_dim (int){"".join(", " + a for a in kernel.attrs)}
MS_EXT_KERNEL_WITH_STATE({symbol}, {symbol}State,
    ms_ext::Signature().inputs({n_in}).outputs({n_out}).attr<int64_t>("block_dim"){attrs}{rules}) {{
  run_{name}({{{inputs}}}, {{{outputs}}}, state.block_dim, state.attrs);
}}

// For torch: buffers (inputs, then outputs), their shapes and MindSpore dtype names, block_dim and the attributes
// in declaration order. 0, or -1 and ms_ext_last_error.
extern "C" MS_EXT_EXPORT int {torch_symbol(name)}(void **buffers, const int64_t *const *shapes, const int *ndims,
                                              const char *const *dtypes, int64_t block_dim, const double *attrs) {{
  return ms_ext::detail::guarded_status("{name}", [&] {{
    std::vector<at::Tensor> inputs, outputs;
    for (int i = 0; i < {n_in + n_out}; ++i)
      (i < {n_in} ? inputs : outputs).push_back(view(buffers[i], shapes[i], ndims[i], dtypes[i]));
    run_{name}(inputs, outputs, block_dim, attrs);
  }});
}}
"""


def _ivalue_literal(value) -> str:
    if isinstance(value, (list, tuple)):
        return "std::vector<int64_t>{" + ", ".join(str(int(v)) for v in value) + "}"
    return _cpp_literal(value)


def _cpp_literal(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(float(value)) if isinstance(value, float) else f"int64_t{{{value}}}"


def _kernel_declaration(name: str, kernel: Kernel) -> str:
    """The user's kernel as the emulator build sees it: a plain C function (kernel_operator.h empties the
    __global__ __aicore__ qualifiers)."""
    params = ", ".join(["GM_ADDR"] * (len(kernel.inputs) + len(kernel.outputs)) +
                       [SCALAR_TYPES[t] for t in kernel.scalars.values()])
    return f'extern "C" void {name}({params});\n'


def library_source(name: str, kernels: dict[str, Kernel], compiled: dict[str, CompiledTiling],
                   runtime_library: str | None) -> str:
    """The C++ of the emulator build: every kernel's launch, MindSpore entry and torch entry. The emulator settings
    and path counts are the bundled Ascend C library's, opened at `runtime_library`, or linked in when None (the
    bundled library itself, setup.py)."""
    if runtime_library is None:
        runtime_headers = '#include "emulator_settings.h"\n#include "paths.h"\n'
        runtime_instance = "BundledRuntime instance(ascendc_emulator_order, ascendc_emulator_ub_bytes, ascendc_note_path)"
    else:
        runtime_headers = ""
        runtime_instance = f"BundledRuntime instance({cpp_string(runtime_library)})"
    parts = [HEADER.format(name=name), f"""#include <ATen/ops/from_blob.h>
#include <ms_ext/ms_ext.h>
#include <ms_ext/dtypes.h>

#include <string>
#include <vector>

#include "user_kernel_support.h"
{runtime_headers}
{"".join(_kernel_declaration(k, v) for k, v in kernels.items())}
namespace {{

using namespace ascendc_user;

const BundledRuntime &runtime() {{
  static const {runtime_instance};
  return instance;
}}

at::Tensor view(void *data, const int64_t *shape, int ndim, const char *dtype) {{
  return at::from_blob(data, std::vector<int64_t>(shape, shape + ndim),
                       at::TensorOptions().dtype(ms_ext::scalar_type_from_ms(dtype)));
}}

"""]
    for kernel_name, kernel in kernels.items():
        parts.append(_emulator_part(kernel_name, kernel, compiled[kernel_name]))
    parts.append("\n}  // namespace\n")
    for kernel_name, kernel in kernels.items():
        parts.append(_aot_entry(kernel_name, kernel))
    return "".join(parts)


# ---- the real-NPU project --------------------------------------------------------------------------------------

def npu_files(name: str, kernels: dict[str, Kernel], compiled: dict[str, CompiledTiling],
              sources: list[str]) -> dict[str, str]:
    """CMakeLists.txt and host_launch.cpp of the CANN build: ascendc_library compiles the same kernel sources for
    the AI core, and each host launch runs the same compiled tiling, then ACLRT_LAUNCH_KERNEL."""
    from .._native.paths import source_dir

    support = (source_dir("kernels") / "ascendc" / "aot" / "tiling_support.h").read_text()
    return {"CMakeLists.txt": _npu_cmake(name, sources), "host_launch.cpp": _npu_host(name, kernels, compiled),
            "tiling_support.h": support}


def _npu_cmake(name: str, sources: list[str]) -> str:
    """The CMake project: the kernels through CANN's ascendc_library, the host launches linked against them."""
    cmake = f"""# Generated from the Ascend C kernel declarations of library {name}: the CANN build of its kernels
# for a real NPU.
#   python -m aot_ops.ascendc.npu [--project <this folder>]      (refuses to start without CANN)
cmake_minimum_required(VERSION 3.16)
project({name}_npu LANGUAGES CXX)
set(SOC_VERSION "Ascend910B1" CACHE STRING "the NPU the kernels are compiled for (npu-smi info shows it)")
set(RUN_MODE "npu" CACHE STRING "CANN's ascendc_library run mode")
if(NOT ASCEND_HOME_PATH AND DEFINED ENV{{ASCEND_HOME_PATH}})
  set(ASCEND_HOME_PATH "$ENV{{ASCEND_HOME_PATH}}")
endif()
if(NOT ASCEND_HOME_PATH)
  message(FATAL_ERROR "CANN not found: ASCEND_HOME_PATH is not set. The NPU build of Ascend C kernels needs the CANN "
                      "toolkit (source <cann>/set_env.sh, or pass -DASCEND_HOME_PATH=...). Without an NPU, the CPU "
                      "emulator build is the one to use.")
endif()
# CANN has moved ascendc.cmake between releases.
set(ASCENDC_CMAKE_CANDIDATES "${{ASCEND_HOME_PATH}}/compiler/tikcpp/ascendc_kernel_cmake"
                             "${{ASCEND_HOME_PATH}}/tools/tikcpp/ascendc_kernel_cmake")
set(ASCENDC_CMAKE_DIR "")
foreach(dir IN LISTS ASCENDC_CMAKE_CANDIDATES)
  if(NOT ASCENDC_CMAKE_DIR AND EXISTS "${{dir}}/ascendc.cmake")
    set(ASCENDC_CMAKE_DIR "${{dir}}")
  endif()
endforeach()
if(NOT ASCENDC_CMAKE_DIR)
  message(FATAL_ERROR "CANN not found: no ascendc.cmake under ASCEND_HOME_PATH=${{ASCEND_HOME_PATH}} "
                      "(looked in ${{ASCENDC_CMAKE_CANDIDATES}}). Check that it points at a CANN toolkit.")
endif()
include("${{ASCENDC_CMAKE_DIR}}/ascendc.cmake")
# Generates aclrtlaunch_<kernel>.h, whose ACLRT_LAUNCH_KERNEL the host launches call.
ascendc_library({name}_kernels STATIC
  {chr(10).join("  " + s for s in sources).strip()})
add_library({name}_npu SHARED host_launch.cpp)
target_include_directories({name}_npu PRIVATE ${{ASCEND_HOME_PATH}}/include)
target_link_directories({name}_npu PRIVATE ${{ASCEND_HOME_PATH}}/lib64)
target_link_libraries({name}_npu PRIVATE {name}_kernels ascendcl)
"""
    return cmake


def _npu_host(name: str, kernels: dict[str, Kernel], compiled: dict[str, CompiledTiling]) -> str:
    """host_launch.cpp: per kernel, its compiled tiling and `<kernel>_launch`, which tiles and launches it."""
    launches = []
    for kernel_name, kernel in kernels.items():
        n = len(kernel.inputs) + len(kernel.outputs)
        buffers = ", ".join(f"buffers[{i}]" for i in range(n))
        launches.append(f"""{_tiling_function(kernel_name, kernel, compiled[kernel_name])}
// 0 after launching {kernel_name} on `stream`; 1 when the tiling refuses these shapes (the caller runs its fallback,
// {kernel.fallback}); buffers are device addresses, inputs then outputs.
extern "C" int {kernel_name}_launch(void *stream, void **buffers, const int64_t *const *shapes, const int *ndims,
                                   int64_t block_dim, int64_t ub_bytes, const double *attrs) {{
  Shapes s;
  for (int i = 0; i < {len(kernel.inputs)}; ++i) s.emplace_back(shapes[i], shapes[i] + ndims[i]);
  int64_t args[{len(compiled[kernel_name].names)}] = {{}};
  double fargs[{len(compiled[kernel_name].names)}] = {{}};
  if (!tile_{kernel_name}(s, block_dim, ub_bytes, attrs, args, fargs).empty()) return 1;
  ACLRT_LAUNCH_KERNEL({kernel_name})(static_cast<uint32_t>(args[0]), stream, {buffers}{_scalar_arguments(kernel)});
  return 0;
}}
""")
    host = HEADER.format(name=name) + f"""#include <cstdint>
#include <string>
#include <vector>

#include "acl/acl.h"
{chr(10).join(f'#include "aclrtlaunch_{k}.h"' for k in kernels)}

#include "tiling_support.h"

using namespace ascendc_tiling_support;
""" + "".join(launches)
    return host

