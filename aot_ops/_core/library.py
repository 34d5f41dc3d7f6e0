"""Build your own aot kernels at run time and make MindSpore operators from them.

    lib = aot_ops.load("my_ops", ["my_ops.cpp"])          # compiled once, then loaded from the cache
    leaky = lib.op("MyLeakyRelu", attrs={"negative_slope": 0.2})      # a kernel with ms_ext shape/dtype rules
    add = lib.op("PlainAdd", out_shape=lambda a, b: a, out_dtype=lambda a, b: a)   # any other kernel

Libraries are cached by the contents of their sources and local headers, the flags, the compilers and the
versions of torch, MindSpore and nvcc (see aot_ops/_build/cache.py); any number of processes can load the same
library at once and only one of them builds it. This module imports neither MindSpore nor, for plain C/C++
kernels, torch: `lib.op(...)` is the first point that needs MindSpore.
"""
from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

from .._build import builder, cache, cuda, npu, private, toolchain
from .._build.lock import BuildLock
from .._build.progress import progress
from .._native.opener import check_white_list

log = logging.getLogger("aot_ops.build")

PathLike = str | os.PathLike


class Library:
    """A library built by `load`/`load_inline`.

    `path` is the `.so` MindSpore loads. A library with CUDA sources built on a machine without a CUDA runtime is
    compiled but not linked: `loadable` is False, `path` is None and `reason` says why; `op` then raises.
    """

    def __init__(self, name: str, path: Path | None, key: str, rebuilt: bool, reason: str | None = None):
        self.name = name
        self.path = path
        self.key = key
        self.rebuilt = rebuilt  # whether this call compiled anything (False: loaded from the cache)
        self.reason = reason

    @property
    def loadable(self) -> bool:
        return self.path is not None

    def __repr__(self) -> str:
        where = self.path if self.loadable else f"not loadable: {self.reason}"
        return f"<aot_ops.Library {self.name!r} {where}>"

    def op(self, symbol: str, out_shape: Callable | None = None, out_dtype: Callable | None = None, *,
           bprop: Callable | None = None, attrs: Mapping[str, object] | None = None, identity: str | None = None):
        """A MindSpore operator calling the entry point `symbol` of this library.

        - `out_shape`/`out_dtype` omitted: the kernel has ms_ext shape/dtype rules (MS_EXT_KERNEL with
          `.shapes(...)`/`.types(...)`); the operator is an `aot_ops.AotOp` and also runs with dynamic shapes.
        - given: callables over MindSpore shapes and dtypes, exactly as for `ops.Custom` (e.g.
          `out_shape=lambda x: x, out_dtype=lambda x: x`); any entry point with MindSpore's seven arguments works.
        Either way the result is an `aot_ops.AotOp`: calls are checked against the kernel's signature, serialised
        across threads and, in PyNative, take the fast front. `attrs` become primitive attributes (read them with
        ms_ext::Attrs or ms_ext_extra_get_attr; floats arrive as exact doubles, see ms_ext/c_api.h); `bprop` is
        MindSpore's `bprop(*inputs, out, dout) -> tuple of input gradients`.
        """
        if not self.loadable:
            raise RuntimeError(f"library {self.name!r} was compiled but cannot be loaded here: {self.reason}")
        self._check_symbol(symbol)
        if (out_shape is None) != (out_dtype is None):
            raise TypeError(f"{symbol}: give both out_shape and out_dtype, or neither (for a kernel with ms_ext "
                            "shape and dtype rules)")
        from .opdef import FRESH, OpDef
        from .inference import MindSporeRules

        # A fresh identity unless the caller gives one: two operators of one symbol may differ in their bprop (or
        # in their out_shape/out_dtype rules).
        infer = None if out_shape is None else MindSporeRules(out_shape, out_dtype)
        return OpDef(self.path, symbol, attrs, bprop=bprop, infer=infer, identity=identity or FRESH).build()

    def _check_symbol(self, symbol: str) -> None:
        # MindSpore only looks the symbol up at the first launch; a typo should fail here, where it was made.
        from .._native.opener import open_library

        if not hasattr(open_library(self.path), symbol):
            raise AttributeError(f"{self.path} has no entry point {symbol!r} (is it declared extern \"C\"?)")


