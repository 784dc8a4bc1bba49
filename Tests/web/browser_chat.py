#!/usr/bin/env python3
"""The web chat page in a real browser: two headless Chromium sessions (alice and bob) and a TCP
device (carol, through imcli) chat through imgw.

    .build/web-venv/bin/python Tests/web/browser_chat.py --chat-url http://127.0.0.1:6980/ \
        --imcli .build/debug/imcli --imcli-config run/imgw.yaml \
        --api-url http://127.0.0.1:9470 --api-key "$(cat run/api.key)" --screenshots .build/web-screenshots

It relies only on the chat page's DOM (ids and classes fixed in the issue's contract): #login-user,
#login-device, #login-button, #status, #peer/#open-peer, #group/#open-group, #conversations
li[data-conversation], #messages .message[data-from] .text, #compose, #send, #typing, #presence.
Each step is a named case (`PASS name` / `FAIL name: why` / `SKIP name: why`), the last line is
`N passed, N failed` (`, N skipped` if any), exit status 1 if any failed. Every wait is a
WebDriverWait on a DOM condition, bounded by --timeout; a screenshot is saved after each step.
"""

import argparse
import json
import os
import secrets
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Failure, Runner, Screenshots, Skip, attribute_of, browser_errors, check, chrome,  # noqa: E402
                     click, fill, http_json, LineReader, start, stop, text_of, wait_for)

FIND_MESSAGE = """
const [text, sender] = arguments;
for (const m of document.querySelectorAll('#messages .message')) {
  const t = m.querySelector('.text');
  if (t && t.textContent.trim() === text && (!sender || m.dataset.from === sender)) return true;
}
return false;
"""

UNREAD = """
const li = document.querySelector(`#conversations li[data-conversation="${arguments[0]}"]`);
if (!li) return null;
const badge = li.querySelector('.unread');
return badge ? (badge.textContent.trim() || 'shown') : '';
"""


class Chat:
    """One browser window of the chat page, logged in as one user."""

    def __init__(self, arguments, user, shots):
        self.arguments = arguments
        self.user = user
        self.shots = shots
        self.driver = None

    @property
    def timeout(self):
        return self.arguments.timeout

    def open(self):
        self.driver = chrome()
        self.driver.set_page_load_timeout(self.timeout)
        self.driver.get(self.arguments.chat_url)

    def login(self, device="web"):
        if self.driver is None:
            self.open()
        wait_for(self.driver, lambda d: d.find_elements("css selector", "#login-button"), self.timeout, "the login form")
        fill(self.driver, "#login-user", self.user)
        fill(self.driver, "#login-device", device)
        click(self.driver, "#login-button")
        try:
            wait_for(self.driver, lambda d: text_of(d, "#status") == "online", self.timeout,
                     f"{self.user}'s #status online")
        except Failure as failure:
            raise Failure(f"{failure} (#status is {text_of(self.driver, '#status')!r}){browser_errors(self.driver)}")
        check(attribute_of(self.driver, "#status", "data-state") == "online",
              f"#status data-state {attribute_of(self.driver, '#status', 'data-state')!r}")

    def open_peer(self, peer):
        fill(self.driver, "#peer", peer)
        click(self.driver, "#open-peer")

    def open_group(self, group):
        fill(self.driver, "#group", group)
        click(self.driver, "#open-group")

    def send(self, text):
        fill(self.driver, "#compose", text)
        click(self.driver, "#send")

    def wait_message(self, text, sender, what):
        try:
            wait_for(self.driver, lambda d: d.execute_script(FIND_MESSAGE, text, sender), self.timeout, what)
        except Failure as failure:
            shown = self.driver.execute_script(
                "return Array.from(document.querySelectorAll('#messages .message')).slice(-5)"
                ".map(m => (m.dataset.from || '?') + ': ' + ((m.querySelector('.text') || {}).textContent || ''))")
            raise Failure(f"{failure} (last messages shown: {shown}){browser_errors(self.driver)}")

    def shot(self, step):
        self.shots.take(self.driver, step, self.user)

    def quit(self):
        if self.driver is not None:
            try:
                self.driver.quit()
            finally:
                self.driver = None


