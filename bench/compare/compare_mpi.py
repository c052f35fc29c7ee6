#!/usr/bin/env python3
"""chorus beside Open MPI only: compare.py --peers openmpi --startup-runs 0 [ARGS].

Kept for the commands that name it; compare.py (same folder) runs every peer (Open MPI, MPICH,
Gloo), the start-up time and the targets. Takes compare.py's arguments (--build, --anchors, --np,
--sizes, --colls, --rounds, ...); see compare.py --help.
"""
import os
import sys

if __name__ == "__main__":
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        print(__doc__)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compare.py")
    os.execv(sys.executable, [sys.executable, script, "--peers", "openmpi", "--startup-runs", "0",
                              *sys.argv[1:]])
