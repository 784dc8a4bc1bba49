#!/usr/bin/env python3
"""Runs every example of README.md and of `imcli --help` against a running gateway, as written.

    run_examples.py --imcli .build/debug/imcli --readme README.md --cwd DIR [--timeout 20]

DIR holds run/imgw.yaml of a running gateway (scripts/run-config, then `imgw serve --config
DIR/run/imgw.yaml`: what `make run` does); the caller starts and stops imgw. The examples run
with DIR as the working directory, so imcli finds run/imgw.yaml (secret, ports, API key) by
itself.

The examples:
- every line of `imcli --help`'s discussion that starts with `  imcli ` (run as written, with
  the --imcli binary's directory first on PATH);
- every command line of README.md's ```sh blocks that starts with `.build/debug/imcli` (replaced
  by the --imcli path, nothing else) or `mosquitto_sub` (its `-p PORT` replaced by the
  configuration's embedded_broker.port, said in the output).
Comments (`# ...`) are stripped. The README's examples run first, then the help's, each set as a
user would in several terminals: its long-running commands (listen, presence, location
share/watch, sub, mosquitto_sub) started first, in their order, each waited for until it says it
is ready; then the short ones in their order, each of which must exit 0; then the long-running
ones are stopped with SIGINT (Ctrl-C; imcli must exit 0), SIGKILL after a few seconds.

Every example is checked for the effect the README or the help promises (bob's listen shows
`alice: hi`, sub shows `im/t/news hello`, ...). An example of a shape this script does not know
FAILS (it is still run, with a deadline, to say what it did): a new example in the README or the
help fails here until a handler is added to SHAPES.

Prints `PASS <example>` or `FAIL <example>: why` per example, then `N passed, N failed`; exits 1
on any failure. Only the standard library; every wait has a deadline (no sleeps to synchronise).
"""

import argparse
import base64
import datetime
import hashlib
import hmac
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time

STOP_GRACE = 5.0  # seconds between SIGINT (Ctrl-C) and SIGKILL


# ----------------------------------------------------------------------------------------------
# Configuration (run/imgw.yaml, as scripts/run-config writes it: a plain nested mapping)


def read_yaml_scalars(path):
    """The scalar values of a simple YAML mapping, by dotted key (`embedded_broker.port`)."""
    values = {}
    stack = []  # (indent, key)
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = strip_comment(raw.rstrip("\n"))
            if not line.strip():
                continue
            indent = len(line) - len(line.lstrip(" "))
            body = line.strip()
            if body.startswith("- "):  # a list item: keep it under its own (unique) key
                body = body[2:]
                indent += 2
            m = re.match(r"^([A-Za-z0-9_.-]+):(?:\s+(.*))?$", body)
            if not m:
                continue
            while stack and stack[-1][0] >= indent:
                stack.pop()
            key, value = m.group(1), (m.group(2) or "").strip()
            if value == "":
                stack.append((indent, key))
                continue
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            values.setdefault(".".join([k for _, k in stack] + [key]), value)
    return values


# ----------------------------------------------------------------------------------------------
# Collecting the examples


def strip_comment(line):
    """The line up to its first `#` that starts a shell comment (after whitespace, unquoted)."""
    quote = None
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 1
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "\\":
            i += 1
        elif c == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
        i += 1
    return line.rstrip()


class Example:
    def __init__(self, source, text, command, phase, index):
        self.source = source      # "README.md:36" or "imcli --help"
        self.text = text          # the example as written, without its comment
        self.command = command    # what runs (sh -c)
        self.phase = phase        # "README.md" or "imcli --help"
        self.index = index        # order within the phase
        self.argv = shlex.split(command)
        self.notes = []
        self.failures = []
        self.shape = None
        self.params = {}
        self.proc = None
        self.done = False         # its verdict is complete

    def label(self):
        return f"[{self.source}] {self.text}"

    def fail(self, why):
        self.failures.append(why)


def collect_help_examples(imcli, env, timeout):
    out = subprocess.run([imcli, "--help"], capture_output=True, text=True, timeout=timeout, env=env)
    if out.returncode != 0:
        raise SystemExit(f"error: {imcli} --help exited {out.returncode}: {out.stderr.strip()}")
    lines = []
    for line in out.stdout.splitlines():
        if line.startswith("USAGE:"):
            break  # the discussion ends where the usage begins
        if line.startswith("  imcli "):
            lines.append(strip_comment(line.strip()))
    return lines, out.stdout


