#!/usr/bin/env python3
"""The operator console in a real browser (headless Chromium, selenium), against devices that
log in over WebSocket (Python `websockets` + imwire.py).

    .build/web-venv/bin/python Tests/web/browser_console.py \
        --console-url http://127.0.0.1:9470/console --api-key "$(cat run/api.key)" \
        --ws-url ws://127.0.0.1:6980/im --token-url http://127.0.0.1:6980/dev/token \
        --screenshots .build/web-screenshots/console

Steps, each a named case (`PASS name` / `FAIL name: why` / `SKIP name: why`), ending with
`N passed, N failed` (exit 1 if any failed): a wrong key shows `unauthorized`, the right key
`ok`; the broker is shown connected; N devices log in and the connections plot's last value
(`#plot-connections[data-values]`) rises by N; a presence lookup lists a device online; a kick
reaches the device (KICK, then its connection closes) and the result shows; a system message
reaches a logged-in device. Waits are WebDriverWait on DOM conditions, bounded by --timeout.
"""

import argparse
import asyncio
import json
import os
import secrets
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import imwire  # noqa: E402
from harness import (Failure, Runner, Screenshots, Skip, attribute_of, browser_errors, check, chrome,  # noqa: E402
                     click, fill, http_json, text_of, wait_for)

SUBPROTOCOL = "imgw.tlv.v1"