def load(name: str, sources: Sequence[PathLike] | PathLike, *, extra_cflags: Sequence[str] = (),
         extra_ldflags: Sequence[str] = (), extra_include_paths: Sequence[PathLike] = (),
         with_torch: bool | None = None, device: str = "cpu", verbose: bool = False) -> Library:
    """Compile `sources` into an aot library named `name` (or load it from the cache) and return it.

    `.cpp`/`.cc` compile as C++20, `.c` as C, `.cu` with nvcc (TORCH_CUDA_ARCH_LIST chooses the GPUs). With
    `with_torch=None` the sources decide: torch is included and linked only if they include torch, ATen, c10 or
    an ms_ext header other than ms_ext/c_api.h. Compile, link and load-check failures raise `aot_ops.BuildError`
    showing the first errors with file and line; the full log stays on disk. `device="npu"` builds the entry
    points for an Ascend NPU (ms_ext's NPU placement: MindSpore's buffers as torch_npu tensors, its aclrtStream as
    the current stream), where torch_npu and the CANN toolkit are installed; elsewhere `aot_ops.NpuSetupError`
    says which is missing.

        lib = aot_ops.load("my_ops", ["my_ops.cpp"], extra_cflags=["-DUSE_FAST_PATH"])
        op = lib.op("MyLeakyRelu", attrs={"negative_slope": 0.2})
    """
    paths = resolve_sources(sources, f"aot_ops.load({name!r})")
    return _load(name, paths, {}, extra_cflags, extra_ldflags, extra_include_paths, with_torch, verbose, device)


def resolve_sources(sources: Sequence[PathLike] | PathLike, caller: str) -> list[Path]:
    """One source or a list of them, as absolute paths of existing files (FileNotFoundError naming `caller`)."""
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    paths = [Path(s).resolve() for s in sources]
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"{caller}: source {path} does not exist")
    return paths


def load_inline(name: str, cpp_source: str, *, cuda_source: str | None = None, extra_cflags: Sequence[str] = (),
                extra_ldflags: Sequence[str] = (), extra_include_paths: Sequence[PathLike] = (),
                with_torch: bool | None = None, verbose: bool = False) -> Library:
    """`load` for sources given as strings.

    They are written to `<cache>/<name>/inline/<name>.cpp` (and `<name>.cu`), so compiler errors name a real
    file and line you can open.

        lib = aot_ops.load_inline("twice", '''
            #include <cstdint>
            extern "C" int Twice(int, void **p, int *nd, int64_t **sh, const char **, void *, void *) {
              int64_t n = 1; for (int d = 0; d < nd[0]; ++d) n *= sh[0][d];
              for (int64_t i = 0; i < n; ++i) ((float *)p[1])[i] = 2 * ((float *)p[0])[i];
              return 0;
            }''')
        twice = lib.op("Twice", out_shape=lambda x: x, out_dtype=lambda x: x)
    """
    folder = cache.name_dir(name) / "inline"
    texts = {folder / f"{name}.cpp": cpp_source}
    if cuda_source is not None:
        texts[folder / f"{name}.cu"] = cuda_source
    return _load(name, list(texts), texts, extra_cflags, extra_ldflags, extra_include_paths, with_torch, verbose)


def _load(name: str, sources: list[Path], texts: dict[Path, str], extra_cflags, extra_ldflags,
          extra_include_paths, with_torch: bool | None, verbose: bool, device: str = "cpu") -> Library:
    if device not in ("cpu", "npu"):
        raise ValueError(f"aot_ops.load({name!r}): device must be 'cpu' or 'npu' (CUDA follows from .cu sources), "
                         f"got {device!r}")
    npu_toolchain = npu.toolchain() if device == "npu" else None  # NpuSetupError where it cannot be built
    include_paths = [Path(p).resolve() for p in extra_include_paths]
    if with_torch is None:
        with_torch = cache.uses_torch(sources + cache.local_headers(sources, include_paths, texts), texts)
        with_torch = with_torch or npu_toolchain is not None
    description = cache.describe(name, sources, with_torch, extra_cflags, extra_ldflags, include_paths, texts)
    if npu_toolchain is not None:  # part of the key: the same sources build another library for the NPU
        description["npu"] = {"torch_npu": str(npu_toolchain.torch_npu), "cann": str(npu_toolchain.cann_home)}
    has_cuda = any(cuda.is_cuda_source(s) for s in sources)
    not_linkable = cuda.why_not_linkable(with_torch) if has_cuda else None
    if has_cuda:
        # Part of the key: the same sources compiled-only here must be linked once a CUDA runtime is present.
        description["cuda_link"] = not_linkable or "linked"
    key = cache.key_of(description)
    folder = cache.name_dir(name)
    entry_dir = folder / key
    library = entry_dir / f"lib{name}.so"
    check_white_list(library)  # MindSpore would refuse it: do not build it, and never load it

    found = _published(entry_dir, library)
    if found is not None:
        log.info("cache hit: %s (%s)", name, library)
        return Library(name, found[0], key=key, rebuilt=False, reason=found[1])

    with BuildLock(folder / ".lock", f"the build of {name}"):
        found = _published(entry_dir, library)  # another process may have built it while we waited
        if found is not None:
            log.info("cache hit: %s was built by another process while this one waited (%s)", name, library)
            return Library(name, found[0], key=key, rebuilt=False, reason=found[1])
        spec = builder.LibrarySpec(name=name, sources=sources, use_torch=with_torch, extra_cflags=extra_cflags,
                                   extra_ldflags=extra_ldflags, extra_include_paths=include_paths,
                                   npu_toolchain=npu_toolchain)
        _build_and_publish(spec, folder, entry_dir, library, description, texts, not_linkable, verbose)
    return Library(name, None if not_linkable else library, key=key, rebuilt=True, reason=not_linkable)


