"""Tests of scripts/test-watchdog: its parsers, running set and stall decision (pure, with
time passed in), plus a few runs of the real thing on tiny shell commands (about 2 s).

    python3 -m unittest discover -s scripts -p 'test_*.py'
"""

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "test-watchdog")


def load_watchdog():
    loader = importlib.machinery.SourceFileLoader("test_watchdog_script", SCRIPT)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


wd = load_watchdog()


def record(kind, payload):
    return json.dumps({"kind": kind, "payload": payload, "version": 0})


def event(kind, test_id=None, **extra):
    payload = {"kind": kind, "instant": {"absolute": 1.0, "since1970": 1.0}, "messages": []}
    if test_id is not None:
        payload["testID"] = test_id
    payload.update(extra)
    return record("event", payload)


F = "DemoTests.Hanging/waitsForever()/DemoTests.swift:21:6"
P = "DemoTests.Arithmetic/addsZero(_:)/DemoTests.swift:13:6"
S = "DemoTests.Hanging"


class StallDecisionTests(unittest.TestCase):
    def test_progress_within_the_stall_time(self):
        self.assertIsNone(wd.stall_decision(now=100, started=0, last_progress=90, stall=20,
                                            limit=3600))

    def test_stalled(self):
        self.assertEqual(wd.stall_decision(now=120, started=0, last_progress=90, stall=30,
                                           limit=3600), ("stall", 30))

    def test_over_the_limit_wins(self):
        self.assertEqual(wd.stall_decision(now=50, started=0, last_progress=0, stall=10,
                                           limit=50), ("limit", 50))

    def test_zero_disables(self):
        self.assertIsNone(wd.stall_decision(now=10 ** 6, started=0, last_progress=0, stall=0,
                                            limit=0))


class RunningSetTests(unittest.TestCase):
    def test_multiset_ends_the_oldest_start(self):
        running = wd.RunningSet()
        running.start(("test", "t()"), "t()", wd.TEST, None, 10)
        running.start(("test", "t()"), "t()", wd.TEST, None, 20)
        self.assertEqual(len(running), 2)
        self.assertTrue(running.end(("test", "t()")))
        self.assertEqual([row[0] for row in running.running(30)], [10])
        self.assertTrue(running.end(("test", "t()")))
        self.assertFalse(running.end(("test", "t()")))
        self.assertEqual(len(running), 0)

    def test_longest_first_and_suites_apart(self):
        running = wd.RunningSet()
        running.start(("suite", S), "Hanging", wd.SUITE, None, 0)
        running.start(("test", "a"), "a", wd.TEST, None, 5)
        running.start(("test", "b"), "b", wd.TEST, None, 1)
        self.assertEqual(running.running(10), [(9, "b", wd.TEST), (5, "a", wd.TEST)])
        self.assertEqual(running.running(10, kinds=(wd.SUITE,)), [(10, "Hanging", wd.SUITE)])

    def test_ending_a_test_drops_its_unended_cases(self):
        running = wd.RunningSet()
        running.start(("test", "f"), "f", wd.TEST, None, 0)
        running.start(("case", "f", "1"), "f [1]", wd.CASE, ("test", "f"), 1)
        running.start(("case", "f", "2"), "f [2]", wd.CASE, ("test", "f"), 1)
        running.end(("test", "f"))
        self.assertEqual(len(running), 0)


class EventStreamParserTests(unittest.TestCase):
    def setUp(self):
        self.parser = wd.EventStreamParser()

    def test_discovery_then_start_and_end(self):
        self.assertEqual(self.parser.feed(record("test", {"id": S, "kind": "suite",
                                                          "name": "Hanging"})), [])
        self.assertEqual(self.parser.feed(record("test", {
            "id": F, "kind": "function", "name": "waitsForever()",
            "displayName": "waits forever"})), [])
        self.assertEqual(self.parser.feed(event("testStarted", S)),
                         [("start", ("suite", S), "DemoTests.Hanging", wd.SUITE, None)])
        self.assertEqual(self.parser.feed(event("testStarted", F)), [(
            "start", ("test", F),
            'DemoTests.Hanging/waitsForever() "waits forever" (DemoTests.swift:21)',
            wd.TEST, None)])
        self.assertEqual(self.parser.feed(event("testEnded", F)), [("end", ("test", F))])
        self.assertEqual(self.parser.records, 5)

    def test_kind_guessed_without_discovery(self):
        actions = self.parser.feed(event("testStarted", F))
        self.assertEqual(actions[0][3], wd.TEST)
        self.assertEqual(self.parser.feed(event("testStarted", S))[0][3], wd.SUITE)

    def test_test_cases(self):
        case = {"displayName": "1", "id": "argumentIDs: [49]"}
        started = self.parser.feed(event("testCaseStarted", P, _testCase=case))
        self.assertEqual(started, [("start", ("case", P, "argumentIDs: [49]"),
                                    "DemoTests.Arithmetic/addsZero(_:) (DemoTests.swift:13)"
                                    " [arguments: 1]", wd.CASE, ("test", P))])
        self.assertEqual(self.parser.feed(event("testCaseEnded", P, _testCase=case)),
                         [("end", ("case", P, "argumentIDs: [49]"))])

    def test_progress_and_noise(self):
        self.assertEqual(self.parser.feed(event("runStarted")), [("progress",)])
        self.assertEqual(self.parser.feed(event("testSkipped", F)), [("progress",)])
        self.assertEqual(self.parser.feed(event("issueRecorded", F)), [])
        self.assertEqual(self.parser.feed("not json"), [])
        self.assertEqual(self.parser.feed("[1, 2]"), [])
        self.assertEqual(self.parser.records, 3)


