#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs the end-to-end tests: every function named test_* in the files
test_*.py of the folders given (default: every folder of tests/ that has
such files), in parallel groups.

    python3 tests/e2e/run.py --build build [-j N] [-k PATTERN] [--keep] [FOLDER...]

A test is named MODULE::FUNCTION; module names are unique across the
folders. This folder is on the import path of every test (harness, spop,
redis_helper...).

Parallel groups: a pool of N worker processes (-j N, else $E2E_JOBS, else
twice the CPUs) takes the tests from a queue, longest first (as timed by
the previous run, in BUILD/e2e-times.json). The tests of a module that take
a module fixture form one group, run in file order by one worker; every
other test is a group of its own. A test marked @harness.serial (it
measures time or load, or needs the machine alone), and any group holding
one, runs after the parallel part, alone. Each worker has its own range of
loopback ports (harness.free_port) and each test its own directory.

A test that takes a parameter named `h` gets a fresh harness.Harness, closed
after the test whatever happens (its processes stopped, its agent logs
checked for sanitizer reports and unclean exits). Prints one line per test
as it ends (PASS, FAIL or SKIP and its seconds), the traceback, output and
logs of each failure, and a summary line; exits 1 when any test failed.

Any other parameter NAME without a default names a module fixture: the
test's module defines `def fixture_NAME(): ... return obj`, where obj has
close() (and may have dir, logs() and remove(), like a Harness). The tests
of that module taking NAME share one obj, made when the first of them runs
(a SETUP line; bounded by FIXTURE_TIMEOUT, not by that test's alarm nor
counted in its time) and closed after the last of them, passed or not, or
when the run is stopped. A fixture that raises harness.Skip skips the tests
taking it; one that fails fails them, and is tried once. obj.remove()
follows close() unless a test taking obj failed or --keep.

Stopped (SIGTERM, Ctrl-C), the runner stops its workers, each of which
closes its harness and fixtures; processes started as harness.Proc are
killed as process groups whatever happens.
"""

import argparse
import importlib
import inspect
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness  # noqa: E402

TEST_TIMEOUT = 90  # seconds; no single test comes close
FIXTURE_TIMEOUT = 180  # seconds to make, or to close, one module fixture
STOP_GRACE = 30  # seconds a stopped worker has to close what it started
TIMES_FILE = "e2e-times.json"  # in the build directory


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


def discover(folders, pattern):
    """[(full name, function)] of the folders' tests matching pattern, in
    folder, file and definition order."""
    tests = []
    seen = {}
    for folder in folders:
        folder = os.path.abspath(folder)
        if folder not in sys.path:
            sys.path.insert(1, folder)
        for fname in sorted(os.listdir(folder)):
            if not (fname.startswith("test_") and fname.endswith(".py")):
                continue
            modname = fname[:-3]
            if modname in seen:
                raise SystemExit("two test modules named %s: %s and %s"
                                 % (modname, seen[modname], folder))
            seen[modname] = folder
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


def is_serial(fn):
    return bool(getattr(fn, "e2e_serial", False))


def groups(tests):
    """The tests cut into groups: [(serial, [full names])]. Tests of a
    module that share a fixture (directly, or through another test taking
    both) make one group, in file order; every other test is a group."""
    out = []
    owner = {}  # (module, fixture) -> its group
    for full, fn in tests:
        mod = full.split("::")[0]
        keys = [(mod, n) for n in fixture_names(fn)]
        mine = []
        for k in keys:
            g = owner.get(k)
            if g is not None and all(g is not m for m in mine):
                mine.append(g)
        if not mine:
            group = [is_serial(fn), [], set()]
            out.append(group)
        else:
            group = mine[0]
            for other in mine[1:]:  # this test joins two groups: one now
                group[0] |= other[0]
                group[1] = sorted(group[1] + other[1], key=[t[0] for t in tests].index)
                group[2] |= other[2]
                for k in other[2]:
                    owner[k] = group
                out.remove(other)
        group[0] |= is_serial(fn)
        group[1].append(full)
        group[2].update(keys)
        for k in keys:
            owner[k] = group
    return [(s, names) for s, names, _ in out]


# ---- running tests (in a worker) ---------------------------------------------

class Fixtures:
    """The module fixtures of a group: made on first use, closed after the
    last of its tests that takes them."""

    def __init__(self, tests, keep, say):
        self.keep = keep
        self.say = say
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
                    self.say({"ev": "setup", "name": "%s::%s" % key,
                              "secs": time.monotonic() - t0})
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
                self.say({"ev": "line", "text": "(fixture %s::%s logs kept in %s)"
                          % (key[0], key[1], d)})
        elif not self.keep and hasattr(obj, "remove"):
            obj.remove()
        if report:
            self.say({"ev": "fixture", "name": "%s::fixture_%s" % key, "report": report})

    def close_after(self, i):
        """Closes the fixtures whose last taker is test i."""
        for key, last in self.last.items():
            if last == i and key in self.objs:
                self.close(key)

    def close_all(self):
        for key in list(self.objs):
            self.close(key)


def run_one(full, fn, keep, fixtures):
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


def _output_size(output):
    """The length of the output file so far, what Python holds flushed."""
    if output is None:
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    return os.fstat(output.fileno()).st_size


def run_group(tests, keep, say, output=None):
    """Runs one group's tests in order, telling say() each event. output:
    the file this process's stdout and stderr go to, whose new text a
    failure report gets."""
    fixtures = Fixtures(tests, keep, say)
    try:
        for i, (full, fn) in enumerate(tests):
            at = _output_size(output)
            outcome, secs, report = run_one(full, fn, keep, fixtures)
            if outcome == "FAIL" and output:
                _output_size(output)
                output.seek(at)
                text = output.read(200000).decode("utf-8", "replace").rstrip()
                if text:
                    report += "\n---- output of the test:\n" + text
            say({"ev": "test", "name": full, "outcome": outcome, "secs": secs,
                 "report": report})
            fixtures.close_after(i)
    finally:
        # Stopped early (Ctrl-C, SIGTERM): the shared fixtures go too.
        fixtures.close_all()


def worker_main(args):
    """A worker: reads groups (JSON lists of test names) on stdin, runs
    each, writes its events as JSON lines on the stdout it was given; what
    the tests print goes to its stderr (a file)."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    output = open(os.readlink("/proc/self/fd/2"), "rb")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the runner says when to stop

    def on_term(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one unwinding only
        sys.exit(128 + signum)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGALRM, _on_alarm)
    tests = dict(discover(args.folders, ""))

    def say(event):
        proto.write(json.dumps(event) + "\n")
    for line in sys.stdin:
        names = json.loads(line)
        run_group([(n, tests[n]) for n in names], args.keep, say, output)
        say({"ev": "done"})
    return 0