def _build_and_publish(spec: builder.LibrarySpec, folder: Path, entry_dir: Path, library: Path, description: dict,
                       texts: dict[Path, str], not_linkable: str | None, verbose: bool) -> None:
    """Builds the library (under the name's build lock) and publishes it: entry.json, written last, records its
    sha256; last_build.json what it was made from (to explain the next rebuild)."""
    name = spec.name
    sources = spec.sources
    for path, text in texts.items():
        _write_if_changed(path, text)
    reasons = cache.rebuild_reasons(cache.read_own_json(folder / "last_build.json"), description)
    log.info("building %s: %s", name, "; ".join(reasons))
    if verbose:
        print(f"aot_ops: building {name}: {'; '.join(reasons)}", file=sys.stderr)
    start = time.monotonic()
    build_dir = private.private_dir(folder / "build")
    private.private_dir(entry_dir)
    with progress(f"lib{name}"):
        if not_linkable:
            builder.build_objects(spec, build_dir, verbose=verbose)
        else:
            builder.build_library(spec, build_dir, library, verbose=verbose)
    log.info("built %s in %.1fs", name, time.monotonic() - start)
    if not_linkable:
        log.warning("%s: CUDA sources compiled, not linked: %s", name, not_linkable)
    cache.write_json_atomically(entry_dir / "entry.json", {
        "name": name, "library": library.name, "built_at": time.time(), "loadable": not not_linkable,
        "reason": not_linkable, "sources": [str(s) for s in sources],
        "compiler": toolchain.compiler_version(toolchain.cxx()),
        "sha256": None if not_linkable else private.file_sha256(library),  # checked before every load
    })
    cache.write_json_atomically(folder / "last_build.json", description)


def _published(entry_dir: Path, library: Path) -> tuple[Path | None, ...] | None:
    """(path, reason) of a finished cache entry, or None. entry.json is written after the library is in place,
    so its presence means the build completed. The entry must be this user's, and the library still what was
    built (private.py): a library planted or swapped in the cache is refused, never loaded."""
    if not os.path.lexists(entry_dir):
        return None
    private.private_dir(entry_dir)
    info = cache.read_own_json(entry_dir / "entry.json")
    if info is None:
        return None
    if not info.get("loadable", True):
        return None, info.get("reason")
    if not os.path.lexists(library):
        return None
    return private.check_published(library, info.get("sha256")), None


def _write_if_changed(path: Path, text: str) -> None:
    # Rewriting identical text would bump the mtime and make ninja recompile for nothing.
    private.private_dir(path.parent)
    if not os.path.lexists(path) or private.check_file(path).read_text() != text:
        cache.write_text_atomically(path, text)


def cache_dir() -> Path:
    """Where `load` keeps its libraries: $AOT_OPS_CACHE, else ~/.cache/aot_ops."""
    return cache.cache_root()


def cache_entries(name: str | None = None) -> list[cache.CacheEntry]:
    """The libraries in the cache (all, or those built under `name`)."""
    return cache.entries(name)


def clean_cache(name: str | None = None) -> list[Path]:
    """Remove cached libraries and build folders (all, or those of `name`); returns the removed paths."""
    return cache.clean(name)