class ConsoleLineTests(unittest.TestCase):
    def parse(self, line):
        return wd.parse_console_line(line)

    def test_starts(self):
        self.assertEqual(self.parse("◇ Test addsSmall() started."),
                         ("start", ("test", "addsSmall()"), "addsSmall()", wd.TEST, None))
        self.assertEqual(self.parse('◇ Test "adds negatives" started.')[1],
                         ("test", '"adds negatives"'))
        self.assertEqual(self.parse("◇ Suite Arithmetic started.")[1:4],
                         (("suite", "Arithmetic"), "Arithmetic", wd.SUITE))
        self.assertEqual(self.parse('◇ Suite "Display name" started.')[1],
                         ("suite", '"Display name"'))

    def test_ends(self):
        for line, key in [
                ("✔ Test addsSmall() passed after 0.001 seconds.", ("test", "addsSmall()")),
                ('✔ Test "adds negatives" passed after 0.001 seconds.',
                 ("test", '"adds negatives"')),
                ("✔ Test addsZero(_:) with 3 test cases passed after 0.001 seconds.",
                 ("test", "addsZero(_:)")),
                ("✘ Test failsWhenAsked() failed after 0.001 seconds with 1 issue.",
                 ("test", "failsWhenAsked()")),
                ("✔ Test k() passed after 0.1 seconds with 1 known issue.", ("test", "k()")),
                ("✘ Suite Arithmetic failed after 0.002 seconds with 1 issue.",
                 ("suite", "Arithmetic"))]:
            self.assertEqual(self.parse(line), ("end", key), line)

    def test_test_cases(self):
        action = self.parse("◇ Test case passing 1 argument x → 1 to addsZero(_:) started.")
        self.assertEqual(action, ("start", ("case", "addsZero(_:)", "1 argument x → 1"),
                                  "addsZero(_:) [1 argument x → 1]", wd.CASE,
                                  ("test", "addsZero(_:)")))
        action = self.parse('◇ Test case passing 2 arguments a → "to x", b → 2 to "f g" started.')
        self.assertEqual(action[1], ("case", '"f g"', '2 arguments a → "to x", b → 2'))

    def test_colors_and_other_lines(self):
        self.assertEqual(self.parse("\x1b[90m◇\x1b[0m Test addsSmall() started.")[1],
                         ("test", "addsSmall()"))
        for line in ["◇ Test run started.",
                     "✔ Test run with 7 tests in 2 suites passed after 0.001 seconds.",
                     "✘ Test f() recorded an issue at A.swift:1:2: Expectation failed",
                     "↳ Testing Library Version: 6.3.1",
                     "Test Suite 'All tests' started at 2026-01-01 12:00:00.000",
                     "Test addsSmall() started.",    # not at the start of a console line
                     ""]:
            self.assertIsNone(self.parse(line), line)
        self.assertEqual(self.parse("➜ Test spins() skipped."), ("progress",))


class MonitorTests(unittest.TestCase):
    def test_output_is_progress_only_before_the_first_test(self):
        monitor = wd.Monitor(now=0, stall=10, limit=100)
        monitor.output(now=8)
        self.assertIsNone(monitor.verdict(now=15))
        monitor.console_line("◇ Test t() started.", now=16)
        monitor.output(now=25)
        self.assertEqual(monitor.verdict(now=26), ("stall", 10))
        monitor.console_line("✔ Test t() passed after 10 seconds.", now=26)
        self.assertIsNone(monitor.verdict(now=30))

    def test_event_stream_is_preferred_once_seen(self):
        monitor = wd.Monitor(now=0, stall=10, limit=100)
        monitor.console_line("◇ Test waitsForever() started.", now=1)
        self.assertEqual(monitor.source, "console output")
        self.assertEqual([row[1] for row in monitor.running_set.running(2)], ["waitsForever()"])
        monitor.event_line(event("testStarted", F), now=1)
        self.assertEqual(monitor.source, "Swift Testing event stream")
        self.assertEqual([row[1] for row in monitor.running_set.running(2)],
                         ["DemoTests.Hanging/waitsForever() (DemoTests.swift:21)"])

    def test_garbage_on_the_event_stream_is_not_progress(self):
        monitor = wd.Monitor(now=0, stall=10, limit=100)
        monitor.event_line("garbage", now=9)
        self.assertFalse(monitor.events_seen)
        self.assertEqual(monitor.verdict(now=10), ("stall", 10))


