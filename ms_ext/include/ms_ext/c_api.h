/*
 * ms_ext C runtime: the part of ms_ext that is plain C.
 *
 * Every library built with ms_ext links these functions (ms_ext/src/*.cpp). They exist as a C interface for
 * two reasons:
 *   - Python reads the last error through ctypes, because MindSpore drops the text of some failures
 *     (an Init hook that throws gives an empty RuntimeError; a GPU launch that throws is only logged).
 *   - MindSpore's AotExtra is a C++ class built with the old libstdc++ ABI (_GLIBCXX_USE_CXX11_ABI=0) while
 *     torch is built with the new one. Only one translation unit (aot_extra_abi0.cpp) touches AotExtra; the rest
 *     of a library reaches it through the functions below, which pass no std::string across.
 *
 * Kernels that do not use torch can use this header alone.
 */
#ifndef MS_EXT_C_API_H_
#define MS_EXT_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MS_EXT_EXPORT __attribute__((visibility("default")))

/* ---- last error ------------------------------------------------------------------------------------------ */

/* Text of the last failure recorded on the calling thread ("" when none). Valid until the next failure. */
MS_EXT_EXPORT const char *ms_ext_last_error(void);
/* Text of the most recent failure on any thread of the process ("" when none). */
MS_EXT_EXPORT const char *ms_ext_last_error_any_thread(void);
/* Forget the calling thread's last error. */
MS_EXT_EXPORT void ms_ext_clear_last_error(void);
/* Record a failure for the calling thread (and as the process-wide latest). */
MS_EXT_EXPORT void ms_ext_set_last_error(const char *message);

/* ---- MindSpore's AotExtra, reached without std::string ------------------------------------------------------ */

/* Opaque handle: the `extra` pointer MindSpore passes to Init and launch (a mindspore::AotExtra*). */
typedef struct ms_ext_extra ms_ext_extra;

/* The eight attribute kinds MindSpore can deliver. */
typedef enum {
  MS_EXT_ATTR_BOOL = 0,
  MS_EXT_ATTR_INT = 1,         /* int64 */
  MS_EXT_ATTR_FLOAT = 2,       /* a float: MindSpore's float32, or the exact double written as text (below) */
  MS_EXT_ATTR_STR = 3,
  MS_EXT_ATTR_INT_LIST = 4,    /* list of int64 */
  MS_EXT_ATTR_FLOAT_LIST = 5,  /* list of float (float32, or comma-separated text) */
  MS_EXT_ATTR_INT_2D = 6,      /* list of lists of int64 */
  MS_EXT_ATTR_FLOAT_2D = 7     /* list of lists of float32 */
} ms_ext_attr_kind;

/* Name of a kind as users write it ("int", "float list", ...). */
MS_EXT_EXPORT const char *ms_ext_attr_kind_name(ms_ext_attr_kind kind);

/*
 * A decoded attribute value, owned by the caller: release it with ms_ext_attr_value_free.
 * Scalars use the matching scalar field. Lists are flattened into `ints`/`floats` with `count` elements;
 * 2-D lists also fill `row_lengths` (`rows` entries). Strings use `str` (NUL-terminated, `count` bytes).
 *
 * Floats: MindSpore keeps a Python float attribute as float32 (eps=1e-5 arrives as 9.99999974738e-06). aot_ops
 * therefore sends floats as their Python repr in a str attribute ("1e-05", lists as "0.5,1e-05"), and reading a
 * float or float-list kind accepts such a text and parses the exact double. A float32 attribute set by hand
 * (op.add_prim_attr("eps", 1e-5)) is still read, as the float32 MindSpore kept.
 */
typedef struct {
  ms_ext_attr_kind kind;
  int64_t int_value;
  double float_value;
  int bool_value;
  char *str;
  int64_t *ints;
  double *floats;
  size_t count;
  size_t *row_lengths;
  size_t rows;
} ms_ext_attr_value;

/*
 * 0 if `extra` can be used: NULL (no attributes), an ms_ext call extra (below), or what looks like MindSpore's
 * AotExtra (a vtable of a complete object whose functions lie in loaded code); -1 otherwise, with the cause in
 * ms_ext_last_error. Every ms_ext_extra_* function checks its `extra` with it first. It reads only memory it has
 * found mapped; the mapping checks are system calls, made once per page and per vtable and then remembered, so a
 * launch with MindSpore's extra costs a few loads. It cannot tell a mapped page with no access (PROT_NONE) from a
 * readable one, nor a freed AotExtra from a live one.
 */
MS_EXT_EXPORT int ms_ext_extra_check(ms_ext_extra *extra);

/* 1 if the primitive carries attribute `name`, 0 if not, -1 on failure (text in ms_ext_last_error). */
MS_EXT_EXPORT int ms_ext_extra_has_attr(ms_ext_extra *extra, const char *name);
/* Reads attribute `name` as `kind` into *out. 0 on success, -1 on failure (text in ms_ext_last_error). */
MS_EXT_EXPORT int ms_ext_extra_get_attr(ms_ext_extra *extra, const char *name, ms_ext_attr_kind kind,
                                        ms_ext_attr_value *out);
MS_EXT_EXPORT void ms_ext_attr_value_free(ms_ext_attr_value *value);

