"""``python -m torch_openreg.kernels``: build kernel modules and inspect them.

    python -m torch_openreg.kernels build my_kernel.rs -o my_kernel.wasm
    python -m torch_openreg.kernels build my_kernel.c  [--global-base 0x100000]
    python -m torch_openreg.kernels build my_kernel.wat
    python -m torch_openreg.kernels info my_kernel.wasm      # its kernels and their parameter types
    python -m torch_openreg.kernels sdk                      # where the SDK's sources are
"""

from __future__ import annotations

import argparse
import sys


def _int(text: str) -> int:
    return int(text, 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_openreg.kernels", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build_cmd = commands.add_parser("build", help="compile a .rs, .c or .wat source to a .wasm kernel module")
    build_cmd.add_argument("source")
    build_cmd.add_argument("-o", "--output", help="the .wasm to write (default: the source's name with .wasm)")
    build_cmd.add_argument("--global-base", type=_int, help="where the module's static data starts (e.g. 0x100000)")
    build_cmd.add_argument("flags", nargs="*", help="after --: more compiler flags")
    info_cmd = commands.add_parser("info", help="check a module and list its kernels (loads it on openreg:0)")
    info_cmd.add_argument("module")
    commands.add_parser("sdk", help="print the directory that holds the SDK's sources")
    args = parser.parse_args(argv)

    from . import KernelBuildError, build, load, sdk_dir

    try:
        if args.command == "build":
            out = build(args.source, args.output, global_base=args.global_base, flags=args.flags)
            print(out)
        elif args.command == "info":
            module = load(args.module)
            print(f"{module.name}: {len(module.kernels)} kernels")
            for kernel in module.kernels.values():
                print(f"  {kernel.name}({', '.join(kernel.params)})")
        else:
            print(sdk_dir())
    except (KernelBuildError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
