"""Shared by compare.py's modules: the collectives compared and how, sizes, logging and
running a command."""
import os
import subprocess
import sys


HERE = os.path.dirname(os.path.abspath(__file__))


REPO = os.path.dirname(os.path.dirname(HERE))


DEFAULT_ANCHORS = os.path.join(os.path.dirname(REPO), "shared", "anchors")


# chorus-bench name -> (anchor name, busbw factor as a function of n)
COLLS = {
    "all_reduce": ("allreduce", lambda n: 2 * (n - 1) / n),
    "reduce_scatter": ("reduce_scatter", lambda n: (n - 1) / n),
    "all_gather": ("allgather", lambda n: (n - 1) / n),
    "broadcast": ("broadcast", lambda n: 1.0),
    "reduce": ("reduce", lambda n: 1.0),  # MPI only: mpi_extra.cpp here (Gloo has no anchor)
    "all_to_all": ("alltoall", lambda n: (n - 1) / n),  # MPI only, as reduce; not run by default
}


MPI_ONLY = {"reduce", "all_to_all"}  # timed by mpi_extra.cpp (-c), one launch per collective


DEFAULT_COLLS = ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"]


# MPI_Bcast and Gloo's broadcast have one buffer: the root's is sent, the others' are overwritten.
# chorus's in-place broadcast is that operation; out of place, the root also copies its send
# buffer into its receive buffer, which no peer does.
IN_PLACE = {"broadcast"}


TOTAL_SIZE = {"reduce_scatter", "all_gather", "all_to_all"}  # sizes are n x chunk


DEFAULT_SIZES = "8,1K,4K,16K,64K,256K,1M,4M,16M,64M,256M"


ROOFLINE_BYTES = 64 << 20  # the size of the 2x targets


def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    return int(text[:-1]) * mult[text[-1]] if text[-1] in mult else int(text)


def human(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def run(cmd, timeout, **kwargs):
    """Runs cmd; returns (returncode, stdout, stderr) and never raises on failure or timeout."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        return 124, e.stdout or "", f"timed out after {timeout} s"