class CommandTests(unittest.TestCase):
    def test_event_stream_flags_go_after_test(self):
        self.assertEqual(wd.event_stream_command(["swift", "test", "--skip-build"], "/p"),
                         ["swift", "test", "--event-stream-output-path", "/p",
                          "--event-stream-version", "0", "--skip-build"])
        self.assertEqual(wd.event_stream_command(["/opt/swift/usr/bin/swift-test"], "/p")[1:3],
                         ["--event-stream-output-path", "/p"])

    def test_no_event_stream_when_not_a_test_run(self):
        for command in (["swift", "build"], ["make", "test"], ["swift", "test", "list"],
                        ["swift", "test", "--list-tests"], ["swift", "test", "--help"],
                        ["swift", "test", "--event-stream-output-path=/x"], ["swift"]):
            self.assertIsNone(wd.event_stream_command(command, "/p"), command)

    def test_line_buffering_only_for_swift_test(self):
        self.assertEqual(wd.line_buffered_command(["swift", "test"], "/usr/bin/stdbuf"),
                         ["/usr/bin/stdbuf", "-oL", "-eL", "swift", "test"])
        self.assertEqual(wd.line_buffered_command(["swift", "test"], None), ["swift", "test"])
        self.assertEqual(wd.line_buffered_command(["sh"], "/usr/bin/stdbuf"), ["sh"])

    def test_arguments(self):
        options, command = wd.parse_arguments(["--stall", "20", "--", "swift", "test", "--x"])
        self.assertEqual((options.stall, options.limit, command),
                         (20, 3600, ["swift", "test", "--x"]))
        options, command = wd.parse_arguments(["--limit", "5", "make", "-k"])
        self.assertEqual((options.limit, command), (5, ["make", "-k"]))


class ProcTests(unittest.TestCase):
    def test_parse_stat_with_parentheses_in_comm(self):
        text = ("42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 3 0 "
                "100 0 0 18446744073709551615")
        info = wd.parse_stat(text)
        self.assertEqual((info["pid"], info["comm"], info["state"], info["ppid"], info["sid"],
                          info["ticks"], info["threads"]), (42, "a) b (c)", "S", 1, 42, 200, 3))
        self.assertIsNone(wd.parse_stat("garbage"))

    def test_tree_order(self):
        procs = {pid: {"ppid": ppid} for pid, ppid in
                 [(10, 1), (11, 10), (12, 11), (13, 10), (20, 1)]}
        self.assertEqual(wd.tree_order(procs, [10]), [(0, 10), (1, 11), (2, 12), (1, 13)])

    def test_sigterm_disposition(self):
        self.assertEqual(wd.sigterm_disposition("SigBlk:\tfffffffe3bfbea27\nSigIgn:\t0\n"),
                         "blocked")
        self.assertEqual(wd.sigterm_disposition("SigBlk:\t0\nSigIgn:\t4000\n"), "ignored")
        self.assertIsNone(wd.sigterm_disposition("SigBlk:\t0\nSigIgn:\t6\n"))


class RunTests(unittest.TestCase):
    """The real watchdog on small shell commands."""

    def run_watchdog(self, *args, timeout=20):
        started = time.monotonic()
        result = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True,
                                text=True, timeout=timeout)
        return result, time.monotonic() - started

    def test_exit_code_and_output_pass_through(self):
        result, _ = self.run_watchdog("--", "sh", "-c", "echo out; echo err >&2; exit 3")
        self.assertEqual((result.returncode, result.stdout, result.stderr), (3, "out\n", "err\n"))

    def test_stall_kills_the_whole_tree(self):
        with tempfile.TemporaryDirectory() as tmp:
            pidfile = os.path.join(tmp, "pid")
            result, seconds = self.run_watchdog(
                "--stall", "0.5", "--kill-grace", "2", "--", "sh", "-c",
                "echo '◇ Test stuck() started.'; sleep 60 & echo $! > %s; wait" % pidfile)
            self.assertEqual(result.returncode, 124, result.stderr)
            self.assertLess(seconds, 8)
            self.assertIn("watchdog: stalled: no test started or ended", result.stderr)
            self.assertIn("stuck()", result.stderr)
            self.assertIn("sleep 60", result.stderr)
            self.assertTrue(result.stderr.rstrip().endswith("exit 124"), result.stderr)
            self.assertFalse(alive(read_pid(pidfile)))

    def test_leftover_holding_the_pipe_does_not_hold_the_watchdog(self):
        with tempfile.TemporaryDirectory() as tmp:
            pidfile = os.path.join(tmp, "pid")
            result, seconds = self.run_watchdog(
                "--pipe-grace", "0.3", "--", "sh", "-c",
                "sleep 60 & echo $! > %s; echo done" % pidfile)
            self.assertEqual((result.returncode, result.stdout, result.stderr), (0, "done\n", ""))
            self.assertLess(seconds, 8)
            self.assertFalse(alive(read_pid(pidfile)))


def read_pid(path):
    with open(path) as f:
        return int(f.read())


def alive(pid):
    """True if `pid` is running (a zombie nobody reaped does not count)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except OSError:
        return False


if __name__ == "__main__":
    unittest.main()
