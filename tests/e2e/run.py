#!/usr/bin/env python3
"""Runs the end-to-end tests: every function named test_* in
tests/e2e/test_*.py, in file order.

    python3 tests/e2e/run.py --build build [-k PATTERN] [-v]

A test that takes a parameter named `h` gets a fresh harness.Harness, closed
after the test whatever happens (its processes stopped, its agent logs
checked for sanitizer reports and unclean exits). Prints one line per test,
the traceback and logs of each failure, and a summary line; exits 1 when
any test failed.
"""

import argparse
import importlib
import inspect
import os
import signal
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness  # noqa: E402

TEST_TIMEOUT = 90  # seconds; no single test comes close


class TestTimeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise TestTimeout("test ran longer than %ds" % TEST_TIMEOUT)


def discover(pattern):
    tests = []
    for fname in sorted(os.listdir(HERE)):
        if not (fname.startswith("test_") and fname.endswith(".py")):
            continue
        modname = fname[:-3]
        mod = importlib.import_module(modname)
        for name, fn in list(vars(mod).items()):
            if not name.startswith("test_") or not callable(fn):
                continue
            full = "%s::%s" % (modname, name)
            if pattern and pattern not in full:
                continue
            tests.append((full, fn))
    return tests


def run_one(full, fn, keep):
    """Returns (outcome, seconds, report)."""
    params = inspect.signature(fn).parameters
    h = None
    report = ""
    outcome = "PASS"
    t0 = time.monotonic()
    signal.alarm(TEST_TIMEOUT)
    try:
        if "h" in params:
            h = harness.Harness(full.split("::")[1])
            fn(h)
        else:
            fn()
    except harness.Skip as e:
        outcome = "SKIP"
        report = "  skipped: %s" % e
    except BaseException as e:  # noqa: B902 - a test may raise anything
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        outcome = "FAIL"
        report = traceback.format_exc()
    finally:
        signal.alarm(0)
        if h is not None:
            try:
                problems = h.close()
            except Exception:  # noqa: BLE001
                problems = ["closing the harness failed:\n" + traceback.format_exc()]
            if problems and outcome != "FAIL":
                outcome = "FAIL"
                report = "after the test: " + "; ".join(problems)
            if outcome == "FAIL":
                report += "\n" + h.logs() + "\n(logs kept in %s)" % h.dir
            elif not keep:
                h.remove()
    return outcome, time.monotonic() - t0, report


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build", help="build directory (default: build)")
    ap.add_argument("-k", dest="pattern", default="",
                    help="run only tests whose module::name contains PATTERN")
    ap.add_argument("--keep", action="store_true", help="keep the logs of passed tests")
    args = ap.parse_args()

    harness.BUILD = os.path.abspath(os.path.join(harness.ROOT, args.build)
                                    if not os.path.isabs(args.build) else args.build)
    signal.signal(signal.SIGALRM, _on_alarm)
    # Stopped from outside: unwind, so every harness stops its processes.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    tests = discover(args.pattern)
    if not tests:
        print("no test matches %r" % args.pattern)
    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    t_all = time.monotonic()
    for full, fn in tests:
        outcome, secs, report = run_one(full, fn, args.keep)
        counts[outcome] += 1
        print("%s %s %.2fs" % (outcome, full, secs), flush=True)
        if outcome == "FAIL" or (outcome == "SKIP" and report):
            print(report.rstrip(), flush=True)
    summary = "%d passed, %d failed" % (counts["PASS"], counts["FAIL"])
    if counts["SKIP"]:
        summary += ", %d skipped" % counts["SKIP"]
    print("(%.1fs)" % (time.monotonic() - t_all))
    print(summary)
    return 1 if counts["FAIL"] or not tests else 0


if __name__ == "__main__":
    sys.exit(main())
