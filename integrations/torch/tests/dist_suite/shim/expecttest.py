"""Stands in for the `expecttest` package, which Debian 12 does not package.

torch.testing._internal.common_utils imports expecttest for its TestCase base class and the
expect-file tests (assertExpectedInline, `--accept`). The distributed suite uses neither; it
needs only that the import works. worker.py puts this folder on sys.path only when the real
package is missing. Any use of an expect-test fails loudly rather than passing.
"""
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    longMessage = True

    def assertExpectedInline(self, actual, expect, skip=0):  # noqa: N802 (upstream's name)
        raise NotImplementedError(
            "expect-tests need the expecttest package, which is not installed")
