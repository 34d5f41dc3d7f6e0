"""Command line: aot-ops <command> (the same as python -m aot_ops <command>).

    build SRC... -o OUT.so   compile aot sources (.cpp, .c, .cu) into a library MindSpore can load
    cache list [NAME]        libraries that aot_ops.load has built ($AOT_OPS_CACHE or ~/.cache/aot_ops)
    cache clean [NAME]       delete them (all, or one name)
    doctor                   check Python, MindSpore, torch, numpy, compilers, CUDA, CANN and the cache
    conformance [...]        run PyTorch's OpInfo samples through the ATen bridge (see --help)
    zoo [...]                port Hugging Face transformers models, check them against torch, time them
    fuzz --cases N           generated hostile calls in both modes, and garbage in the exported C functions'
                             raw arguments (--raw-cases N); counts deaths, wrong results and hangs

Exit status: 0 done; 1 a check found a problem (doctor, fuzz, conformance, zoo); 2 usage error; 3 build failed;
4 compiled but not linked (CUDA sources on a machine that cannot link them).
"""
from __future__ import annotations

import argparse
import json
import os
import logging
import sys
from pathlib import Path

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, EXIT_BUILD_FAILED, EXIT_NOT_LINKED = 0, 1, 2, 3, 4


def _build(args: argparse.Namespace) -> int:
    from ._build import builder, cuda
    from ._build.progress import progress

    out = Path(args.output).resolve()
    spec = builder.LibrarySpec(
        name=out.stem,
        sources=[Path(s) for s in args.sources],
        use_torch=not args.no_torch,
        extra_cflags=args.cflag,
        extra_ldflags=args.ldflag,
        extra_include_paths=[Path(p) for p in args.include],
    )
    build_dir = Path(args.build_dir) if args.build_dir else out.parent / f".{out.name}.build"
    try:
        with progress(out.name):
            if spec.has_cuda and cuda.why_not_linkable(spec.use_torch):
                objects = builder.build_objects(spec, build_dir, verbose=args.verbose)
                print(f"compiled {len(objects)} objects in {build_dir / 'obj'}; not linked: "
                      f"{cuda.why_not_linkable(spec.use_torch)}", file=sys.stderr)
                return EXIT_NOT_LINKED
            builder.build_library(spec, build_dir, out, verbose=args.verbose)
    except (builder.BuildError, cuda.CudaSetupError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BUILD_FAILED
    print(out)
    return EXIT_OK


def _cache(args: argparse.Namespace) -> int:
    from ._build import cache

    if args.action == "list":
        found = cache.entries(args.name)
        print(f"cache: {cache.cache_root()}")
        for entry in found:
            print(entry.describe())
        total = sum(e.size for e in found)
        print(f"{len(found)} libraries, {total / 2**20:.1f} MiB")
    else:
        removed = cache.clean(args.name)
        print(f"removed {len(removed)} items from {cache.cache_root()}")
    return 0


def _doctor(args: argparse.Namespace) -> int:

    from .tools import doctor

    findings = doctor.diagnose()
    if args.json:
        print(json.dumps([f.__dict__ for f in findings], indent=1))
    else:
        print(doctor.format_table(findings))
    blocking = doctor.blocking(findings)
    if blocking and not args.json:
        print(f"\n{len(blocking)} problem(s) block using aot_ops: " + ", ".join(f.check for f in blocking))
    return EXIT_PROBLEM if blocking else EXIT_OK


def _fuzz(args: argparse.Namespace) -> int:
    from .tools import fuzz as _fuzz

    def progress(done, total):
        if done % 100 == 0 or done == total:
            print(f"{done}/{total}", file=sys.stderr, flush=True)

    report = _fuzz.run(args.cases, seed=args.seed, jobs=args.jobs, timeout=args.timeout, start=args.start,
                       progress=progress, raw_cases=args.raw_cases, raw_catalogue=args.raw_catalogue)
    print(report.summary())
    if args.json:
        Path(args.json).write_text(json.dumps({"seed": report.seed, "seconds": report.seconds,
                                               "results": report.results}, indent=1))
    return EXIT_PROBLEM if report.failures else EXIT_OK


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["conformance"]:  # its own argument parser (aot_ops/tools/conformance.py)
        from .tools import conformance

        return conformance.main(argv[1:])
    if argv[:1] == ["zoo"]:  # its own argument parser (aot_ops/tools/zoo_cli.py)
        from .tools import zoo_cli

        return zoo_cli.main(argv[1:])
    from . import __version__

    prog = "aot-ops" if os.path.basename(sys.argv[0]) == "aot-ops" else "python -m aot_ops"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"aot_ops {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    build = sub.add_parser("build", help="compile aot sources into a shared library")
    build.add_argument("sources", nargs="+", help="sources: C++ (.cpp, .cc), C (.c), CUDA (.cu)")
    build.add_argument("-o", "--output", required=True, help="the .so to write")
    build.add_argument("-I", "--include", action="append", default=[], help="extra include directory")
    build.add_argument("--cflag", action="append", default=[], help="extra compiler flag (repeatable)")
    build.add_argument("--ldflag", action="append", default=[], help="extra linker flag (repeatable)")
    build.add_argument("--no-torch", action="store_true", help="plain C/C++ kernel: do not include or link torch")
    build.add_argument("--build-dir", help="where objects go (default: next to the output)")
    build.add_argument("-v", "--verbose", action="store_true", help="show the compiler commands")
    build.set_defaults(run=_build)

    cache = sub.add_parser("cache", help="list or clean the libraries built by aot_ops.load")
    cache.add_argument("action", choices=["list", "clean"])
    cache.add_argument("name", nargs="?", help="only this library name")
    cache.set_defaults(run=_cache)

    doctor = sub.add_parser("doctor", help="check the environment (exit status 1 when something blocks use)")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.set_defaults(run=_doctor)

    fuzz = sub.add_parser("fuzz", help="generated hostile calls, each judged against torch (exit 1 on a death, "
                                       "a wrong result or a hang)")
    fuzz.add_argument("--cases", type=int, default=500, help="how many cases (default 500)")
    fuzz.add_argument("--raw-cases", type=int, default=200,
                      help="how many raw-argument cases: garbage a C caller could pass the bundled libraries' exported "
                           "functions (default 200)")
    fuzz.add_argument("--raw-catalogue", action="store_true",
                      help="also every single raw-argument fault once (aot_ops/tools/fuzz/raw_cases.py: catalogue)")
    fuzz.add_argument("--seed", type=int, default=0, help="the case sequence (default 0)")
    fuzz.add_argument("--start", type=int, default=0, help="first case index (to re-run one case)")
    fuzz.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    fuzz.add_argument("--timeout", type=float, default=60.0, help="seconds before a case counts as a hang")
    fuzz.add_argument("--json", help="write every case and outcome to this file")
    fuzz.set_defaults(run=_fuzz)

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
                        format="%(name)s: %(message)s")
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
