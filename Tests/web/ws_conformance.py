#!/usr/bin/env python3
"""RFC 6455 conformance of imgw's WebSocket listener (`listen.websocket`), from an independent
client: Python's `websockets` for the ordinary cases, raw sockets with hand-built frames for
the malformed ones.

    .build/web-venv/bin/python Tests/web/ws_conformance.py \
        --url ws://127.0.0.1:6980/im --token "$(imcli token alice)"

Each case prints `PASS name` or `FAIL name: why`; the last line is `N passed, N failed`, and the
exit status is 1 if any case failed. The expectations are the listener's documented behaviour:
subprotocol `imgw.tlv.v1` (400 without it, 403 for a foreign Origin, 404 on another path), TLV
frames in binary messages treated as one byte stream, and the close codes 1000 (the gateway
ended the session, a KICK or ERROR frame first), 1002 (protocol error), 1003 (a text message),
1008 (ping flood: more than 10 pings in a second), 1009 (a frame over the limit:
MAX_BODY_LENGTH + 28), with a client's close frame echoed with its code.
"""

import argparse
import asyncio
import base64
import hashlib
import os
import socket
import struct
import sys
import threading
import time
import traceback
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import imwire  # noqa: E402

try:
    import websockets
    from websockets.asyncio.client import connect as ws_connect
    from websockets.exceptions import ConnectionClosed, InvalidStatus
except ImportError:  # --help works without it; the run says what is missing
    websockets = None

SUBPROTOCOL = "imgw.tlv.v1"
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


class Failure(Exception):
    pass


def check(condition, why):
    if not condition:
        raise Failure(why)


# ---------------------------------------------------------------------------------------------
# A raw RFC 6455 client: every bit of every frame is ours to choose.

