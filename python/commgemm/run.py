"""The package's command-line programs: commgemm-run (start N ranks of a
program on this machine) and commgemm-info (what this machine and build
have). pip installs them as console scripts; `python -m commgemm.run` is
commgemm-run too:

    commgemm-run -n 2 python3 my_script.py
    python3 -m commgemm.run -n 2 python3 my_script.py

Each runs the compiled program: the package's own (pip install ./python puts
it in commgemm/bin/), else one of the repository's build trees
(<repo>/build/tools/, then other <repo>/build*/tools/, newest first).
"""

import glob
import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_REPO_DIR = os.path.dirname(os.path.dirname(_PACKAGE_DIR))  # python/commgemm -> repo


def program_candidates(name):
    """Where program_path(name) looks, in order (paths that exist)."""
    found = [os.path.join(_PACKAGE_DIR, "bin", name)]
    primary = os.path.join(_REPO_DIR, "build", "tools", name)
    found.append(primary)
    others = [p for p in glob.glob(os.path.join(_REPO_DIR, "build*", "tools", name)) if p != primary]
    found += sorted(others, key=os.path.getmtime, reverse=True)
    return [p for p in found if os.path.isfile(p) and os.access(p, os.X_OK)]


def program_path(name):
    """Path of the compiled program `name` (commgemm-run, commgemm-info);
    raises FileNotFoundError saying where it looked."""
    found = program_candidates(name)
    if not found:
        raise FileNotFoundError(
            f"{name}: expected the program in {os.path.join(_PACKAGE_DIR, 'bin')} (pip install ./python puts it "
            f"there) or in {os.path.join(_REPO_DIR, 'build*', 'tools')}, found neither; reinstall the package "
            f"or build the repository (cmake -S . -B build && cmake --build build)")
    return found[0]


def _exec(name, args):
    try:
        path = program_path(name)
    except FileNotFoundError as e:
        print(f"commgemm: {e}", file=sys.stderr)
        return 127
    os.execv(path, [name] + list(args))
    return 127  # not reached


def main(argv=None):
    """commgemm-run: starts N ranks of a program (`commgemm-run --help`)."""
    return _exec("commgemm-run", sys.argv[1:] if argv is None else argv)


def info_main(argv=None):
    """commgemm-info: version, backends compiled in, and whether each can run here."""
    return _exec("commgemm-info", sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