# ---- the pool (the runner) ----------------------------------------------------

class Worker:
    def __init__(self, n, argv, logdir, env):
        self.n = n
        self.log_path = os.path.join(logdir, "worker%d.log" % n)
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, env=env)
        self.buf = b""
        self.group = None  # the names of the group it runs
        self.reported = set()

    def give(self, names):
        self.group = names
        self.reported = set()
        self.proc.stdin.write((json.dumps(names) + "\n").encode())
        self.proc.stdin.flush()

    def tail(self, n=40):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def finish(self, timeout):
        """Closes its input (it exits when idle) and waits; SIGTERM, then
        SIGKILL, when it does not exit in time."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        for sig, wait in ((None, timeout), (signal.SIGTERM, STOP_GRACE), (signal.SIGKILL, 5)):
            if sig is not None and self.proc.poll() is None:
                self.proc.send_signal(sig)
            try:
                self.proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        self.log.close()


class Pool:
    """Runs groups on up to `jobs` workers; prints each event as it comes."""

    def __init__(self, args, logdir):
        self.args = args
        self.logdir = logdir
        self.counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
        self.times = {}  # name -> seconds, this run's
        self.test_seconds = 0.0
        self.workers = []
        self.made = 0

    def _start(self, jobs):
        argv = [sys.executable, os.path.abspath(__file__), "--worker",
                "--build", harness.BUILD] + (["--keep"] if self.args.keep else [])
        argv += [os.path.abspath(f) for f in self.args.folders]
        env = dict(os.environ)
        env["E2E_WORKER"] = str(self.made % jobs)
        env["E2E_WORKERS"] = str(jobs)
        env["PYTHONUNBUFFERED"] = "1"
        w = Worker(self.made, argv, self.logdir, env)
        self.made += 1
        return w

    def _event(self, w, ev):
        kind = ev["ev"]
        if kind == "setup":
            self.times[ev["name"]] = ev["secs"]
            print("SETUP %s %.2fs" % (ev["name"], ev["secs"]), flush=True)
        elif kind == "line":
            print(ev["text"], flush=True)
        elif kind == "fixture":
            self.counts["FAIL"] += 1
            print("FAIL %s\n%s" % (ev["name"], ev["report"].rstrip()), flush=True)
        elif kind == "test":
            w.reported.add(ev["name"])
            self.counts[ev["outcome"]] += 1
            self.times[ev["name"]] = ev["secs"]
            self.test_seconds += ev["secs"]
            print("%s %s %.2fs" % (ev["outcome"], ev["name"], ev["secs"]), flush=True)
            if ev["outcome"] == "FAIL" or (ev["outcome"] == "SKIP" and ev["report"]):
                print(ev["report"].rstrip(), flush=True)

    def _lost(self, w):
        """A worker that exited while it ran a group: its tests not yet
        reported fail."""
        code = w.proc.wait()
        for name in w.group or []:
            if name not in w.reported:
                self.counts["FAIL"] += 1
                print("FAIL %s 0.00s\nthe worker running it exited with %s; its last lines:\n%s"
                      % (name, code, w.tail()), flush=True)
        w.group = None

    def run(self, queue, jobs):
        """Runs the groups of queue (lists of names), at most jobs at once."""
        queue = list(queue)
        sel = selectors.DefaultSelector()
        busy = 0
        try:
            while queue or busy:
                while queue and busy < jobs:
                    idle = [w for w in self.workers if w.group is None]
                    if idle:
                        w = idle[0]
                    else:
                        w = self._start(jobs)
                        self.workers.append(w)
                        sel.register(w.proc.stdout, selectors.EVENT_READ, w)
                    try:
                        w.give(queue[0])
                    except OSError:  # it died while idle: forget it
                        sel.unregister(w.proc.stdout)
                        self.workers.remove(w)
                        w.finish(0)
                        continue
                    queue.pop(0)
                    busy += 1
                for key, _ in sel.select():
                    w = key.data
                    data = os.read(w.proc.stdout.fileno(), 65536)
                    if not data:
                        sel.unregister(w.proc.stdout)
                        self.workers.remove(w)
                        if w.group is not None:
                            self._lost(w)
                            busy -= 1
                        w.finish(0)
                        continue
                    w.buf += data
                    while b"\n" in w.buf:
                        line, w.buf = w.buf.split(b"\n", 1)
                        ev = json.loads(line)
                        if ev["ev"] == "done":
                            w.group = None
                            busy -= 1
                        else:
                            self._event(w, ev)
        finally:
            sel.close()

    def stop(self, timeout):
        """Every worker finishes: at once (timeout 0 and SIGTERM) when the
        run is stopped."""
        workers, self.workers = self.workers, []
        if timeout == 0:
            for w in workers:
                if w.proc.poll() is None:
                    w.proc.send_signal(signal.SIGTERM)
            timeout = STOP_GRACE
        for w in workers:
            w.finish(timeout)


def load_times(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def save_times(path, old, new):
    times = dict(old)
    times.update({k: round(v, 2) for k, v in new.items()})
    try:
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(times, f, indent=0, sort_keys=True)
        os.replace(path + ".tmp", path)
    except OSError:
        pass


def estimate(names, times):
    """A group's expected seconds: its tests' (and fixtures') last times; a
    group never timed counts as long, so that it starts early."""
    known = [times[n] for n in names if n in times]
    if not known:
        return 1000.0
    mods = {n.split("::")[0] for n in names}
    setup = sum(v for k, v in times.items()
                if k.split("::")[0] in mods and not k.split("::")[-1].startswith("test_"))
    return sum(known) + setup


def default_folders():
    """The folders of tests/ that hold test_*.py files, this one first."""
    tests = os.path.dirname(HERE)
    out = [HERE]
    for d in sorted(os.listdir(tests)):
        full = os.path.join(tests, d)
        if full != HERE and os.path.isdir(full) and any(
                f.startswith("test_") and f.endswith(".py") for f in os.listdir(full)):
            out.append(full)
    return out


def default_jobs():
    env = os.environ.get("E2E_JOBS")
    if env:
        return max(1, int(env))
    return 2 * (os.cpu_count() or 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build", help="build directory (default: build)")
    ap.add_argument("-k", dest="pattern", default="",
                    help="run only tests whose module::name contains PATTERN")
    ap.add_argument("-j", dest="jobs", type=int, default=None,
                    help="tests at once (default: $E2E_JOBS, else twice the CPUs)")
    ap.add_argument("--keep", action="store_true", help="keep the logs of passed tests")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("folders", nargs="*", default=default_folders(),
                    help="folders whose test_*.py to run (default: those of tests/ that "
                    "have some)")
    args = ap.parse_args()

    harness.BUILD = os.path.abspath(os.path.join(harness.ROOT, args.build)
                                    if not os.path.isabs(args.build) else args.build)
    if args.worker:
        harness.TEST_DEADLINES = True
        return worker_main(args)
    # Stopped from outside: unwind, so that the workers are stopped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    tests = discover(args.folders, args.pattern)
    if not tests:
        print("no test matches %r" % args.pattern)
        return 1
    jobs = max(1, args.jobs if args.jobs is not None else default_jobs())
    times_path = os.path.join(harness.BUILD, TIMES_FILE)
    old_times = load_times(times_path)
    parallel, serial = [], []
    for is_ser, names in groups(tests):
        (serial if is_ser else parallel).append(names)
    parallel.sort(key=lambda names: -estimate(names, old_times))
    logdir = tempfile.mkdtemp(prefix="rl-e2e-run-")
    pool = Pool(args, logdir)
    t_all = time.monotonic()
    stopped = True
    try:
        pool.run(parallel, min(jobs, len(parallel)) or 1)
        if serial:
            pool.stop(60)
            pool.run(serial, 1)
        stopped = False
    finally:
        if stopped:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            print("stopping the workers", flush=True)
        pool.stop(0 if stopped else 60)
        shutil.rmtree(logdir, ignore_errors=True)
    save_times(times_path, old_times, pool.times)
    counts = pool.counts
    summary = "%d passed, %d failed" % (counts["PASS"], counts["FAIL"])
    if counts["SKIP"]:
        summary += ", %d skipped" % counts["SKIP"]
    print("(%.1fs, the tests' own times add up to %.1fs; %d at once, %d alone)"
          % (time.monotonic() - t_all, pool.test_seconds, jobs,
             sum(len(g) for g in serial)))
    print(summary)
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
