"""Command line: python -m aot_ops <command>.

    build SRC... -o OUT.so   compile aot sources that include <ms_ext/ms_ext.h> into a library MindSpore can load
    conformance [...]        run PyTorch's OpInfo samples through the ATen bridge (see --help)
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path


def _build(args: argparse.Namespace) -> int:
    from ._build import builder

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
        builder.build_library(spec, build_dir, out, verbose=args.verbose)
    except builder.BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(out)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["conformance"]:  # its own argument parser (aot_ops/conformance.py)
        from . import conformance

        return conformance.main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m aot_ops", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    build = sub.add_parser("build", help="compile aot sources into a shared library")
    build.add_argument("sources", nargs="+", help="C++ sources (.cpp, .cc)")
    build.add_argument("-o", "--output", required=True, help="the .so to write")
    build.add_argument("-I", "--include", action="append", default=[], help="extra include directory")
    build.add_argument("--cflag", action="append", default=[], help="extra compiler flag (repeatable)")
    build.add_argument("--ldflag", action="append", default=[], help="extra linker flag (repeatable)")
    build.add_argument("--no-torch", action="store_true", help="plain C/C++ kernel: do not include or link torch")
    build.add_argument("--build-dir", help="where objects go (default: next to the output)")
    build.add_argument("-v", "--verbose", action="store_true", help="show the compiler commands")
    build.set_defaults(run=_build)

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
                        format="%(name)s: %(message)s")
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
