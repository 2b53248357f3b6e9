#!/usr/bin/env python3
"""Do two builds of CUDA objects compile the named kernels to the same code?

    python3 tests/gpu/sass_same.py OLD.o[,OLD2.o...] NEW.o[,NEW2.o...] [SUBSTRING]
        [--map OLD=NEW] [--sub REGEX=REPLACEMENT] [--gone REGEX] [--registers]

Dumps the objects with `cuobjdump -sass` (on PATH or $CUOBJDUMP) and compares
every kernel whose mangled name contains SUBSTRING (default hgemm_kernel),
instruction by instruction, with constant-bank offsets (c[0x0][0x...], where
a kernel parameter struct that changed moves) and other immediates masked.
A kernel of OLD is matched to the NEW kernel whose name equals it after the
--map replacements (plain text, e.g. a template argument added:
--map 'Lb0EEEv=Lb0ELb0EEEv') and --sub replacements (Python regular
expressions, e.g. two template arguments removed). OLD kernels whose name
matches a --gone expression are expected to have no match (deleted
kernels) and are listed as such. --registers also masks register numbers
(R12, UR7, P0: the same instructions in the same order, allocated
differently, e.g. after a parameter struct lost fields). Prints one line per kernel and exits 1 when
any differs, has no match without --gone, or a NEW kernel was matched by
none. Used to show that a change of the source layout left the kernels'
code as it was (docs/HOPPER_GEMM.md, "Checking it")."""
import os
import re
import subprocess
import sys


def kernels(objs, part, registers=False):
    tool = os.environ.get("CUOBJDUMP", "cuobjdump")
    out, cur = {}, None
    for obj in objs.split(","):
        text = subprocess.run([tool, "-sass", obj], check=True, capture_output=True, text=True).stdout
        for line in text.splitlines():
            m = re.search(r"Function : (\S+)", line)
            if m:
                # The anonymous namespace is named after the source file and
                # a hash that differs from build to build.
                name = re.sub(r"\d+_GLOBAL__N__\w+?_[0-9a-f]{8}(?=\d+[A-Za-z_])", "_GLOBAL__N_", m.group(1))
                cur = name if part in name else None
                if cur:
                    out[cur] = []
                continue
            if cur and re.search(r"/\*[0-9a-f]{4,}\*/", line):
                ins = re.sub(r"/\*[0-9a-f]+\*/", "", line).split(";")[0].strip()
                ins = re.sub(r"c\[0x0\]\[0x[0-9a-f]+\]", "c[K]", ins)
                ins = re.sub(r"0x[0-9a-f]+", "X", ins)
                if registers:
                    ins = re.sub(r"\bU?[RP]\d+\b", "R", ins)
                out[cur].append(ins)
    return out


def main(argv):
    args, maps, subs, gone, registers = [], [], [], [], False
    it = iter(argv)
    for a in it:
        if a in ("--map", "--sub"):
            old, new = next(it).split("=", 1)
            (maps if a == "--map" else subs).append((old, new))
        elif a == "--registers":
            registers = True
        elif a == "--gone":
            gone.append(re.compile(next(it)))
        else:
            args.append(a)
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    part = args[2] if len(args) > 2 else "hgemm_kernel"
    old, new = kernels(args[0], part, registers), kernels(args[1], part, registers)
    bad, matched = 0, set()
    for name, code in sorted(old.items()):
        want = name
        for a, b in maps:
            want = want.replace(a, b)
        for a, b in subs:
            want = re.sub(a, b, want)
        other = new.get(want)
        if other is None:
            if any(g.search(name) for g in gone):
                print(f"gone      {len(code):6d} instructions  {name}")
            else:
                print(f"no match  {name}")
                bad += 1
            continue
        matched.add(want)
        if other == code:
            print(f"same      {len(code):6d} instructions  {want}")
        else:
            diff = sum(1 for a, b in zip(code, other) if a != b) + abs(len(code) - len(other))
            print(f"DIFFERENT {len(code)} vs {len(other)} instructions, {diff} differ  {want}")
            bad += 1
    for name in sorted(set(new) - matched):
        print(f"new only  {len(new[name]):6d} instructions  {name}")
        bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