def collect_readme_examples(readme):
    """(line number, command) of the README's ```sh blocks' imcli and mosquitto_sub lines."""
    found = []
    fence = None
    with open(readme, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            stripped = line.rstrip("\n")
            m = re.match(r"^\s*(```+|~~~+)\s*([A-Za-z0-9_+-]*)", stripped)
            if m:
                if fence is None:
                    fence = m.group(2).lower() or "-"
                else:
                    fence = None
                continue
            if fence in ("sh", "shell", "bash"):
                body = stripped.strip()
                if body.startswith(".build/debug/imcli") or body.startswith("mosquitto_sub"):
                    found.append((number, strip_comment(body)))
    return found


# ----------------------------------------------------------------------------------------------
# Processes


class Proc:
    """A command run through sh -c 'exec ...' in a session of its own; its output lines kept."""

    def __init__(self, command, cwd, env):
        self.command = command
        self.lines = []  # (stream, text)
        self.cond = threading.Condition()
        self.started = time.monotonic()
        self.popen = subprocess.Popen(
            ["/bin/sh", "-c", "exec " + command], cwd=cwd, env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True)
        self.readers = [threading.Thread(target=self._read, args=(self.popen.stdout, "out"), daemon=True),
                        threading.Thread(target=self._read, args=(self.popen.stderr, "err"), daemon=True)]
        for t in self.readers:
            t.start()
        self.interrupted = False
        self.killed = False

    def _read(self, pipe, stream):
        for raw in iter(pipe.readline, b""):
            with self.cond:
                self.lines.append((stream, raw.decode("utf-8", "replace").rstrip("\n")))
                self.cond.notify_all()
        pipe.close()
        with self.cond:
            self.cond.notify_all()

    @property
    def pid(self):
        return self.popen.pid

    def running(self):
        return self.popen.poll() is None

    def mark(self):
        with self.cond:
            return len(self.lines)

    def wait_line(self, pattern, timeout, since=0, stream=None, predicate=None):
        """The first match of `pattern` in a line from `since` on, waiting up to `timeout` s."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self.cond:
            position = since
            while True:
                while position < len(self.lines):
                    s, text = self.lines[position]
                    position += 1
                    if stream and s != stream:
                        continue
                    m = regex.search(text)
                    if m and (predicate is None or predicate(m)):
                        return m
                left = deadline - time.monotonic()
                if left <= 0 or (self.popen.poll() is not None and not any(t.is_alive() for t in self.readers)):
                    return None
                self.cond.wait(min(left, 0.2))

    def wait_exit(self, timeout):
        try:
            code = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        for t in self.readers:
            t.join(timeout=2)
        return code

    def stop(self):
        """Ctrl-C (SIGINT to its process group), SIGKILL after STOP_GRACE s; the exit code."""
        if self.running():
            self.interrupted = True
            try:
                os.killpg(self.popen.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
            code = self.wait_exit(STOP_GRACE)
            if code is not None:
                return code
            self.killed = True
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return self.wait_exit(STOP_GRACE)

    def text(self, stream=None, since=0):
        with self.cond:
            return [t for s, t in self.lines[since:] if stream is None or s == stream]

    def tail(self, n=6):
        lines = [f"{'stderr' if s == 'err' else 'stdout'}| {t}" for s, t in self.lines[-n:]]
        return ("\n      " + "\n      ".join(lines)) if lines else " (no output)"


def tcp_established_to(pid, port):
    """Whether process `pid` has an established TCP connection to `port` (Linux /proc)."""
    try:
        inodes = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            m = re.match(r"socket:\[(\d+)\]", target)
            if m:
                inodes.add(m.group(1))
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                with open(table) as f:
                    next(f)
                    for row in f:
                        cols = row.split()
                        remote, state, inode = cols[2], cols[3], cols[9]
                        if state == "01" and inode in inodes and int(remote.split(":")[1], 16) == port:
                            return True
            except OSError:
                continue
    except OSError:
        return None
    return False


# ----------------------------------------------------------------------------------------------
# Parsing an imcli example into a shape

# (subcommand path, options that take a value (all required), flags, positional arguments:
# (min, max or None)), long-running, handler name.
SHAPES = [
    (("listen",), {"--as"}, 0, 0, True, "listen"),
    (("presence",), {"--as"}, 1, None, True, "presence"),
    (("location", "share"), {"--as", "--with", "--lat", "--lon"}, 0, 0, True, "location_share"),
    (("location", "watch"), {"--as"}, 1, None, True, "location_watch"),
    (("sub",), {"--as"}, 1, None, True, "sub"),
    (("send",), {"--as", "--to"}, 1, None, False, "send"),
    (("send",), {"--as", "--to", "--id"}, 1, None, False, "send"),
    (("typing",), {"--as", "--to"}, 0, 0, False, "typing"),
    (("group", "send"), {"--as", "--group"}, 1, None, False, "group_send"),
    (("pub",), {"--as"}, 2, None, False, "pub"),
    (("history",), {"--as", "--with"}, 0, 0, False, "history"),
    (("conversations",), {"--as"}, 0, 0, False, "conversations"),
    (("read",), {"--as", "--with"}, 0, 0, False, "read"),
    (("delete",), {"--as"}, 1, 1, False, "delete"),
    (("token",), set(), 1, 1, False, "token"),
    (("admin", "presence"), set(), 1, 1, False, "admin_presence"),
    (("admin", "group", "create"), set(), 2, None, False, "admin_group_create"),
]
SUBCOMMAND_PATHS = sorted({s[0] for s in SHAPES}, key=len, reverse=True)
# The mosquitto_sub line of the README (its port replaced): the observer watching im/#.
MOSQUITTO_SUB = re.compile(
    r"^mosquitto_sub -h 127\.0\.0\.1 -p \d+ -u imgw-observer -P \"\$\(cat run/broker/observer\.password\)\" "
    r"-i imgw-observer -v -t 'im/#'$")


def classify(example):
    argv = example.argv
    if argv and argv[0] == "mosquitto_sub":
        if MOSQUITTO_SUB.match(example.command):
            example.shape = ("mosquitto_sub", True, "mosquitto_sub")
            return True
        example.fail("unknown example shape (a mosquitto_sub line other than the README's observer one); "
                     "add a handler to SHAPES in Tests/examples/run_examples.py")
        return False
    args = argv[1:]
    path = next((p for p in SUBCOMMAND_PATHS if tuple(args[:len(p)]) == p), None)
    if path is None:
        example.fail(f"unknown example shape (subcommand {' '.join(a for a in args[:2] if not a.startswith('-'))!r}); "
                     "add a handler to SHAPES in Tests/examples/run_examples.py")
        return False
    options, positional, rest = {}, [], args[len(path):]
    i = 0
    while i < len(rest):
        a = rest[i]
        if a.startswith("--") and i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            options[a] = rest[i + 1]
            i += 2
        elif a.startswith("-"):
            options[a] = None
            i += 1
        else:
            positional.append(a)
            i += 1
    for shape_path, needed, low, high, long_running, handler in SHAPES:
        if shape_path != path or set(options) != needed or any(v is None for v in options.values()):
            continue
        if len(positional) < low or (high is not None and len(positional) > high):
            continue
        example.shape = (" ".join(path), long_running, handler)
        example.params = {"options": options, "args": positional}
        return True
    example.fail(f"unknown example shape ({' '.join(path)} with options {sorted(options) or 'none'} and "
                 f"{len(positional)} argument(s)); add a handler to SHAPES in Tests/examples/run_examples.py")
    return False


# ----------------------------------------------------------------------------------------------
# Running one set of examples (the README's, or the help's)


class Phase:
    def __init__(self, name, examples, runner):
        self.name = name
        self.examples = examples
        self.r = runner
        self.running = []          # long-running examples started
        self.sent = []             # (time, from, to-or-None, group-or-None, text, id-or-None)
        self.groups = {}           # group -> members (from admin group create)

    # -- helpers

    def live(self, handler, user=None):
        return [e for e in self.running if e.shape[2] == handler and e.proc.running()
                and (user is None or e.params["options"].get("--as") == user)]

    def expect(self, example, target, pattern, what, since, predicate=None):
        """Waits for `pattern` in the long-running `target`'s stdout; fails `example` if absent."""
        m = target.proc.wait_line(pattern, self.r.timeout, since=since, stream="out", predicate=predicate)
        if m:
            example.notes.append(f"{target.text!r} showed: {m.string}")
            return m
        example.fail(f"{target.text!r} did not show {what} within {self.r.timeout:g} s;{target.proc.tail()}")
        return None

    def run_short(self, example):
        """Runs a short example; its Proc if it exited 0 within the deadline, else None."""
        proc = Proc(example.command, self.r.cwd, self.r.env)
        self.r.procs.append(proc)
        example.proc = proc
        code = proc.wait_exit(self.r.timeout)
        if code is None:
            proc.stop()
            example.fail(f"did not exit within {self.r.timeout:g} s (a long-running command? then give its shape "
                         f"long_running in SHAPES);{proc.tail()}")
            return None
        example.exit_code = code
        if code != 0:
            example.fail(f"exited {code};{proc.tail()}")
            return None
        return proc

    # -- long-running examples: start (and wait until ready)

    def start(self, example):
        proc = Proc(example.command, self.r.cwd, self.r.env)
        self.r.procs.append(proc)
        example.proc = proc
        self.r.progress(f"started (pid {proc.pid}): {example.text}")
        handler = example.shape[2]
        if handler == "mosquitto_sub":
            deadline = time.monotonic() + self.r.timeout
            while time.monotonic() < deadline and proc.running():
                state = tcp_established_to(proc.pid, self.r.broker_port)
                if state is None or state:
                    break
                time.sleep(0.05)  # polls the connection table, until the deadline
            if not proc.running() or tcp_established_to(proc.pid, self.r.broker_port) is False:
                example.fail(f"not connected to the broker on port {self.r.broker_port} within "
                             f"{self.r.timeout:g} s (exit {proc.popen.poll()});{proc.tail()}")
                return False
            self.running.append(example)
            return True
        ready = {
            "listen": r"^imcli: listening as \S+ on .*\(Ctrl-C to stop\)",
            "presence": r"^imcli: watching .*\(Ctrl-C to stop\)",
            "location_share": r"^imcli: \S+ shares .*\(Ctrl-C to stop\)",
            "location_watch": r"^imcli: watching the positions of .*\(Ctrl-C to stop\)",
            "sub": r"^imcli: receiving publications as .*\(Ctrl-C to stop\)",
        }[handler]
        if not proc.wait_line(ready, self.r.timeout, stream="err"):
            example.fail(f"did not say it was ready (Ctrl-C to stop) within {self.r.timeout:g} s "
                         f"(exit {proc.popen.poll()});{proc.tail()}")
            return False
        self.running.append(example)
        return True

    # -- long-running examples: their own promise, checked before they are stopped

    def check_long(self, e):
        o, a = e.params.get("options", {}), e.params.get("args", [])
        p = e.proc
        h = e.shape[2]
        if h == "listen":
            if not p.text("out"):
                e.fail("printed no event line")
        elif h == "presence":
            for user in a:
                m = p.wait_line(rf"^\[presence\] {re.escape(user)}/\S+ (online|offline)", self.r.timeout, stream="out")
                if m:
                    about = [t for t in p.text("out") if t.startswith(f"[presence] {user}/")]
                    e.notes.append(f"showed {len(about)} line(s) about {user}'s devices: " + "; ".join(about[:2] + (["..."] if len(about) > 4 else []) + about[2:][-2:]))
                else:
                    e.fail(f"printed no line about {user}'s devices within {self.r.timeout:g} s;{p.tail()}")
        elif h == "location_share":
            m = p.wait_line(r"shares its position (\S+),(\S+) with", 0, stream="err")
            if not m or abs(float(m.group(1)) - float(o["--lat"])) > 1e-9 or abs(float(m.group(2)) - float(o["--lon"])) > 1e-9:
                e.fail(f"did not report sharing {o['--lat']},{o['--lon']};{p.tail()}")
        elif h == "location_watch":
            me = o["--as"]
            for user in a:
                shares = [s for s in self.examples if s.shape and s.shape[2] == "location_share"
                          and s.params["options"]["--as"] == user
                          and me in s.params["options"]["--with"].split(",")]
                if not shares:
                    e.fail(f"no example shares {user}'s position with {me}: nothing to watch")
                    continue
                lat, lon = float(shares[0].params["options"]["--lat"]), float(shares[0].params["options"]["--lon"])
                m = p.wait_line(rf"^\[location\] {re.escape(user)}/\S+ (-?[0-9.]+),(-?[0-9.]+)$", self.r.timeout,
                                stream="out", predicate=lambda m: abs(float(m.group(1)) - lat) < 1e-6
                                and abs(float(m.group(2)) - lon) < 1e-6)
                if m:
                    e.notes.append(f"showed: {m.string}")
                else:
                    e.fail(f"did not print [location] {user}/... {lat},{lon} within {self.r.timeout:g} s;{p.tail()}")
        elif h == "sub":
            if not any(x.shape and x.shape[2] == "pub" for x in self.examples):
                e.notes.append("no pub example in this set: nothing to receive")
        elif h == "mosquitto_sub":
            inbox = [s for s in self.sent if s[2] is not None]
            if not inbox:
                e.fail("no send example in this set: no im/u/USER/inbox message to show")
            for _, sender, to, _, text, _ in inbox:
                def is_message(m, sender=sender, to=to, text=text):
                    try:
                        body = json.loads(m.group(1))
                    except ValueError:
                        return False
                    return body.get("from") == sender and body.get("to") == to and body.get("text") == text
                m = p.wait_line(rf"^im/u/{re.escape(to)}/inbox (\{{.*\}})$", self.r.timeout, stream="out",
                                predicate=is_message)
                if m:
                    e.notes.append(f"showed: {m.string}")
                else:
                    e.fail(f"did not show im/u/{to}/inbox JSON of {sender}'s {text!r} within "
                           f"{self.r.timeout:g} s;{p.tail()}")
            users = sorted({s[1] for s in inbox} | {s[2] for s in inbox})
            def online(m):
                try:
                    return json.loads(m.group(1)).get("status") == "online"
                except ValueError:
                    return False
            for user in users:  # the README: bob's and alice's presence going online
                m = p.wait_line(rf"^im/u/{re.escape(user)}/presence/\S+ (\{{.*\}})$", self.r.timeout, stream="out",
                                predicate=online)
                if m:
                    e.notes.append(f"showed: {m.string}")
                else:
                    e.fail(f"did not show {user}'s presence going online (im/u/{user}/presence/DEVICE "
                           f"{{...\"status\":\"online\"...}});{p.tail()}")

    # -- short examples

    def check_short(self, e):
        o, a = e.params["options"], e.params["args"]
        h = e.shape[2]
        marks = {id(x): x.proc.mark() for x in self.running}
        began = time.time()
        if h == "admin_group_create":
            proc = Proc(e.command, self.r.cwd, self.r.env)
            self.r.procs.append(proc)
            e.proc = proc
            code = proc.wait_exit(self.r.timeout)
            if code is None:
                proc.stop()
                e.fail(f"did not exit within {self.r.timeout:g} s;{proc.tail()}")
                return
            self.groups[a[0]] = a[1:]
            if code == 0:
                return
            if code == 2 and any("answered 409" in t for t in proc.text("err")):
                e.notes.append("409: the group already exists (this gateway ran the examples before); accepted")
                return
            e.fail(f"exited {code};{proc.tail()}")
            return
        proc = self.run_short(e)
        if proc is None:
            return
        out = proc.text("out")
        if h == "send":
            sender, to, text = o["--as"], o["--to"], " ".join(a)
            m = re.match(r"^sent (\S+) to (\S+) \(server time (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z\)$",
                         out[0] if len(out) == 1 else "")
            if not m or m.group(2) != to or (o.get("--id") and m.group(1) != o["--id"]):
                e.fail(f"did not print 'sent ID to {to} (server time ...)';{proc.tail()}")
                return
            self.sent.append((began, sender, to, None, text, m.group(1)))
            stamp = datetime.datetime.fromisoformat(m.group(3)).replace(tzinfo=datetime.timezone.utc).timestamp()
            if o.get("--id") and stamp < began - 2:
                # The gateway dedups by message id: the example ran against this gateway before.
                e.notes.append(f"a repeat of {m.group(1)}, first sent at {m.group(3)}Z (the examples ran on this gateway "
                               "before; the gateway dedups by id): not delivered again")
                self.r.repeats.add(m.group(1))
                return
            for target in self.live("listen", to):
                self.expect(e, target, rf"^{re.escape(sender)}: {re.escape(text)}$", f"'{sender}: {text}'",
                            marks[id(target)])
        elif h == "group_send":
            sender, group, text = o["--as"], o["--group"], " ".join(a)
            self.sent.append((began, sender, None, group, text, None))
            members = self.groups.get(group)
            if members is None:
                e.notes.append(f"no example of this set creates {group}: its members are not known here")
            for member in members or []:
                if member == sender:
                    continue
                for target in self.live("listen", member):
                    self.expect(e, target, rf"^{re.escape(sender)} in {re.escape(group)}: {re.escape(text)}$",
                                f"'{sender} in {group}: {text}'", marks[id(target)])
        elif h == "typing":
            sender, to = o["--as"], o["--to"]
            for target in self.live("listen", to):
                self.expect(e, target, rf"^\[typing\] {re.escape(sender)} is typing$", f"'[typing] {sender} is typing'",
                            marks[id(target)])
        elif h == "pub":
            topic, text = a[0], " ".join(a[1:])
            full = topic if topic.startswith("im/") else "im/t/" + topic
            subs = [s for s in self.live("sub") if topic in s.params["args"] or full in s.params["args"]]
            if not subs:
                e.notes.append("no sub example of this set listens to it")
            for target in subs:
                self.expect(e, target, rf"^{re.escape(full)} {re.escape(text)}$", f"'{full} {text}'", marks[id(target)])
        elif h == "history":
            me, peer = o["--as"], o["--with"]
            rows = [re.match(r"^(\d+) (\S+)(?: to \S+)?: (.*)$", line) for line in out]
            if not out or not all(rows):
                e.fail(f"printed {'nothing' if not out else 'lines that are not OFFSET WHO: TEXT'};{proc.tail()}")
                return
            offsets = [int(m.group(1)) for m in rows]
            if offsets != sorted(offsets):
                e.fail(f"not oldest first (offsets {offsets})")
            ours = [s for s in self.r.all_sent if {s[1], s[2]} == {me, peer}]
            if ours:
                _, sender, _, _, text, _ = ours[-1]
                who = "you" if sender == me else sender
                if not any(m.group(2) == who and m.group(3) == text for m in rows):
                    e.fail(f"does not show the last message of the conversation this run sent ({who}: {text});"
                           f"{proc.tail()}")
            e.notes.append(f"{len(rows)} line(s), last: {out[-1]}")
        elif h == "conversations":
            me = o["--as"]
            if not out:
                e.fail("printed no conversation")
                return
            names = []
            for line in out:
                m = re.match(r"^(\S+)( \(group\))?( \(\d+ unread\))? ", line + " ")
                if not m:
                    e.fail(f"a line that is not a conversation: {line!r}")
                    return
                names.append(("group:" if m.group(2) else "user:") + m.group(1))
            latest = {}
            for t, sender, to, group, _, _ in self.r.all_sent:
                if group and me in self.r.all_groups.get(group, []):
                    latest["group:" + group] = t
                elif me in (sender, to) and to is not None:
                    latest["user:" + (to if sender == me else sender)] = t
            for name in latest:
                if name not in names:
                    e.fail(f"does not list {name.split(':', 1)[1]}, a conversation of {me} this run made;{proc.tail()}")
            listed = [n for n in names if n in latest]
            if listed != sorted(listed, key=lambda n: latest[n], reverse=True):
                e.fail(f"not most recent first: {listed}")
            e.notes.append(f"{len(out)} conversation(s): {'; '.join(out[:3])}")
        elif h == "read":
            me, peer = o["--as"], o["--with"]
            check = subprocess.run([self.r.imcli, "conversations", "--as", me, "--json"], cwd=self.r.cwd,
                                   env=self.r.env, capture_output=True, text=True, timeout=self.r.timeout)
            rows = [json.loads(line) for line in check.stdout.splitlines() if line.startswith("{")]
            row = next((r for r in rows if r.get("with") == peer), None)
            if check.returncode != 0 or row is None:
                e.fail(f"`imcli conversations --as {me} --json` (the check) exited {check.returncode} "
                       f"or lists no conversation with {peer}: {check.stdout.strip()} {check.stderr.strip()}")
            elif row.get("unread") != 0:
                e.fail(f"the conversation with {peer} still has {row.get('unread')} unread")
            else:
                e.notes.append(f"conversations --json then shows {peer} with 0 unread, read through {row.get('read_through')}")
        elif h == "delete":
            me, mid = o["--as"], a[0]
            sent = [s for s in self.r.all_sent if s[5] == mid and s[1] == me]
            if not sent:
                e.fail(f"no example before it sent a message with --id {mid} as {me}")
                return
            to = sent[-1][2]
            if mid in self.r.repeats:
                e.notes.append(f"{mid} was deleted by an earlier run: no [deleted] event this time")
            else:
                for target in self.live("listen", to):
                    self.expect(e, target, rf"^\[deleted\] {re.escape(me)}'s message {re.escape(mid)}$",
                                f"'[deleted] {me}'s message {mid}'", marks[id(target)])
            check = subprocess.run([self.r.imcli, "history", "--as", me, "--with", to, "--json"], cwd=self.r.cwd,
                                   env=self.r.env, capture_output=True, text=True, timeout=self.r.timeout)
            rows = [json.loads(line) for line in check.stdout.splitlines() if line.startswith("{")]
            if not any(r.get("type") == "deleted" and r.get("id") == mid for r in rows):
                e.fail(f"`imcli history --as {me} --with {to} --json` (the check) does not show {mid} deleted "
                       f"(exit {check.returncode}): {check.stdout.strip()[-300:]} {check.stderr.strip()}")
            else:
                e.notes.append(f"history --json then shows {mid} deleted")
        elif h == "token":
            user = a[0]
            token = out[0].strip() if len(out) == 1 else ""
            try:
                head, payload, signature = token.split(".")
                pad = lambda s: s + "=" * (-len(s) % 4)
                claims = json.loads(base64.urlsafe_b64decode(pad(payload)))
                expected = hmac.new(self.r.jwt_secret.encode(), f"{head}.{payload}".encode(), hashlib.sha256).digest()
                good = hmac.compare_digest(expected, base64.urlsafe_b64decode(pad(signature)))
            except (ValueError, TypeError) as error:
                e.fail(f"did not print one JWT ({error}): {out}")
                return
            if not good:
                e.fail("the token is not signed with run/imgw.yaml's auth.jwt_secret")
            if claims.get("sub") != user:
                e.fail(f"the token's sub is {claims.get('sub')!r}, not {user!r}")
            if not isinstance(claims.get("exp"), (int, float)) or claims["exp"] <= time.time():
                e.fail(f"the token has no future exp: {claims}")
        elif h == "admin_presence":
            user = a[0]
            if not out or not out[0].startswith(f"{user}: "):
                e.fail(f"does not start with '{user}: online|offline';{proc.tail()}")
                return
            devices = {m.group(1): m.group(2) for m in (re.match(r"^\s+(\S+) (online|offline) since ", l) for l in out[1:]) if m}
            if not devices:
                e.fail(f"lists no device of {user};{proc.tail()}")
            default_device = {"listen": "cli", "presence": "cli-presence", "location_watch": "cli-location-watch",
                              "location_share": "cli-location", "sub": "cli-sub"}
            for x in self.running:
                if x.proc.running() and x.params.get("options", {}).get("--as") == user:
                    device = default_device[x.shape[2]]
                    if devices.get(device) != "online":
                        e.fail(f"does not show {user}'s {device} online (it is: {x.text!r});{proc.tail()}")
            e.notes.append("; ".join(l.strip() for l in out))

    # -- the whole set

    def run(self):
        self.r.progress(f"== the examples of {self.name}")
        known = [e for e in self.examples if e.shape]
        # Long-running ones first, in their order; a location watch after every share it needs.
        long_running = sorted([e for e in known if e.shape[1]],
                              key=lambda e: (e.shape[2] == "location_watch", e.index))
        checked = False
        try:
            for e in long_running:
                self.start(e)
            for e in sorted([e for e in known if not e.shape[1]], key=lambda e: e.index):
                self.r.progress(f"run: {e.text}")
                self.check_short(e)
                e.done = True
                self.r.all_sent.extend(s for s in self.sent if s not in self.r.all_sent)
                self.r.all_groups.update(self.groups)
            for e in long_running:
                if e in self.running:
                    self.check_long(e)
            checked = True
        finally:
            for e in reversed(long_running):
                if e.proc is None:
                    continue
                was_running = e.proc.running()
                code = e.proc.stop()
                if not was_running and e in self.running:
                    e.fail(f"exited by itself ({code}) before Ctrl-C;{e.proc.tail()}")
                elif e.proc.killed:
                    e.fail(f"did not exit within {STOP_GRACE:g} s of Ctrl-C (killed);{e.proc.tail()}")
                elif was_running and e.shape[2] != "mosquitto_sub" and code != 0:
                    e.fail(f"exited {code} after Ctrl-C, not 0;{e.proc.tail()}")
                elif was_running:
                    e.notes.append(f"stopped with Ctrl-C: exit {code}")
                e.done = checked
        # An example this script does not know (it fails): run it anyway, alone, to say what it does.
        for e in [e for e in self.examples if not e.shape]:
            self.r.progress(f"run (unknown shape): {e.text}")
            proc = Proc(e.command, self.r.cwd, self.r.env)
            self.r.procs.append(proc)
            code = proc.wait_exit(self.r.timeout)
            if code is None:
                code = proc.stop()
                e.notes.append(f"run anyway: still running after {self.r.timeout:g} s (long-running?), exit {code} "
                               f"after Ctrl-C;{proc.tail()}")
            else:
                e.notes.append(f"run anyway: exited {code};{proc.tail()}")
            e.done = True


# ----------------------------------------------------------------------------------------------


class Runner:
    def __init__(self, args):
        self.imcli = os.path.abspath(args.imcli)
        self.cwd = os.path.abspath(args.cwd)
        self.timeout = args.timeout
        self.procs = []
        self.all_sent = []
        self.all_groups = {}
        self.repeats = set()       # message ids whose send was a repeat of an earlier run's
        config_path = os.path.join(self.cwd, "run", "imgw.yaml")
        if not os.path.isfile(config_path):
            raise SystemExit(f"error: no run/imgw.yaml in {self.cwd}")
        config = read_yaml_scalars(config_path)
        try:
            self.broker_port = int(config["embedded_broker.port"])
        except (KeyError, ValueError):
            raise SystemExit(f"error: {config_path} has no embedded_broker.port")
        self.jwt_secret = config.get("auth.jwt_secret", "")
        # `imcli` of the help's examples is the --imcli binary: first on PATH (a link named imcli if
        # the binary is called otherwise).
        bindir = os.path.dirname(self.imcli)
        if os.path.basename(self.imcli) != "imcli":
            self.linkdir = tempfile.mkdtemp(prefix="run-examples-")
            os.symlink(self.imcli, os.path.join(self.linkdir, "imcli"))
            bindir = self.linkdir
        self.env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
        for variable in ("IMGW_CONFIG", "IMGW_API_KEY"):  # the examples rely on run/imgw.yaml alone
            self.env.pop(variable, None)

    def progress(self, text):
        print(f"  . {text}", flush=True)

    def collect(self, readme):
        examples = []
        for number, text in collect_readme_examples(readme):
            command = text
            if text.startswith(".build/debug/imcli"):
                command = shlex.quote(self.imcli) + text[len(".build/debug/imcli"):]
            e = Example(f"README.md:{number}", text, command, "README.md", len(examples))
            if text.startswith("mosquitto_sub"):
                m = re.search(r"(?<=\s)-p\s+(\d+)", text)
                if m:
                    e.command = text[:m.start(1)] + str(self.broker_port) + text[m.end(1):]
                    e.argv = shlex.split(e.command)
                    e.notes.append(f"run with -p {self.broker_port} for -p {m.group(1)} "
                                   f"(run/imgw.yaml's embedded_broker.port); the password path is relative to {self.cwd}")
            examples.append(e)
        help_lines, _ = collect_help_examples(self.imcli, self.env, self.timeout)
        for text in help_lines:
            examples.append(Example("imcli --help", text, text, "imcli --help", len(examples)))
        return examples

    def stop_all(self):
        for proc in self.procs:
            if proc.running():
                proc.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--imcli", required=True, help="the imcli binary (.build/debug/imcli)")
    parser.add_argument("--readme", required=True, help="README.md")
    parser.add_argument("--cwd", required=True, help="the directory holding run/imgw.yaml of the running gateway")
    parser.add_argument("--timeout", type=float, default=20, help="seconds for each wait (default 20)")
    args = parser.parse_args()

    def terminate(_signum, _frame):
        raise KeyboardInterrupt  # as Ctrl-C: stop what was started, then report
    signal.signal(signal.SIGTERM, terminate)

    runner = Runner(args)
    examples = []
    try:
        examples = runner.collect(args.readme)
        if not any(e.phase == "README.md" for e in examples):
            print("FAIL README.md: no example found in its ```sh blocks")
        if not any(e.phase == "imcli --help" for e in examples):
            print("FAIL imcli --help: no example found in its discussion")
        for e in examples:
            classify(e)
        for name in ("README.md", "imcli --help"):
            Phase(name, [e for e in examples if e.phase == name], runner).run()
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        for e in examples:
            if not e.done:
                e.fail("interrupted before its verdict")
    finally:
        runner.stop_all()

    passed = failed = 0
    print()
    for e in examples:
        if e.failures:
            failed += 1
            print(f"FAIL {e.label()}: " + "\n    ".join(e.failures))
        else:
            passed += 1
            print(f"PASS {e.label()}")
        for note in e.notes:
            print(f"    note: {note}")
    if not any(e.phase == "README.md" for e in examples) or not any(e.phase == "imcli --help" for e in examples):
        failed += 1
    print(f"{passed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
