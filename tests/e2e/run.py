#!/usr/bin/env python3
"""Runs the end-to-end tests: every function named test_* in
tests/e2e/test_*.py, in file order.

    python3 tests/e2e/run.py --build build [-k PATTERN] [-v]

A test that takes a parameter named `h` gets a fresh harness.Harness, closed
after the test whatever happens (its processes stopped, its agent logs
checked for sanitizer reports and unclean exits). Prints one line per test,
the traceback and logs of each failure, and a summary line; exits 1 when
any test failed.

Any other parameter NAME without a default names a module fixture: the
test's module defines `def fixture_NAME(): ... return obj`, where obj has
close() (and may have dir, logs() and remove(), like a Harness). The tests
of that module taking NAME share one obj, made when the first of them runs
(a SETUP line; bounded by FIXTURE_TIMEOUT, not by that test's alarm nor
counted in its time) and closed after the last of them, passed or not, or
when the run is stopped (SIGTERM, Ctrl-C). A fixture that raises
harness.Skip skips the tests taking it; one that fails fails them, and is
tried once. Processes it starts as harness.Proc are killed at exit whatever
happens. obj.remove() follows close() unless a test taking obj failed or
--keep.
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
FIXTURE_TIMEOUT = 180  # seconds to make, or to close, one module fixture


class TestTimeout(Exception):
    pass


class FixtureError(Exception):
    """A module fixture is missing or could not be made."""


_alarm_for = ["test", TEST_TIMEOUT]


def _set_alarm(seconds, what):
    _alarm_for[:] = [what, seconds]
    signal.alarm(seconds)


def _on_alarm(signum, frame):
    raise TestTimeout("%s ran longer than %ds" % tuple(_alarm_for))


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


def fixture_names(fn):
    """The parameters of a test that name module fixtures."""
    return [n for n, p in inspect.signature(fn).parameters.items()
            if n != "h" and p.default is inspect.Parameter.empty]


class Fixtures:
    """The module fixtures of a run: made on first use, closed after the
    last selected test that takes them."""

    def __init__(self, tests, keep):
        self.keep = keep
        self.objs = {}  # (module, name) -> obj
        self.errors = {}  # (module, name) -> (exception class, message)
        self.failed = set()  # (module, name) taken by a test that failed
        self.last = {}  # (module, name) -> index in tests of the last taker
        for i, (full, fn) in enumerate(tests):
            for name in fixture_names(fn):
                self.last[(full.split("::")[0], name)] = i

    def get(self, mod, name):
        key = (mod, name)
        if key in self.objs:
            return self.objs[key]
        if key not in self.errors:
            factory = getattr(sys.modules[mod], "fixture_" + name, None)
            if factory is None:
                self.errors[key] = (FixtureError, "%s has no fixture_%s for the parameter %s"
                                    % (mod, name, name))
            else:
                t0 = time.monotonic()
                _set_alarm(FIXTURE_TIMEOUT, "fixture_%s" % name)
                try:
                    self.objs[key] = factory()
                except harness.Skip as e:
                    self.errors[key] = (harness.Skip, "fixture_%s: %s" % (name, e))
                except Exception:  # noqa: BLE001 - reported for each test taking it
                    self.errors[key] = (FixtureError, "fixture_%s failed:\n%s"
                                        % (name, traceback.format_exc()))
                finally:
                    signal.alarm(0)
                if key in self.objs:
                    print("SETUP %s::%s %.2fs" % (mod, name, time.monotonic() - t0), flush=True)
                    return self.objs[key]
        cls, msg = self.errors[key]
        raise cls(msg)

    def logs(self, key):
        obj = self.objs.get(key)
        if obj is None or not hasattr(obj, "logs"):
            return ""
        try:
            return "---- fixture %s:\n%s" % (key[1], obj.logs())
        except Exception:  # noqa: BLE001
            return ""

    def close(self, key):
        """Closes one fixture; returns a report of what went wrong, or ""."""
        obj = self.objs.pop(key, None)
        if obj is None:
            return ""
        report = ""
        _set_alarm(FIXTURE_TIMEOUT, "closing fixture_%s" % key[1])
        try:
            problems = obj.close()
            if problems:
                report = "after its last test: " + "; ".join(problems)
        except Exception:  # noqa: BLE001
            report = "closing it failed:\n" + traceback.format_exc()
        finally:
            signal.alarm(0)
        d = getattr(obj, "dir", None)
        if report or key in self.failed:
            if d:
                print("(fixture %s::%s logs kept in %s)" % (key[0], key[1], d), flush=True)
        elif not self.keep and hasattr(obj, "remove"):
            obj.remove()
        return report

    def close_after(self, i):
        """Closes the fixtures whose last taker is test i; returns
        [(key, report)] of those that went wrong."""
        out = []
        for key, last in self.last.items():
            if last == i and key in self.objs:
                report = self.close(key)
                if report:
                    out.append((key, report))
        return out

    def close_all(self):
        for key in list(self.objs):
            report = self.close(key)
            if report:
                print("FAIL %s::fixture_%s\n%s" % (key[0], key[1], report.rstrip()), flush=True)


def run_one(full, fn, keep, fixtures=None):
    """Returns (outcome, seconds, report)."""
    params = inspect.signature(fn).parameters
    h = None
    report = ""
    outcome = "PASS"
    mod = full.split("::")[0]
    kwargs = {}
    try:
        for name in fixture_names(fn):
            kwargs[name] = fixtures.get(mod, name)
    except harness.Skip as e:
        return "SKIP", 0.0, "  skipped: %s" % e
    except FixtureError as e:
        fixtures.failed.update((mod, n) for n in fixture_names(fn))
        return "FAIL", 0.0, str(e)
    t0 = time.monotonic()
    _set_alarm(TEST_TIMEOUT, "test")
    try:
        if "h" in params:
            h = harness.Harness(full.split("::")[1])
            kwargs["h"] = h
        fn(**kwargs)
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
        if outcome == "FAIL" and kwargs:
            for name in kwargs:
                if name != "h":
                    fixtures.failed.add((mod, name))
                    report += "\n" + fixtures.logs((mod, name))
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
    fixtures = Fixtures(tests, args.keep)
    try:
        for i, (full, fn) in enumerate(tests):
            outcome, secs, report = run_one(full, fn, args.keep, fixtures)
            counts[outcome] += 1
            print("%s %s %.2fs" % (outcome, full, secs), flush=True)
            if outcome == "FAIL" or (outcome == "SKIP" and report):
                print(report.rstrip(), flush=True)
            for (mod, name), report in fixtures.close_after(i):
                counts["FAIL"] += 1
                print("FAIL %s::fixture_%s\n%s" % (mod, name, report.rstrip()), flush=True)
    finally:
        # Stopped early (Ctrl-C, SIGTERM): the shared fixtures go too.
        fixtures.close_all()
    summary = "%d passed, %d failed" % (counts["PASS"], counts["FAIL"])
    if counts["SKIP"]:
        summary += ", %d skipped" % counts["SKIP"]
    print("(%.1fs)" % (time.monotonic() - t_all))
    print(summary)
    return 1 if counts["FAIL"] or not tests else 0


if __name__ == "__main__":
    sys.exit(main())