/*
 * Packed attribute tables: many attributes carried as one string attribute (MindSpore converts each attribute
 * of a primitive on every PyNative call; one string costs one conversion). aot_ops writes the text
 * (aot_ops/_core/packed_attrs.py; the format is described in ms_ext/src/attr_table.cpp); ms_ext::Attrs::unpack reads
 * it. Reads decode into the same ms_ext_attr_value as MindSpore's attributes.
 */
typedef struct ms_ext_attr_table ms_ext_attr_table;
/* The table in `packed` (`size` bytes), or NULL for malformed text (the byte and cause in ms_ext_last_error). */
MS_EXT_EXPORT ms_ext_attr_table *ms_ext_attr_table_parse(const char *packed, size_t size);
MS_EXT_EXPORT void ms_ext_attr_table_free(ms_ext_attr_table *table);
/* 1 if the table holds `name`, else 0. */
MS_EXT_EXPORT int ms_ext_attr_table_has(const ms_ext_attr_table *table, const char *name);
/* Reads `name` as `kind` into *out (ints also read as floats). 0 on success, -1 on failure (ms_ext_last_error). */
MS_EXT_EXPORT int ms_ext_attr_table_get(const ms_ext_attr_table *table, const char *name, ms_ext_attr_kind kind,
                                        ms_ext_attr_value *out);

/*
 * An `extra` for calls that do not come from MindSpore (aot_ops.harness with attributes; a front that launches
 * entry points itself): attributes from a packed table, and the kernel state and scratch sizes an Init hook sets,
 * kept as MindSpore keeps them. Every ms_ext_extra_* function accepts it in place of MindSpore's AotExtra: it is
 * told apart by its first word, MS_EXT_CALL_EXTRA_MAGIC, where an AotExtra holds its vtable pointer (a user-space
 * address, which the magic, with its top bits set, can never be).
 */
#define MS_EXT_CALL_EXTRA_MAGIC 0xA07E5A7E00000001ULL
typedef struct ms_ext_call_extra ms_ext_call_extra;
/* A new call extra holding the packed attributes, or NULL for malformed text (cause in ms_ext_last_error). */
MS_EXT_EXPORT ms_ext_call_extra *ms_ext_call_extra_new(const char *packed, size_t size);
/* Frees it and the kernel state an Init hook left in it. */
MS_EXT_EXPORT void ms_ext_call_extra_free(ms_ext_call_extra *extra);
/* The scratch sizes an Init hook asked for: their count; the first `capacity` are written to `bytes`. */
MS_EXT_EXPORT size_t ms_ext_call_extra_workspace(const ms_ext_call_extra *extra, size_t *bytes, size_t capacity);

/* Asks MindSpore for `count` scratch buffers of the given byte sizes (only meaningful inside an Init hook). */
MS_EXT_EXPORT int ms_ext_extra_set_workspace(ms_ext_extra *extra, const size_t *bytes, size_t count);

/*
 * Per-kernel state. MindSpore keeps one pointer per kernel instance and deletes it (through a virtual
 * destructor) when the kernel is destroyed. `state` must be an object whose class derives from
 * ms_ext_kernel_data_base (see ms_ext/state.h), created with `new`.
 */
MS_EXT_EXPORT int ms_ext_extra_set_kernel_data(ms_ext_extra *extra, void *state);
MS_EXT_EXPORT void *ms_ext_extra_kernel_data(ms_ext_extra *extra);

/* Live per-kernel state objects in this library (created by Init hooks, deleted by MindSpore with the kernel). */
MS_EXT_EXPORT int64_t ms_ext_live_kernel_states(void);
MS_EXT_EXPORT void ms_ext_kernel_state_created(void);
MS_EXT_EXPORT void ms_ext_kernel_state_destroyed(void);

/* ---- calling entry points from C ---------------------------------------------------------------------------- */

/*
 * An entry point throws a C++ exception when it fails (MindSpore catches it and shows its text), which a C caller
 * cannot catch. These call one the way MindSpore does and turn what it throws into -1 and ms_ext_last_error.
 */
/* Calls the launch function `function` (int F(nparam, params, ndims, shapes, dtypes, stream, extra)): its
 * status, or -1. */
MS_EXT_EXPORT int ms_ext_guarded_call(void *function, int nparam, void **params, int *ndims, int64_t **shapes,
                                      const char **dtypes, void *stream, void *extra);
/*
 * Calls the C++ shape inference `function` (<Func>InferShape; `several`: it returns one shape per output, as for a
 * kernel with several outputs, else one shape) and writes the shapes into `out` as
 * [count, rank_0, dims_0..., rank_1, dims_1...], at most `capacity` values. Returns how many values the shapes
 * take (more than `capacity`: call again with a larger `out`), or -1.
 */
MS_EXT_EXPORT int64_t ms_ext_guarded_infer_shape(void *function, int several, int *ndims, int64_t **shapes,
                                                 void *extra, int64_t *out, int64_t capacity);

/* ---- memory ----------------------------------------------------------------------------------------------- */

/* 1 if [address, address + bytes) is mapped in this process (readable in practice), 0 if not; never faults. */
MS_EXT_EXPORT int ms_ext_mapped(const void *address, size_t bytes);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MS_EXT_C_API_H_ */