class RawSocket:
    """A WebSocket connection over a plain socket, frames built by hand."""

    def __init__(self, url, timeout, origin=None, subprotocols=(SUBPROTOCOL,), path=None, rcvbuf=None):
        parsed = urllib.parse.urlparse(url)
        self.host, self.port = parsed.hostname, parsed.port or 80
        self.path = path or (parsed.path or "/")
        self.timeout = timeout
        self.sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect((self.host, self.port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = bytearray()
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {self.path} HTTP/1.1", f"Host: {self.host}:{self.port}", "Upgrade: websocket",
                 "Connection: Upgrade", f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
        if subprotocols:
            lines.append("Sec-WebSocket-Protocol: " + ", ".join(subprotocols))
        if origin:
            lines.append(f"Origin: {origin}")
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = self._read_until(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        self.status = int(status_line.split()[1])
        self.headers = {}
        for line in header_lines:
            if ":" in line:
                name, value = line.split(":", 1)
                self.headers[name.strip().lower()] = value.strip()
        if self.status == 101:
            expected = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
            check(self.headers.get("sec-websocket-accept") == expected, "wrong Sec-WebSocket-Accept")
        self.reader = imwire.FrameReader()
        self.frames = []  # TLV frames received, not yet taken
        self.sequence = 0

    def _read_until(self, marker):
        while marker not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise Failure(f"connection closed during the HTTP handshake after {bytes(self.buffer)[:200]!r}")
            self.buffer += chunk
        index = self.buffer.index(marker) + len(marker)
        head = bytes(self.buffer[:index])
        del self.buffer[:index]
        return head

    def _read_exactly(self, count):
        while len(self.buffer) < count:
            chunk = self.sock.recv(max(65536, count - len(self.buffer)))
            if not chunk:
                raise EOFError("connection closed by the gateway")
            self.buffer += chunk
        data = bytes(self.buffer[:count])
        del self.buffer[:count]
        return data

    @staticmethod
    def frame(opcode, payload=b"", fin=True, rsv=0, mask=True, declared_length=None):
        length = len(payload) if declared_length is None else declared_length
        first = (0x80 if fin else 0) | (rsv << 4) | opcode
        if length < 126:
            header = struct.pack(">BB", first, (0x80 if mask else 0) | length)
        elif length < 65536:
            header = struct.pack(">BBH", first, (0x80 if mask else 0) | 126, length)
        else:
            header = struct.pack(">BBQ", first, (0x80 if mask else 0) | 127, length)
        if not mask:
            return header + payload
        key = os.urandom(4)
        masked = bytes(b ^ key[i % 4] for i, b in enumerate(payload)) if len(payload) < 4096 else \
            (int.from_bytes(payload, "big") ^ int.from_bytes((key * (len(payload) // 4 + 1))[:len(payload)], "big")
             ).to_bytes(len(payload), "big")
        return header + key + masked

    def send(self, opcode, payload=b"", **options):
        self.sock.sendall(self.frame(opcode, payload, **options))

    def send_raw(self, data):
        self.sock.sendall(data)

    def next_sequence(self):
        self.sequence += 1
        return self.sequence

    def recv_frame(self, timeout=None):
        """(fin, rsv, opcode, payload) of the next WebSocket frame; EOFError at the end."""
        self.sock.settimeout(timeout or self.timeout)
        b0, b1 = self._read_exactly(2)
        length = b1 & 0x7F
        if length == 126:
            length = struct.unpack(">H", self._read_exactly(2))[0]
        elif length == 127:
            length = struct.unpack(">Q", self._read_exactly(8))[0]
        if b1 & 0x80:
            raise Failure("the gateway sent a masked frame (RFC 6455 5.1: a server must not mask)")
        payload = self._read_exactly(length)
        return bool(b0 & 0x80), (b0 >> 4) & 7, b0 & 0x0F, payload

    def recv_tlv(self, predicate, what, timeout=None):
        """The first TLV frame matching `predicate`, answering pings; data frames accumulate."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            for index, frame in enumerate(self.frames):
                if predicate(frame):
                    return self.frames.pop(index)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Failure(f"no {what} within {timeout or self.timeout:.0f} s (got {self.frames})")
            try:
                fin, rsv, opcode, payload = self.recv_frame(remaining)
            except socket.timeout:
                continue
            except EOFError:
                raise Failure(f"connection closed while waiting for {what} (got {self.frames})")
            if opcode == OP_BINARY or opcode == OP_CONT:
                self.frames += self.reader.feed(payload)
            elif opcode == OP_PING:
                self.send(OP_PONG, payload)
            elif opcode == OP_CLOSE:
                raise Failure(f"closed with {describe_close(payload)} while waiting for {what} (got {self.frames})")
            elif opcode == OP_TEXT:
                raise Failure("the gateway sent a text message")

    def expect_close(self, code, timeout=None, allow_tlv=True):
        """Reads until the gateway's close frame; checks its code, answers it, and checks that the
        gateway then closes the TCP connection. Returns (code, reason)."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Failure(f"no close frame within {timeout or self.timeout:.0f} s, expected {code}")
            try:
                fin, rsv, opcode, payload = self.recv_frame(remaining)
            except socket.timeout:
                continue
            except EOFError:
                raise Failure(f"TCP closed without a close frame, expected close {code}")
            except ConnectionResetError:
                raise Failure(f"connection reset without a close frame, expected close {code}")
            if opcode == OP_CLOSE:
                break
            if opcode in (OP_BINARY, OP_CONT):
                if not allow_tlv:
                    raise Failure("a binary frame instead of the close frame")
                try:
                    self.frames += self.reader.feed(payload)
                except imwire.FrameError:
                    pass
            elif opcode == OP_TEXT:
                raise Failure("the gateway sent a text message")
        received = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else None
        reason = payload[2:].decode("utf-8", "replace")
        check(received == code, f"closed with {describe_close(payload)}, expected {code}")
        try:  # the closing handshake: echo, then the gateway closes TCP
            self.send(OP_CLOSE, payload[:2])
        except OSError:
            pass
        self.expect_eof()
        return received, reason

    def expect_eof(self, timeout=None):
        deadline = time.monotonic() + (timeout or self.timeout)
        while time.monotonic() < deadline:
            try:
                self.sock.settimeout(max(0.05, deadline - time.monotonic()))
                chunk = self.sock.recv(65536)
            except socket.timeout:
                continue
            except ConnectionResetError:
                return
            if not chunk:
                return
        raise Failure(f"the gateway did not close the TCP connection within {timeout or self.timeout:.0f} s "
                      "after the close frames")

    def hello(self):
        sequence = self.next_sequence()
        self.send(OP_BINARY, imwire.hello(sequence))
        return self.recv_tlv(lambda f: f.op == imwire.OP_HELLO_OK, "HELLO_OK")

    def login(self, token, device):
        sequence = self.next_sequence()
        self.send(OP_BINARY, imwire.login(sequence, token, device))
        frame = self.recv_tlv(lambda f: f.op in (imwire.OP_LOGIN_OK, imwire.OP_ERROR), "LOGIN_OK")
        check(frame.op == imwire.OP_LOGIN_OK, f"LOGIN refused: {frame.describe()}")
        return frame

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def describe_close(payload):
    if len(payload) < 2:
        return "a close frame without a code"
    code = struct.unpack(">H", payload[:2])[0]
    reason = payload[2:].decode("utf-8", "replace")
    return f"close {code}" + (f" ({reason})" if reason else "")


# ---------------------------------------------------------------------------------------------
# The `websockets` side: a TLV connection through an ordinary client library.

class TLVClient:
    def __init__(self, connection, timeout):
        self.connection = connection
        self.timeout = timeout
        self.reader = imwire.FrameReader()
        self.frames = []
        self.sequence = 0

    def next_sequence(self):
        self.sequence += 1
        return self.sequence

    async def recv_tlv(self, predicate, what, timeout=None):
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            for index, frame in enumerate(self.frames):
                if predicate(frame):
                    return self.frames.pop(index)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Failure(f"no {what} within {timeout or self.timeout:.0f} s (got {self.frames})")
            try:
                message = await asyncio.wait_for(self.connection.recv(), remaining)
            except asyncio.TimeoutError:
                continue
            except ConnectionClosed as closed:
                raise Failure(f"connection closed ({closed}) while waiting for {what}")
            if isinstance(message, str):
                raise Failure("the gateway sent a text message")
            self.frames += self.reader.feed(message)


async def open_ws(arguments, subprotocols=(SUBPROTOCOL,), origin=None, url=None):
    return await ws_connect(url or arguments.url, subprotocols=list(subprotocols) if subprotocols else None,
                            origin=origin, compression=None, proxy=None, ping_interval=None,
                            open_timeout=arguments.timeout, close_timeout=arguments.timeout,
                            max_size=None)


async def expect_refusal(arguments, status, **options):
    try:
        connection = await open_ws(arguments, **options)
    except InvalidStatus as refused:
        got = refused.response.status_code
        check(got == status, f"HTTP {got}, expected {status}")
        return
    await connection.close()
    raise Failure(f"the upgrade was accepted (subprotocol {connection.subprotocol!r}), expected HTTP {status}")


# ---------------------------------------------------------------------------------------------
# The cases

CASES = []


def case(name):
    def register(function):
        CASES.append((name, function))
        return function
    return register


@case("handshake-subprotocol")
async def handshake_subprotocol(arguments):
    connection = await open_ws(arguments)
    try:
        check(connection.subprotocol == SUBPROTOCOL, f"subprotocol {connection.subprotocol!r}, expected {SUBPROTOCOL}")
        check(connection.response.status_code == 101, f"HTTP {connection.response.status_code}")
    finally:
        await connection.close()


@case("handshake-missing-subprotocol-400")
async def handshake_missing_subprotocol(arguments):
    await expect_refusal(arguments, 400, subprotocols=None)


@case("handshake-wrong-subprotocol-400")
async def handshake_wrong_subprotocol(arguments):
    await expect_refusal(arguments, 400, subprotocols=("mqtt", "imgw.tlv.v2"))


@case("handshake-wrong-origin-403")
async def handshake_wrong_origin(arguments):
    await expect_refusal(arguments, 403, origin="http://evil.example")


@case("handshake-own-origin-accepted")
async def handshake_own_origin(arguments):
    parsed = urllib.parse.urlparse(arguments.url)
    own = f"{'https' if parsed.scheme == 'wss' else 'http'}://{parsed.netloc}"
    connection = await open_ws(arguments, origin=own)
    await connection.close()


@case("handshake-allowed-origin-accepted")
async def handshake_allowed_origin(arguments):
    if not arguments.origin_allowed:
        return "skipped: no --origin-allowed"
    connection = await open_ws(arguments, origin=arguments.origin_allowed)
    await connection.close()


@case("handshake-wrong-path-404")
async def handshake_wrong_path(arguments):
    parsed = urllib.parse.urlparse(arguments.url)
    url = urllib.parse.urlunparse(parsed._replace(path=parsed.path.rstrip("/") + "-not-here"))
    await expect_refusal(arguments, 404, url=url)


@case("handshake-raw-101")
def handshake_raw(arguments):
    raw = RawSocket(arguments.url, arguments.timeout)
    try:
        check(raw.status == 101, f"HTTP {raw.status}")
        check(raw.headers.get("sec-websocket-protocol") == SUBPROTOCOL,
              f"Sec-WebSocket-Protocol {raw.headers.get('sec-websocket-protocol')!r}")
        check("permessage-deflate" not in raw.headers.get("sec-websocket-extensions", ""),
              "an extension was negotiated that the client did not offer")
    finally:
        raw.close()


@case("hello-split-over-3-messages")
async def hello_split_messages(arguments):
    connection = await open_ws(arguments)
    try:
        client = TLVClient(connection, arguments.timeout)
        frame = imwire.hello(client.next_sequence())
        for chunk in (frame[:5], frame[5:31], frame[31:]):  # inside the header, across header and body
            await connection.send(chunk)
        reply = await client.recv_tlv(lambda f: f.op == imwire.OP_HELLO_OK, "HELLO_OK")
        check(reply.int(imwire.TAG_REF_SEQUENCE) == 1, f"HELLO_OK REF_SEQUENCE {reply.int(imwire.TAG_REF_SEQUENCE)}")
    finally:
        await connection.close()


@case("hello-fragmented-message")
async def hello_fragmented(arguments):
    connection = await open_ws(arguments)
    try:
        client = TLVClient(connection, arguments.timeout)
        frame = imwire.hello(client.next_sequence())
        await connection.send([frame[:3], frame[3:20], frame[20:]])  # binary + 2 continuation frames
        await client.recv_tlv(lambda f: f.op == imwire.OP_HELLO_OK, "HELLO_OK")
    finally:
        await connection.close()


@case("two-tlv-frames-in-one-message")
async def two_frames_one_message(arguments):
    connection = await open_ws(arguments)
    try:
        client = TLVClient(connection, arguments.timeout)
        hello = imwire.hello(client.next_sequence())
        beat_sequence = client.next_sequence()
        await connection.send(hello + imwire.heartbeat(beat_sequence))
        await client.recv_tlv(lambda f: f.op == imwire.OP_HELLO_OK, "HELLO_OK")
        await client.recv_tlv(lambda f: f.type == imwire.ACK and f.sequence == beat_sequence, "heartbeat ACK")
    finally:
        await connection.close()


@case("ping-interleaved-in-fragments")
def ping_interleaved(arguments):
    raw = RawSocket(arguments.url, arguments.timeout)
    try:
        frame = imwire.hello(raw.next_sequence())
        raw.send(OP_BINARY, frame[:10], fin=False)
        raw.send(OP_PING, b"interleaved-42")
        raw.send(OP_CONT, frame[10:], fin=True)
        pong = None
        deadline = time.monotonic() + arguments.timeout
        while pong is None or not any(f.op == imwire.OP_HELLO_OK for f in raw.frames):
            check(time.monotonic() < deadline, f"pong {pong!r}, frames {raw.frames} after {arguments.timeout:.0f} s")
            try:
                fin, rsv, opcode, payload = raw.recv_frame(max(0.05, deadline - time.monotonic()))
            except socket.timeout:
                continue
            except EOFError:
                raise Failure("connection closed")
            if opcode == OP_PONG:
                pong = payload
            elif opcode in (OP_BINARY, OP_CONT):
                raw.frames += raw.reader.feed(payload)
            elif opcode == OP_CLOSE:
                raise Failure(f"closed with {describe_close(payload)}")
        check(pong == b"interleaved-42", f"pong payload {pong!r}")
    finally:
        raw.close()


@case("pong-unsolicited-ignored")
def pong_unsolicited(arguments):
    raw = RawSocket(arguments.url, arguments.timeout)
    try:
        raw.send(OP_PONG, b"nobody asked")
        raw.hello()
    finally:
        raw.close()


def close_case(arguments, code, send, allow_tlv=True, hello_first=False):
    raw = RawSocket(arguments.url, arguments.timeout)
    try:
        if hello_first:
            raw.hello()
        send(raw)
        raw.expect_close(code, allow_tlv=allow_tlv)
    finally:
        raw.close()


@case("unmasked-client-frame-1002")
def unmasked(arguments):
    close_case(arguments, 1002, lambda raw: raw.send(OP_BINARY, imwire.hello(1), mask=False))


@case("text-message-1003")
def text_message(arguments):
    close_case(arguments, 1003, lambda raw: raw.send(OP_TEXT, b'{"op":"hello"}'))


@case("reserved-bits-1002")
def reserved_bits(arguments):
    close_case(arguments, 1002, lambda raw: raw.send(OP_BINARY, imwire.hello(1), rsv=0b100))


@case("reserved-opcode-1002")
def reserved_opcode(arguments):
    close_case(arguments, 1002, lambda raw: raw.send(0x3, b"x"))


@case("continuation-without-start-1002")
def continuation_without_start(arguments):
    close_case(arguments, 1002, lambda raw: raw.send(OP_CONT, imwire.hello(1), fin=True))


@case("new-message-inside-fragmented-1002")
def new_message_inside_fragmented(arguments):
    def send(raw):
        frame = imwire.hello(1)
        raw.send(OP_BINARY, frame[:10], fin=False)
        raw.send(OP_BINARY, frame[10:], fin=True)  # must be a continuation
    close_case(arguments, 1002, send)


@case("fragmented-control-frame-1002")
def fragmented_control(arguments):
    close_case(arguments, 1002, lambda raw: raw.send(OP_PING, b"abc", fin=False))


@case("control-frame-126-bytes-1002")
def control_126(arguments):
    close_case(arguments, 1002, lambda raw: raw.send(OP_PING, b"p" * 126))


@case("oversized-frame-1009")
def oversized(arguments):
    raw = RawSocket(arguments.url, arguments.timeout)
    try:
        hello_ok = raw.hello()
        max_body = hello_ok.int(imwire.TAG_MAX_BODY_LENGTH) or arguments.max_body
        limit = max_body + imwire.HEADER_LENGTH
        # The header alone declares limit+1 bytes; a little of the payload follows, not all.
        header = RawSocket.frame(OP_BINARY, b"", declared_length=limit + 1)
        raw.send_raw(header[:2] + header[2:10] + os.urandom(4) + b"\0" * 1024)
        raw.expect_close(1009)
    finally:
        raw.close()


@case("fragments-over-limit-1009")
def fragments_over_limit(arguments):
    """A message whose fragments add up to more than the limit, each under it, never ending."""
    raw = RawSocket(arguments.url, arguments.timeout)
    try:
        hello_ok = raw.hello()
        max_body = hello_ok.int(imwire.TAG_MAX_BODY_LENGTH) or arguments.max_body
        limit = max_body + imwire.HEADER_LENGTH
        # A TLV frame announcing a body of max_body bytes, then its body as fragments well past it.
        # The gateway may close on the TLV limit (ERROR BODY_TOO_LARGE, close 1000) or on the
        # message size (1009): either is a documented answer; hanging or crashing is not.
        chunk = 64 * 1024
        sent = 0
        opcode = OP_BINARY
        closed = None
        try:
            while sent <= limit + chunk:
                raw.send(opcode, b"\0" * chunk, fin=False)
                opcode = OP_CONT
                sent += chunk
        except OSError:
            pass
        deadline = time.monotonic() + arguments.timeout
        while closed is None and time.monotonic() < deadline:
            try:
                fin, rsv, op, payload = raw.recv_frame(max(0.05, deadline - time.monotonic()))
            except socket.timeout:
                continue
            except (EOFError, ConnectionResetError):
                raise Failure("TCP closed without a close frame")
            if op == OP_CLOSE:
                closed = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else None
        check(closed in (1000, 1002, 1009), f"close {closed}, expected 1009 (or 1000/1002 after a TLV framing error)")
    finally:
        raw.close()


@case("ping-flood-1008")
def ping_flood(arguments):
    raw = RawSocket(arguments.url, arguments.timeout)
    try:
        raw.send_raw(b"".join(RawSocket.frame(OP_PING, str(i).encode()) for i in range(50)))
        raw.expect_close(1008)
    finally:
        raw.close()


@case("ten-pings-allowed")
def ten_pings(arguments):
    raw = RawSocket(arguments.url, arguments.timeout)
    try:
        raw.send_raw(b"".join(RawSocket.frame(OP_PING, str(i).encode()) for i in range(10)))
        pongs = []
        deadline = time.monotonic() + arguments.timeout
        while len(pongs) < 10:
            check(time.monotonic() < deadline, f"{len(pongs)} pongs of 10")
            try:
                fin, rsv, opcode, payload = raw.recv_frame(max(0.05, deadline - time.monotonic()))
            except socket.timeout:
                continue
            except EOFError:
                raise Failure(f"connection closed after {len(pongs)} pongs")
            check(opcode != OP_CLOSE, f"closed with {describe_close(payload)} after {len(pongs)} pongs")
            if opcode == OP_PONG:
                pongs.append(payload)
        check(pongs == [str(i).encode() for i in range(10)], f"pong payloads {pongs}")
        raw.hello()
    finally:
        raw.close()


@case("closing-handshake-1000")
def closing_handshake(arguments):
    raw = RawSocket(arguments.url, arguments.timeout)
    try:
        raw.hello()
        raw.send(OP_CLOSE, struct.pack(">H", 1000))
        received, _ = raw.expect_close(1000, allow_tlv=True)
    finally:
        raw.close()


@case("close-with-reason")
def close_with_reason(arguments):
    raw = RawSocket(arguments.url, arguments.timeout)
    try:
        raw.hello()
        raw.send(OP_CLOSE, struct.pack(">H", 1000) + "done for today ✓".encode())
        raw.expect_close(1000)
    finally:
        raw.close()


@case("close-code-echoed-4000")
def close_code_echoed(arguments):
    raw = RawSocket(arguments.url, arguments.timeout)
    try:
        raw.send(OP_CLOSE, struct.pack(">H", 4000) + b"app")
        raw.expect_close(4000)
    finally:
        raw.close()


@case("close-library-client")
async def close_library(arguments):
    connection = await open_ws(arguments)
    await connection.close(1000, "bye")
    check(connection.close_code == 1000, f"close code {connection.close_code}")
    received = connection.protocol.close_rcvd
    check(received is not None and received.code == 1000, f"received close {received}")


@case("tlv-framing-error-error-then-1000")
def tlv_framing_error(arguments):
    raw = RawSocket(arguments.url, arguments.timeout)
    try:
        raw.send(OP_BINARY, bytes.fromhex("CAFEBABE010000010000000367748580000000010000000000000000"))
        raw.expect_close(1000)
        errors = [f for f in raw.frames if f.op == imwire.OP_ERROR]
        check(errors and errors[0].error_code == imwire.ERRORS["BAD_MAGIC"],
              f"expected ERROR BAD_MAGIC before the close, got {raw.frames}")
    finally:
        raw.close()


@case("heartbeat-ack-before-login")
def heartbeat_before_login(arguments):
    raw = RawSocket(arguments.url, arguments.timeout)
    try:
        raw.send(OP_BINARY, imwire.heartbeat(77, session=9))
        ack = raw.recv_tlv(lambda f: f.type == imwire.ACK, "ACK")
        check(ack.sequence == 77 and ack.session == 9, f"ACK seq {ack.sequence} sid {ack.session}")
    finally:
        raw.close()


@case("login")
async def full_login(arguments):
    connection = await open_ws(arguments)
    try:
        client = TLVClient(connection, arguments.timeout)
        await connection.send(imwire.hello(client.next_sequence()))
        await client.recv_tlv(lambda f: f.op == imwire.OP_HELLO_OK, "HELLO_OK")
        await connection.send(imwire.login(client.next_sequence(), arguments.token, "conformance"))
        reply = await client.recv_tlv(lambda f: f.op in (imwire.OP_LOGIN_OK, imwire.OP_ERROR), "LOGIN_OK")
        check(reply.op == imwire.OP_LOGIN_OK, f"LOGIN refused: {reply.describe()}")
        check(reply.text(imwire.TAG_USER_ID), "LOGIN_OK without USER_ID")
        check(reply.text(imwire.TAG_DEVICE_ID) in (None, "conformance"), f"device {reply.text(imwire.TAG_DEVICE_ID)}")
        beat = client.next_sequence()
        await connection.send(imwire.heartbeat(beat))
        await client.recv_tlv(lambda f: f.type == imwire.ACK and f.sequence == beat, "heartbeat ACK")
    finally:
        await connection.close()


@case("logout-ack-then-1000")
def logout(arguments):
    raw = RawSocket(arguments.url, arguments.timeout)
    try:
        raw.hello()
        raw.login(arguments.token, "conformance-logout")
        sequence = raw.next_sequence()
        raw.send(OP_BINARY, imwire.logout(sequence))
        raw.expect_close(1000)
        check(any(f.type == imwire.ACK and f.sequence == sequence for f in raw.frames),
              f"no ACK of LOGOUT before the close (got {raw.frames})")
    finally:
        raw.close()


@case("slow-reader-does-not-stall-others")
def slow_reader(arguments):
    """A client that never reads while the gateway has much to send it: heartbeats (each
    answered by an ACK) until its socket buffers are full. Another client must still get
    HELLO_OK at once."""
    slow = RawSocket(arguments.url, arguments.timeout, rcvbuf=4096)
    stop = threading.Event()
    sent = [0]

    def flood():
        batch = b"".join(RawSocket.frame(OP_BINARY, imwire.heartbeat(i + 1)) for i in range(256))
        slow.sock.settimeout(0.5)
        deadline = time.monotonic() + arguments.slow_seconds
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                slow.sock.sendall(batch)
                sent[0] += 256
            except socket.timeout:
                continue  # the gateway stopped reading from us: that is what we want
            except OSError:
                return  # the gateway closed the slow connection: also a fair answer

    try:
        slow.hello()
        slow.login(arguments.token, "conformance-slow")
        thread = threading.Thread(target=flood, daemon=True)
        thread.start()
        thread.join(min(3.0, arguments.slow_seconds))  # let the buffers fill
        started = time.monotonic()
        other = RawSocket(arguments.url, arguments.timeout)
        try:
            other.hello()
            elapsed = time.monotonic() - started
        finally:
            other.close()
        stop.set()
        thread.join(arguments.timeout)
        check(sent[0] > 0, "could not send anything on the slow connection")
        check(elapsed < arguments.quick, f"HELLO_OK took {elapsed:.2f} s for another client "
                                         f"(limit {arguments.quick} s) after {sent[0]} heartbeats unread")
        return f"{sent[0]} heartbeats sent unread; another client's HELLO_OK in {elapsed * 1000:.0f} ms"
    finally:
        stop.set()
        slow.close()


# ---------------------------------------------------------------------------------------------

async def run(arguments):
    passed = failed = 0
    selected = [(name, function) for name, function in CASES
                if not arguments.case or any(pattern in name for pattern in arguments.case)]
    for name, function in selected:
        try:
            if asyncio.iscoroutinefunction(function):
                note = await asyncio.wait_for(function(arguments), arguments.timeout * 4 + arguments.slow_seconds)
            else:
                note = await asyncio.to_thread(function, arguments)
            print(f"PASS {name}" + (f" ({note})" if note else ""), flush=True)
            passed += 1
        except Failure as failure:
            print(f"FAIL {name}: {failure}", flush=True)
            failed += 1
        except Exception as error:  # noqa: BLE001: every case gets an outcome
            why = f"{type(error).__name__}: {error}"
            if arguments.verbose:
                traceback.print_exc()
            print(f"FAIL {name}: {why}", flush=True)
            failed += 1
    print(f"{passed} passed, {failed} failed", flush=True)
    return failed


def main():
    parser = argparse.ArgumentParser(
        description="RFC 6455 conformance of imgw's WebSocket listener, from an independent client "
                    "(websockets + hand-built frames). Prints PASS/FAIL per case and 'N passed, N failed'.")
    parser.add_argument("--url", help="the listener, e.g. ws://127.0.0.1:6980/im")
    parser.add_argument("--token", help="a valid login token (HS256 JWT) of some user")
    parser.add_argument("--origin-allowed", help="an origin listed in listen.websocket.allowed_origins, to check it is accepted")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for each answer (default 5)")
    parser.add_argument("--max-body", type=int, default=1 << 20,
                        help="the gateway's body limit if HELLO_OK does not announce one (default 1048576)")
    parser.add_argument("--slow-seconds", type=float, default=8.0,
                        help="at most this long the slow reader sends unread heartbeats (default 8)")
    parser.add_argument("--quick", type=float, default=2.0,
                        help="seconds within which another client must get HELLO_OK next to the slow reader (default 2)")
    parser.add_argument("--case", action="append", help="run only cases whose name contains this (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="print tracebacks of unexpected errors")
    arguments = parser.parse_args()
    if arguments.list:
        for name, _ in CASES:
            print(name)
        return 0
    if not arguments.url or not arguments.token:
        parser.error("--url and --token are required")
    if websockets is None:
        print("error: the websockets package is missing (make test-deps installs it into .build/web-venv)", file=sys.stderr)
        return 2
    failed = asyncio.run(run(arguments))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
