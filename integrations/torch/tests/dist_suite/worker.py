"""Runs tests of PyTorch's distributed suite on one backend at one world size; run.py starts it.

    python3 worker.py --backend chorus --world-size 2 --out results.json [--tests a,b,...]
    python3 worker.py --list                       # the suite's test names, one a line

The suite reads BACKEND and WORLD_SIZE when it is imported, so each (backend, world size) is a
process of its own. For chorus the gates of gates.py are lifted first: the suite's source is
rewritten as gates.LIFTS says and imported from a temporary folder. Each test runs as the suite
runs it (MultiProcessTestCase: one process per rank, a file:// rendezvous, the suite's own
per-test timeout), with ranks forked from this process (`--start-method spawn` for fresh
interpreters, as upstream's test_distributed_spawn.py). The result of every test goes to --out
as JSON: {name: {"status": pass|fail|error|skip, "message": first line, "seconds": s}}.
"""
import argparse
import json
import os
import re
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gates  # noqa: E402

SUITE_MODULE = "torch.testing._internal.distributed.distributed_test"
PATCHED_NAME = "chorus_dist_suite"


def suite_source():
    import importlib.util
    spec = importlib.util.find_spec(SUITE_MODULE)
    with open(spec.origin) as f:
        return f.read()


def lift_gates(source):
    """The suite's source with gates.LIFTS applied; raises when a gate is not where expected."""
    for lift in gates.LIFTS:
        for test in lift.tests:
            m = re.search(rf"^(\s*)def {re.escape(test)}\(", source, re.M)
            if m is None:
                raise SystemExit(f"gates.py: no test {test} in the suite")
            # The decorators: from the end of the previous statement block to the def.
            start = source.rfind("\n\n", 0, m.start())
            block = source[start:m.start()]
            if lift.old not in block:
                raise SystemExit(f"gates.py: {test} has no gate {lift.old!r} (another torch?)")
            source = source[:start] + block.replace(lift.old, lift.new, 1) + source[m.start():]
    return source


TEST_CLASS = '''

class ChorusSuiteTest(TestDistBackend, DistributedTest._DistTestBase):
    """The suite's tests, one process per rank ({start} start method)."""

    def setUp(self):
        super().setUp()
        self._start_processes(torch.multiprocessing.get_context("{start}").Process)
'''


def import_suite(backend, start_method, folder):
    """Imports the suite (gates lifted for chorus) and returns its test class."""
    try:
        import expecttest  # noqa: F401
    except ImportError:
        sys.path.insert(0, os.path.join(HERE, "shim"))
    sys.argv = sys.argv[:1]  # common_utils parses the command line when it is imported
    import torch.testing._internal.common_distributed as cd
    if backend == gates.BACKEND:
        import chorus_torch  # noqa: F401  (registers the backend)
        for feature in gates.FEATURES:
            cd.DistTestCases.backend_feature[feature].add(backend)
        source = lift_gates(suite_source())
    else:
        source = suite_source()
    source += TEST_CLASS.format(start=start_method)
    with open(os.path.join(folder, PATCHED_NAME + ".py"), "w") as f:
        f.write(source)
    sys.path.insert(0, folder)
    import importlib
    module = importlib.import_module(PATCHED_NAME)
    return module.ChorusSuiteTest


EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Failure|Timeout|Mismatch|Interrupt"
                            r"|Exit|InvalidArgument)\b")
RANK_EXITED = re.compile(r"^RuntimeError: Process \d+ exited with error code")


def first_line(text):
    """The line that says what went wrong: the exception that ended the first failing rank.

    A rank's error arrives as "RuntimeError: Process i exited with error code 10 and
    exception:" followed by that rank's traceback, whose last exception line names the cause.
    """
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    for i, ln in enumerate(lines):
        if RANK_EXITED.match(ln):
            inner = [x for x in lines[i + 1:] if EXCEPTION_LINE.match(x)]
            if inner:
                return inner[0][:300]
    found = [x for x in lines if EXCEPTION_LINE.match(x) or x.startswith("AssertionError")]
    return (found[-1] if found else lines[-1])[:300]


class Recorder(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.results = {}
        self._t0 = 0.0

    def _name(self, test):
        return test.id().split(".")[-1]

    def startTest(self, test):
        super().startTest(test)
        self._t0 = time.monotonic()
        print(f"[worker] {self._name(test)} ...", file=sys.stderr, flush=True)

    def _put(self, test, status, message=""):
        self.results[self._name(test)] = {
            "status": status, "message": message,
            "seconds": round(time.monotonic() - self._t0, 2)}

    def addSuccess(self, test):
        self._put(test, "pass")

    def addFailure(self, test, err):
        self._put(test, "fail", first_line(self._exc_info_to_string(err, test)))

    def addError(self, test, err):
        self._put(test, "error", first_line(self._exc_info_to_string(err, test)))

    def addSkip(self, test, reason):
        self._put(test, "skip", str(reason).splitlines()[0] if reason else "")

    def addExpectedFailure(self, test, err):
        self._put(test, "pass", "expected failure")

    def addUnexpectedSuccess(self, test):
        self._put(test, "fail", "unexpected success")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="gloo")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--tests", default="", help="comma-separated names (default: all)")
    ap.add_argument("--out", help="JSON results")
    ap.add_argument("--timeout", type=int, default=180, help="per-test limit in seconds")
    ap.add_argument("--start-method", choices=("fork", "spawn"), default="fork")
    ap.add_argument("--list", action="store_true", help="print the test names and exit")
    args = ap.parse_args()

    # Read by the suite when it is imported.
    os.environ["BACKEND"] = args.backend
    os.environ["WORLD_SIZE"] = str(args.world_size)
    os.environ["DISTRIBUTED_TESTS_DEFAULT_TIMEOUT"] = str(args.timeout)
    os.environ.setdefault("TORCH_SHOW_CPP_STACKTRACES", "0")

    with tempfile.TemporaryDirectory(prefix="chorus-dist-suite-") as folder:
        cls = import_suite(args.backend, args.start_method, folder)
        names = sorted(n for n in dir(cls) if n.startswith("test_"))
        if args.list:
            print("\n".join(names))
            return 0
        wanted = [t for t in args.tests.split(",") if t] or names
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            raise SystemExit(f"not in the suite: {', '.join(unknown)}")
        suite = unittest.TestSuite(cls(name) for name in wanted)
        result = Recorder()
        suite.run(result)
    with open(args.out, "w") as f:
        json.dump(result.results, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
