#!/usr/bin/env python3
"""Do two builds of a CUDA object compile the named kernels to the same code?

    python3 tests/gpu/sass_same.py OLD.o NEW.o [SUBSTRING] [--map OLD=NEW]

Dumps both objects with `cuobjdump -sass` (on PATH or $CUOBJDUMP) and compares
every kernel whose mangled name contains SUBSTRING (default hgemm_kernel),
instruction by instruction, with constant-bank offsets (c[0x0][0x...], where
a kernel parameter struct that grew moves) and other immediates masked. A
kernel of OLD is matched to the NEW kernel whose name equals it after the
--map replacements (e.g. a template argument added:
--map 'Lb0EEEv=Lb0ELb0EEEv'). Prints one line per kernel and exits 1 when
any differs or has no match. Used for docs/HOPPER_GEMM.md's check that a new
hook leaves the plain kernels untouched (docs/PERFORMANCE.md 4i)."""
import os
import re
import subprocess
import sys


def kernels(obj, part):
    tool = os.environ.get("CUOBJDUMP", "cuobjdump")
    text = subprocess.run([tool, "-sass", obj], check=True, capture_output=True, text=True).stdout
    out, cur = {}, None
    for line in text.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            # The anonymous namespace's hash differs from build to build.
            name = re.sub(r"_GLOBAL__N__[0-9a-f]+_", "_GLOBAL__N__", m.group(1))
            cur = name if part in name else None
            if cur:
                out[cur] = []
            continue
        if cur and re.search(r"/\*[0-9a-f]{4,}\*/", line):
            ins = re.sub(r"/\*[0-9a-f]+\*/", "", line).split(";")[0].strip()
            ins = re.sub(r"c\[0x0\]\[0x[0-9a-f]+\]", "c[K]", ins)
            out[cur].append(re.sub(r"0x[0-9a-f]+", "X", ins))
    return out


def main(argv):
    args, maps = [], []
    it = iter(argv)
    for a in it:
        if a == "--map":
            old, new = next(it).split("=", 1)
            maps.append((old, new))
        else:
            args.append(a)
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    part = args[2] if len(args) > 2 else "hgemm_kernel"
    old, new = kernels(args[0], part), kernels(args[1], part)
    bad = 0
    for name, code in sorted(old.items()):
        want = name
        for a, b in maps:
            want = want.replace(a, b)
        other = new.get(want)
        if other is None:
            print(f"no match  {name}")
            bad += 1
        elif other == code:
            print(f"same      {len(code):6d} instructions  {want}")
        else:
            diff = sum(1 for a, b in zip(code, other) if a != b) + abs(len(code) - len(other))
            print(f"DIFFERENT {len(code)} vs {len(other)} instructions, {diff} differ  {want}")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
