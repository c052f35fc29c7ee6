"""Launch hygiene on a shared machine: wait until it is idle, then say how much CPU others took.

    with Launch(quiet_wait=120) as g:
        ...run one launch (child processes, waited for)...
    g.other_cpu_s, g.contended    # CPU burnt by processes not ours while it ran

Idle: two consecutive 0.5 s samples of /proc/stat under 10% busy (or `quiet_wait` seconds
passed: the launch then runs anyway and `waited_out` says so). Contended: others used more than
5% of all CPUs over the launch's wall time.
"""
import os
import resource
import time

NCPU = os.cpu_count() or 1
HZ = os.sysconf("SC_CLK_TCK")


def _busy_idle():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    busy = v[0] + v[1] + v[2] + v[5] + v[6]   # user nice system irq softirq
    return busy, idle


def busy_fraction(dt=0.5):
    b0, i0 = _busy_idle()
    time.sleep(dt)
    b1, i1 = _busy_idle()
    tot = (b1 - b0) + (i1 - i0)
    return 0.0 if tot <= 0 else (b1 - b0) / tot


def _own_children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    s = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime + s.ru_utime + s.ru_stime


class Launch:
    def __init__(self, quiet_wait=120.0):
        self.quiet_wait = quiet_wait

    def __enter__(self):
        t0 = time.time()
        good = 0
        while good < 2 and time.time() - t0 < self.quiet_wait:
            good = good + 1 if busy_fraction() < 0.10 else 0
        self.waited_s = time.time() - t0
        self.waited_out = good < 2
        self._busy0, _ = _busy_idle()
        self._own0 = _own_children_cpu()
        self._t0 = time.time()
        return self

    def __exit__(self, *exc):
        self.wall_s = time.time() - self._t0
        busy1, _ = _busy_idle()
        machine = (busy1 - self._busy0) / HZ
        own = _own_children_cpu() - self._own0
        self.other_cpu_s = max(0.0, machine - own)
        self.contended = self.other_cpu_s > 0.05 * NCPU * self.wall_s
        return False

    def describe(self):
        return "waited %.0f s%s, other CPU %.1f s of %.0f s wall%s" % (
            self.waited_s, " (never idle)" if self.waited_out else "", self.other_cpu_s,
            self.wall_s, " CONTENDED" if self.contended else "")