def main():
    parser = argparse.ArgumentParser(
        description="Two browser users (headless Chromium, selenium) and a TCP device (imcli) chat through "
                    "imgw's web chat page. Prints PASS/FAIL per step and 'N passed, N failed'.")
    parser.add_argument("--chat-url", help="the chat page, e.g. http://127.0.0.1:6980/")
    parser.add_argument("--imcli", help="the imcli binary (carol's TCP device)")
    parser.add_argument("--imcli-config", help="the gateway's configuration file, for imcli --config")
    parser.add_argument("--api-url", help="the server API, e.g. http://127.0.0.1:9470 (for the group; "
                                          "without it the group step is skipped)")
    parser.add_argument("--api-key", help="an API key of the server API")
    parser.add_argument("--screenshots", help="directory for the screenshots (created)")
    parser.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for each condition (default 15)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print tracebacks of unexpected errors")
    arguments = parser.parse_args()
    if not arguments.chat_url:
        parser.error("--chat-url is required")
    try:
        import selenium  # noqa: F401
    except ImportError:
        print("error: selenium is missing (make test-deps installs it into .build/web-venv)", file=sys.stderr)
        return 2

    runner = Runner(arguments.verbose)
    shots = Screenshots(arguments.screenshots)
    tag = secrets.token_hex(3)  # tells this run's messages from an earlier run's
    alice, bob = Chat(arguments, "alice", shots), Chat(arguments, "bob", shots)
    carol = {"listen": None}

    def both(step):
        alice.shot(step)
        bob.shot(step)

    def imcli(*words):
        check(arguments.imcli and arguments.imcli_config, "needs --imcli and --imcli-config")
        return [arguments.imcli, *words[:1], "--config", arguments.imcli_config, *words[1:]]

    # -- the cases ---------------------------------------------------------------------------

    def alice_login():
        alice.login()
        alice.shot("login")

    def bob_login():
        bob.login()
        bob.shot("login")

    def presence_online():
        alice.open_peer("bob")
        wait_for(alice.driver, lambda d: attribute_of(d, "#presence", "data-status") == "online", alice.timeout,
                 "alice's #presence of bob data-status online")
        alice.shot("bob-online")

    def alice_to_bob():
        bob.open_peer("alice")
        text = f"hi bob, it's alice {tag}"
        alice.send(text)
        alice.wait_message(text, "alice", "alice's own message in her #messages")
        bob.wait_message(text, "alice", "alice's message in bob's #messages")
        both("alice-to-bob")

    def bob_to_alice():
        text = f"hello alice, bob here {tag}"
        bob.send(text)
        alice.wait_message(text, "bob", "bob's message in alice's #messages")
        both("bob-to-alice")

    def typing():
        fill(bob.driver, "#compose", "I am typ")  # typing in #compose sends `typing`
        wait_for(alice.driver, lambda d: text_of(d, "#typing") == "bob is typing", alice.timeout,
                 "alice's #typing 'bob is typing'")
        alice.shot("bob-typing")
        fill(bob.driver, "#compose", "")

    def carol_listens():
        if not (arguments.imcli and arguments.imcli_config):
            raise Skip("no --imcli/--imcli-config")
        carol["listen"] = start(imcli("listen", "--as", "carol", "--json"))
        carol["lines"] = LineReader(carol["listen"])
        carol["lines"].wait(lambda line: "listening as" in line, arguments.timeout, "imcli listen logged in",
                            stream="stderr")

    def carol_to_alice():
        text = f"hi alice, carol on TCP {tag}"
        result = start(imcli("send", "--as", "carol", "--to", "alice", text))
        try:
            out, err = result.communicate(timeout=arguments.timeout)
        except Exception:  # noqa: BLE001
            stop(result)
            raise Failure("imcli send did not finish")
        check(result.returncode == 0, f"imcli send exited {result.returncode}: {err.strip()[-300:]}")
        # alice has bob's conversation open: carol's raises an unread badge, then it opens.
        badge = None
        try:
            badge = wait_for(alice.driver, lambda d: d.execute_script(UNREAD, "user:carol"), alice.timeout,
                             "an unread badge on alice's conversation with carol")
        finally:
            alice.shot("carol-unread")
        alice.open_peer("carol")
        alice.wait_message(text, "carol", "carol's message in alice's #messages")
        alice.shot("carol-to-alice")
        return f"unread badge {badge!r}"

    def alice_to_carol():
        text = f"hi carol, alice from the browser {tag}"
        alice.send(text)
        alice.wait_message(text, "alice", "alice's reply in her #messages")
        line = carol["lines"].wait(lambda line: text in line, arguments.timeout, "alice's reply on carol's imcli listen")
        event = json.loads(line)
        check(event.get("type") == "message" and event.get("from") == "alice" and event.get("text") == text,
              f"carol got {line}")
        alice.shot("alice-to-carol")

    def bob_offline():
        bob.quit()
        alice.open_peer("bob")
        wait_for(alice.driver, lambda d: attribute_of(d, "#presence", "data-status") == "offline", alice.timeout,
                 "alice's #presence of bob data-status offline after bob's browser closed")
        alice.shot("bob-offline")

    def offline_message():
        text = f"bob, this came while you were away {tag}"
        alice.send(text)
        alice.wait_message(text, "alice", "alice's message in her #messages")
        alice.shot("sent-to-offline-bob")
        bob.login()
        bob.shot("back-online")
        conversation = wait_for(bob.driver, lambda d: d.execute_script(UNREAD, "user:alice") is not None,
                                bob.timeout, "bob's #conversations lists alice")
        bob.open_peer("alice")
        bob.wait_message(text, "alice", "the message sent while bob was offline, in bob's #messages")
        bob.shot("offline-message")

    def group():
        if not (arguments.api_url and arguments.api_key):
            raise Skip("no --api-url/--api-key to create the group")
        if bob.driver is None:
            bob.login()
        base = arguments.api_url.rstrip("/")
        status, answer = http_json("POST", f"{base}/v1/groups/team", arguments.api_key, {"members": ["alice", "bob"]})
        if status == 409:  # the group exists (an earlier run): make sure both are members
            for user in ("alice", "bob"):
                status, answer = http_json("PUT", f"{base}/v1/groups/team/members/{user}", arguments.api_key)
                check(status == 200, f"PUT /v1/groups/team/members/{user}: HTTP {status} {answer}")
        else:
            check(status == 201, f"POST /v1/groups/team: HTTP {status} {answer}")
        alice.open_group("team")
        bob.open_group("team")
        text = f"hello team, alice here {tag}"
        alice.send(text)
        alice.wait_message(text, "alice", "alice's group message in her #messages")
        bob.wait_message(text, "alice", "alice's group message in bob's #messages")
        reply = f"hi team, bob here {tag}"
        bob.send(reply)
        alice.wait_message(reply, "bob", "bob's group message in alice's #messages")
        both("group")
        check(alice.driver.execute_script(UNREAD, "group:team") is not None,
              "alice's #conversations has no li[data-conversation=\"group:team\"]")

    try:
        runner.run("alice-login", alice_login)
        runner.run("bob-login", bob_login)
        runner.run("alice-sees-bob-online", presence_online, needs=("alice-login", "bob-login"))
        runner.run("alice-to-bob", alice_to_bob, needs=("alice-login", "bob-login"))
        runner.run("bob-to-alice", bob_to_alice, needs=("alice-to-bob",))
        runner.run("alice-sees-bob-typing", typing, needs=("alice-to-bob",))
        runner.run("carol-listens-over-tcp", carol_listens)
        runner.run("carol-to-alice", carol_to_alice, needs=("alice-login", "carol-listens-over-tcp"))
        runner.run("alice-reply-reaches-carol", alice_to_carol, needs=("carol-to-alice",))
        runner.run("alice-sees-bob-offline", bob_offline, needs=("alice-login", "bob-login"))
        runner.run("message-while-offline", offline_message, needs=("alice-login",))
        runner.run("group-message", group, needs=("alice-login", "bob-login"))
    finally:
        stop(carol["listen"])
        alice.quit()
        bob.quit()
    return runner.summary()


if __name__ == "__main__":
    sys.exit(main())