class Loop:
    """An asyncio loop in a thread, for the devices, while selenium runs in the main thread."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, coroutine, timeout):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def stop(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class Device:
    """A WebSocket device: HELLO, LOGIN, heartbeats, ACKs every DELIVERY, remembers KICKs and
    the close code."""

    def __init__(self, url, user, device, token, timeout):
        self.url, self.user, self.device, self.token, self.timeout = url, user, device, token, timeout
        self.reader = imwire.FrameReader()
        self.frames = []
        self.deliveries = []
        self.kicks = []
        self.close_code = None
        self.closed = asyncio.Event()
        self.sequence = 0
        self.connection = None
        self.tasks = []

    def next_sequence(self):
        self.sequence += 1
        return self.sequence

    async def connect(self):
        from websockets.asyncio.client import connect
        self.connection = await connect(self.url, subprotocols=[SUBPROTOCOL], compression=None, proxy=None,
                                        ping_interval=None, open_timeout=self.timeout, max_size=None)
        self.tasks.append(asyncio.create_task(self._read()))
        await self.connection.send(imwire.hello(self.next_sequence()))
        await self._wait(lambda f: f.op == imwire.OP_HELLO_OK, "HELLO_OK")
        await self.connection.send(imwire.login(self.next_sequence(), self.token, self.device))
        reply = await self._wait(lambda f: f.op in (imwire.OP_LOGIN_OK, imwire.OP_ERROR), "LOGIN_OK")
        check(reply.op == imwire.OP_LOGIN_OK, f"{self.user}/{self.device}: LOGIN refused: {reply.describe()}")
        self.tasks.append(asyncio.create_task(self._heartbeats()))

    async def _wait(self, predicate, what):
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            for index, frame in enumerate(self.frames):
                if predicate(frame):
                    return self.frames.pop(index)
            if self.closed.is_set():
                raise Failure(f"{self.user}/{self.device}: closed ({self.close_code}) waiting for {what}")
            await asyncio.sleep(0.02)
        raise Failure(f"{self.user}/{self.device}: no {what} within {self.timeout:.0f} s (got {self.frames})")

    async def _read(self):
        from websockets.exceptions import ConnectionClosed
        try:
            async for message in self.connection:
                if isinstance(message, str):
                    continue
                for frame in self.reader.feed(message):
                    if frame.op == imwire.OP_DELIVERY or (frame.type == imwire.DATA and frame.op == imwire.OP_PUBLISH):
                        await self.connection.send(imwire.ack(frame.sequence, frame.session))
                        self.deliveries.append(frame)
                    elif frame.op == imwire.OP_KICK:
                        self.kicks.append(frame)
                    elif frame.type == imwire.READ_RECEIPT:
                        await self.connection.send(imwire.ack(frame.sequence, frame.session))
                    else:
                        self.frames.append(frame)
        except ConnectionClosed:
            pass
        except imwire.FrameError as error:
            self.frames.append(error)
        finally:
            self.close_code = self.connection.close_code
            self.closed.set()

    async def _heartbeats(self):
        while not self.closed.is_set():
            await asyncio.sleep(10)
            try:
                await self.connection.send(imwire.heartbeat(self.next_sequence()))
            except Exception:  # noqa: BLE001: the reader notes the close
                return

    async def close(self):
        for task in self.tasks:
            task.cancel()
        if self.connection is not None:
            try:
                await asyncio.wait_for(self.connection.close(), self.timeout)
            except Exception:  # noqa: BLE001
                pass


def wait_until(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise Failure(f"{what}: not within {timeout:.0f} s")


def plot_values(driver, name):
    raw = attribute_of(driver, f"#plot-{name}", "data-values")
    try:
        values = json.loads(raw) if raw else None
    except ValueError:
        return None
    return values if isinstance(values, list) else None


def main():
    parser = argparse.ArgumentParser(
        description="imgw's operator console in headless Chromium (selenium), with WebSocket devices. "
                    "Prints PASS/FAIL per step and 'N passed, N failed'.")
    parser.add_argument("--console-url", help="the console page, e.g. http://127.0.0.1:9470/console")
    parser.add_argument("--api-key", help="an API key (api.keys)")
    parser.add_argument("--ws-url", help="the WebSocket listener, e.g. ws://127.0.0.1:6980/im")
    parser.add_argument("--token-url", help="the development token endpoint, e.g. http://127.0.0.1:6980/dev/token")
    parser.add_argument("--devices", type=int, default=3, help="devices to log in (default 3, at least 2)")
    parser.add_argument("--user-prefix", default="operator", help="the devices' users are PREFIX1..PREFIXN (default operator)")
    parser.add_argument("--screenshots", help="directory for the screenshots (created)")
    parser.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for each condition (default 15)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print tracebacks of unexpected errors")
    arguments = parser.parse_args()
    for option in ("console_url", "api_key", "ws_url", "token_url"):
        if not getattr(arguments, option):
            parser.error(f"--{option.replace('_', '-')} is required")
    if arguments.devices < 2:
        parser.error("--devices must be at least 2 (one is kicked, one gets the system message)")
    try:
        import selenium  # noqa: F401
        import websockets  # noqa: F401
    except ImportError as error:
        print(f"error: {error.name} is missing (make test-deps installs it into .build/web-venv)", file=sys.stderr)
        return 2

    runner = Runner(arguments.verbose)
    shots = Screenshots(arguments.screenshots)
    loop = Loop()
    tag = secrets.token_hex(3)
    state = {"driver": None, "devices": [], "baseline": None}
    timeout = arguments.timeout

    def shot(step):
        shots.take(state["driver"], step, "console")

    def token(user, device):
        query = urllib.parse.urlencode({"user": user, "device": device})
        separator = "&" if "?" in arguments.token_url else "?"
        status, answer = http_json("GET", f"{arguments.token_url}{separator}{query}")
        check(status == 200 and isinstance(answer, dict) and answer.get("token"),
              f"GET {arguments.token_url}?{query}: HTTP {status} {answer}")
        check(answer.get("user") == user, f"token for {answer.get('user')!r}, asked for {user!r}")
        return answer["token"]

    # -- the cases ---------------------------------------------------------------------------

    def wrong_key():
        driver = state["driver"] = chrome(1280, 1000)
        driver.set_page_load_timeout(timeout)
        driver.get(arguments.console_url)
        wait_for(driver, lambda d: d.find_elements("css selector", "#api-key-save"), timeout, "the key form")
        check(attribute_of(driver, "#api-key", "type") == "password", "#api-key is not type=password")
        fill(driver, "#api-key", "not-the-key-" + "x" * 32)
        click(driver, "#api-key-save")
        wait_for(driver, lambda d: text_of(d, "#console-status") == "unauthorized", timeout,
                 "#console-status 'unauthorized' for a wrong key")
        shot("wrong-key")

    def right_key():
        if state["driver"] is None:
            state["driver"] = chrome(1280, 1000)
            state["driver"].get(arguments.console_url)
        driver = state["driver"]
        fill(driver, "#api-key", arguments.api_key)
        click(driver, "#api-key-save")
        try:
            wait_for(driver, lambda d: text_of(d, "#console-status") == "ok", timeout, "#console-status 'ok'")
        except Failure as failure:
            raise Failure(f"{failure} (it is {text_of(driver, '#console-status')!r}){browser_errors(driver)}")
        shot("ok")

    def broker_shown():
        driver = state["driver"]
        wait_for(driver, lambda d: attribute_of(d, "#broker-state", "data-connected") == "true", timeout,
                 "#broker-state data-connected=true")
        check(text_of(driver, "#broker-state") == "connected", f"#broker-state text {text_of(driver, '#broker-state')!r}")

    def figures_shown():
        driver = state["driver"]
        for name in ("connections", "logins", "chats", "p99"):
            wait_for(driver, lambda d, n=name: plot_values(d, n) is not None, timeout,
                     f"#plot-{name} with a data-values JSON array")
            check(text_of(driver, f"#value-{name}") is not None, f"no #value-{name}")
        values = wait_for(driver, lambda d: plot_values(d, "connections"), timeout, "a first connections value")
        state["baseline"] = values[-1]
        shot("figures")
        return f"connections before the logins: {state['baseline']}"

    def devices_log_in():
        for index in range(1, arguments.devices + 1):
            user = f"{arguments.user_prefix}{index}"
            device = Device(arguments.ws_url, user, "console-test", token(user, "console-test"), timeout)
            state["devices"].append(device)
            loop.call(device.connect(), timeout * 2)

    def plot_rises():
        driver = state["driver"]
        baseline = state["baseline"] or 0
        target = baseline + arguments.devices
        try:
            wait_for(driver, lambda d: (plot_values(d, "connections") or [0])[-1] >= target, timeout,
                     f"the connections plot's last value at {target} or more")
        finally:
            shot("connections-risen")
        values = plot_values(driver, "connections")
        # The logged-in figure is a number (the API gives it by transport: the page sums it).
        wait_for(driver, lambda d: (text_of(d, "#logged-in") or "").strip().isdigit()
                 and int(text_of(d, "#logged-in")) >= arguments.devices, timeout,
                 f"#logged-in showing at least {arguments.devices}")
        # Logins/s: the devices' logins make a rate (a number, not the dash of no data).
        wait_for(driver, lambda d: any(v > 0 for v in (plot_values(d, "logins") or [])), timeout,
                 "a logins/s point above 0")
        return f"{baseline} → {values[-1]} ({len(values)} points); #value-connections {text_of(driver, '#value-connections')!r}"

    def presence_lookup():
        driver = state["driver"]
        device = state["devices"][0]
        fill(driver, "#presence-user", device.user)
        click(driver, "#presence-lookup")
        selector = f'#presence-result [data-device="{device.device}"]'
        wait_for(driver, lambda d: attribute_of(d, selector, "data-status") == "online", timeout,
                 f"{selector} data-status=online")
        shot("presence")

    def kick():
        driver = state["driver"]
        device = state["devices"][0]
        fill(driver, "#kick-user", device.user)
        fill(driver, "#kick-device", device.device)
        click(driver, "#kick-button")
        wait_for(driver, lambda d: text_of(d, "#kick-result"), timeout, "a #kick-result")
        shot("kicked")
        wait_until(lambda: device.kicks, timeout, f"a KICK at {device.user}/{device.device}")
        wait_until(lambda: device.closed.is_set(), timeout, f"{device.user}/{device.device}'s connection closed")
        reason = device.kicks[0].error_code
        check(reason == imwire.ERRORS["DISCONNECTED"], f"KICK reason {imwire.ERROR_NAMES.get(reason, reason)}")
        check(device.close_code in (1000, None), f"closed with {device.close_code}, expected 1000")
        others = [d for d in state["devices"][1:] if d.closed.is_set()]
        check(not others, f"other devices were closed too: {[d.user for d in others]}")
        return f"#kick-result {text_of(driver, '#kick-result')!r}; close {device.close_code}"

    def plot_falls():
        driver = state["driver"]
        top = max(plot_values(driver, "connections") or [0])
        wait_for(driver, lambda d: (plot_values(d, "connections") or [top])[-1] <= top - 1, timeout,
                 f"the connections plot falling below {top} after the kick")
        shot("connections-after-kick")

    def system_message():
        driver = state["driver"]
        device = state["devices"][1]
        text = f"maintenance at noon {tag}"
        fill(driver, "#system-to", device.user)
        fill(driver, "#system-text", text)
        click(driver, "#system-send")
        wait_for(driver, lambda d: text_of(d, "#system-result"), timeout, "a #system-result")
        shot("system-message")
        frame = wait_until(lambda: next((f for f in device.deliveries if f.text(imwire.TAG_TEXT) == text), None),
                           timeout, f"the system message at {device.user}")
        return f"from {frame.text(imwire.TAG_FROM)!r}; #system-result {text_of(driver, '#system-result')!r}"

    def presence_api_agrees():
        """The console's presence lookup against the API it calls."""
        base = arguments.console_url.rsplit("/console", 1)[0]
        device = state["devices"][1]
        status, answer = http_json("GET", f"{base}/v1/users/{device.user}/presence", arguments.api_key)
        check(status == 200, f"GET /v1/users/{device.user}/presence: HTTP {status} {answer}")
        devices = {entry.get("device"): entry.get("status") for entry in answer.get("devices", [])}
        check(devices.get(device.device) == "online", f"presence {answer}")

    try:
        runner.run("wrong-key-unauthorized", wrong_key)
        runner.run("key-ok", right_key)
        runner.run("broker-connected", broker_shown, needs=("key-ok",))
        runner.run("figures-and-plots", figures_shown, needs=("key-ok",))
        runner.run("devices-log-in", devices_log_in)
        runner.run("connections-plot-rises", plot_rises, needs=("figures-and-plots", "devices-log-in"))
        runner.run("presence-lookup", presence_lookup, needs=("key-ok", "devices-log-in"))
        runner.run("kick-device", kick, needs=("key-ok", "devices-log-in"))
        runner.run("connections-plot-falls-after-kick", plot_falls, needs=("kick-device", "figures-and-plots"))
        runner.run("system-message", system_message, needs=("key-ok", "devices-log-in"))
        runner.run("presence-api-agrees", presence_api_agrees, needs=("devices-log-in",))
    finally:
        for device in state["devices"]:
            try:
                loop.call(device.close(), timeout)
            except Exception:  # noqa: BLE001
                pass
        loop.stop()
        if state["driver"] is not None:
            state["driver"].quit()
    return runner.summary()


if __name__ == "__main__":
    sys.exit(main())
