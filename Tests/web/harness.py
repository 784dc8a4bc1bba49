"""What the browser tests under Tests/web share: named cases with a PASS/FAIL line each and the
closing `N passed, N failed` line, headless Chromium from Debian's packages (nothing downloaded),
screenshots, and bounded waits for DOM conditions."""

import json
import os
import re
import subprocess
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


class Failure(Exception):
    """A case's expectation that did not hold."""


class Skip(Exception):
    """A case that cannot run here (a missing option, a failed prerequisite)."""


def check(condition, why):
    if not condition:
        raise Failure(why)


class Runner:
    """Runs named cases in order; a case may name the cases it needs (skipped if one failed)."""

    def __init__(self, verbose=False):
        self.passed = self.failed = self.skipped = 0
        self.outcomes = {}
        self.verbose = verbose

    def run(self, name, function, needs=()):
        missing = [need for need in needs if self.outcomes.get(need) != "pass"]
        if missing:
            self.skipped += 1
            self.outcomes[name] = "skip"
            print(f"SKIP {name}: needs {', '.join(missing)}", flush=True)
            return
        try:
            note = function()
        except Skip as skip:
            self.skipped += 1
            self.outcomes[name] = "skip"
            print(f"SKIP {name}: {skip}", flush=True)
            return
        except Failure as failure:
            self.fail(name, str(failure))
            return
        except Exception as error:  # noqa: BLE001: every case gets an outcome
            if self.verbose:
                traceback.print_exc()
            self.fail(name, f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}")
            return
        self.passed += 1
        self.outcomes[name] = "pass"
        print(f"PASS {name}" + (f" ({note})" if note else ""), flush=True)

    def fail(self, name, why):
        self.failed += 1
        self.outcomes[name] = "fail"
        print(f"FAIL {name}: {why}", flush=True)

    def summary(self):
        line = f"{self.passed} passed, {self.failed} failed"
        if self.skipped:
            line += f", {self.skipped} skipped"
        print(line, flush=True)
        return 1 if self.failed else 0


def chrome(width=1100, height=850):
    """A headless Chromium session through Debian's chromedriver: nothing is downloaded."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     f"--window-size={width},{height}"):
        options.add_argument(argument)
    options.binary_location = CHROMIUM
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


class Screenshots:
    def __init__(self, directory):
        self.directory = directory
        self.count = 0
        if directory:
            os.makedirs(directory, exist_ok=True)

    def take(self, driver, step, who=""):
        if not self.directory or driver is None:
            return
        self.count += 1
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{self.count:02d}-{step}" + (f"-{who}" if who else ""))
        try:
            driver.save_screenshot(os.path.join(self.directory, name + ".png"))
        except Exception as error:  # noqa: BLE001: a screenshot never fails a case
            print(f"  (screenshot {name} failed: {error})", file=sys.stderr)


def wait_for(driver, condition, timeout, what):
    """Waits (WebDriverWait, bounded) until condition(driver) is truthy; Failure naming `what`."""
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.1,
                             ignored_exceptions=(StaleElementReferenceException,)).until(condition)
    except TimeoutException:
        raise Failure(f"{what}: not within {timeout:.0f} s")


def text_of(driver, selector):
    from selenium.webdriver.common.by import By

    elements = driver.find_elements(By.CSS_SELECTOR, selector)
    return elements[0].text.strip() if elements else None


def attribute_of(driver, selector, name):
    from selenium.webdriver.common.by import By

    elements = driver.find_elements(By.CSS_SELECTOR, selector)
    return elements[0].get_attribute(name) if elements else None


def fill(driver, selector, value):
    from selenium.webdriver.common.by import By

    element = driver.find_element(By.CSS_SELECTOR, selector)
    element.clear()
    element.send_keys(value)
    return element


def click(driver, selector):
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, selector).click()


def browser_errors(driver, limit=5):
    """The page's console errors, for a failure's message."""
    try:
        entries = [entry["message"] for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]
    except Exception:  # noqa: BLE001
        return ""
    return ("; browser console: " + " | ".join(entries[-limit:])) if entries else ""


def http_json(method, url, key=None, body=None, timeout=10):
    """(status, parsed JSON or text) of an HTTP request."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode("utf-8", "replace")


class LineReader:
    """Reads a process's stdout and stderr lines in threads, for waiting on them."""

    def __init__(self, process):
        self.process = process
        self.stdout = []
        self.stderr = []
        self.condition = threading.Condition()
        for stream, lines in ((process.stdout, self.stdout), (process.stderr, self.stderr)):
            threading.Thread(target=self._pump, args=(stream, lines), daemon=True).start()

    def _pump(self, stream, lines):
        for line in stream:
            with self.condition:
                lines.append(line.rstrip("\n"))
                self.condition.notify_all()
        with self.condition:
            self.condition.notify_all()

    def wait(self, predicate, timeout, what, stream="stdout"):
        lines = self.stdout if stream == "stdout" else self.stderr
        deadline = time.monotonic() + timeout
        with self.condition:
            seen = 0
            while True:
                for line in lines[seen:]:
                    if predicate(line):
                        return line
                seen = len(lines)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise Failure(f"{what}: not within {timeout:.0f} s (stdout {self.stdout[-3:]}, stderr {self.stderr[-3:]})")
                if self.process.poll() is not None and seen == len(lines):
                    self.condition.wait(0.2)
                    if len(lines) == seen:
                        raise Failure(f"{what}: the process exited with {self.process.returncode} "
                                      f"(stderr {self.stderr[-3:]})")
                self.condition.wait(min(remaining, 0.5))


def start(command):
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            text=True, bufsize=1)


def stop(process, timeout=5):
    """Ctrl-C first (imcli logs out on it), then terminate, then kill."""
    if process is None or process.poll() is not None:
        return
    import signal
    for send in (lambda: process.send_signal(signal.SIGINT), process.terminate, process.kill):
        send()
        try:
            process.wait(timeout)
            return
        except subprocess.TimeoutExpired:
            continue
