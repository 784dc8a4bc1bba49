#!/usr/bin/env python3
"""IMWire frames in Python, written from docs/PROTOCOL.md, for the tests under Tests/web.

A frame is a 28-byte big-endian header (magic 0xDECAFBAD, version 1.0, type, sequence,
timestamp, encrypt, compress, session, body length, CRC-32 of the body as transmitted)
followed by a TLV body (u16 tag, u32 length, value; tag 0xFFFF is a container).

    python3 Tests/web/imwire.py --self-test

checks encoding and decoding against Tests/IMWireTests/Fixtures/vectors.json (the vectors that
docs/PROTOCOL.md section 12 renders), and prints `N passed, N failed`.

Only the standard library is used (struct, zlib), so the module runs with any python3.
"""

import argparse
import json
import os
import struct
import sys
import time
import zlib

MAGIC = 0xDECAFBAD
HEADER_LENGTH = 28
HEADER = struct.Struct(">IBBHIIBBHII")  # magic, major, minor, type, seq, ts, enc, comp, session, length, crc
DEFAULT_MAX_BODY = 1 << 20

# Frame types (section 2.2).
DATA, HEARTBEAT, ACK, CONTROL, READ_RECEIPT = 0, 1, 2, 3, 4
TYPE_NAMES = {DATA: "DATA", HEARTBEAT: "HEARTBEAT", ACK: "ACK", CONTROL: "CONTROL", READ_RECEIPT: "READ_RECEIPT"}

# Tags (section 3.1).
TAGS = {
    "VERSION_REQUEST": 0x0001, "VERSION_RESPONSE": 0x0002, "SEED_READ_RECEIPT": 0x0010, "GROUP": 0x0011,
    "FILE": 0x0012, "USER_STATUS": 0x0020, "TYPING": 0x0021, "AUTH_TOKEN": 0x0100, "DEVICE_ID": 0x0101,
    "USER_ID": 0x0102, "ERROR_CODE": 0x0103, "ERROR_MESSAGE": 0x0104, "OP": 0x0105, "REF_SEQUENCE": 0x0106,
    "HEARTBEAT_INTERVAL": 0x0107, "MAX_BODY_LENGTH": 0x0108, "RECEIPT_NOTICES": 0x0109, "TOKEN_EXPIRY": 0x010A,
    "RETRY_AFTER": 0x010B, "CARBONS": 0x010C, "SESSION_RESUMED": 0x010D, "SYNC_STATUS": 0x010E,
    "TO": 0x0200, "FROM": 0x0201, "MESSAGE_ID": 0x0202, "SERVER_TIME": 0x0203, "RESEND": 0x0204, "QOS": 0x0205,
    "RECEIPT_KIND": 0x0206, "CARBON": 0x0207, "STREAM_OFFSET": 0x0208, "STREAM_EPOCH": 0x0209, "ARCHIVED": 0x020A,
    "BEFORE": 0x020B, "AFTER": 0x020C, "LIMIT": 0x020D, "COMPLETE": 0x020E, "UNREAD": 0x020F,
    "READ_THROUGH": 0x0210, "DELETED": 0x0211, "LAST_SEEN": 0x0300, "LAT": 0x0400, "LON": 0x0401, "ACC": 0x0402,
    "TST": 0x0403, "ALT": 0x0404, "VEL": 0x0405, "COG": 0x0406, "BATT": 0x0407, "DURATION": 0x0408,
    "TOPIC": 0x0500, "PAYLOAD": 0x0501, "RETAIN": 0x0502, "TEXT": 0x1001, "IMAGE": 0x1002,
    "FILE_CONTENT": 0x1003, "VOICE": 0x1004, "VIDEO": 0x1005, "LOCATION_CARD": 0x1006, "CUSTOM": 0x1007,
    "CONTAINER": 0xFFFF,
}
globals().update({"TAG_" + name: value for name, value in TAGS.items()})
TAG_NAMES = {value: name for name, value in TAGS.items()}

# Operations (section 4).
OPS = {
    "HELLO": 0x0001, "HELLO_OK": 0x0002, "LOGIN": 0x0010, "LOGIN_OK": 0x0011, "LOGOUT": 0x0012, "KICK": 0x0013,
    "ERROR": 0x0014, "TOKEN_REFRESH": 0x0015, "SYNC": 0x0016, "HISTORY": 0x0017, "HISTORY_PAGE": 0x0018,
    "CONVERSATIONS": 0x0019, "CONVERSATION_LIST": 0x001A, "READ_MARKER": 0x001B, "DELETE": 0x001C,
    "PRESENCE_WATCH": 0x0020, "PRESENCE_UNWATCH": 0x0021, "PRESENCE": 0x0022,
    "LOCATION_SHARE_START": 0x0030, "LOCATION_SHARE_STOP": 0x0031, "LOCATION_UPDATE": 0x0032,
    "LOCATION_WATCH": 0x0033, "LOCATION_UNWATCH": 0x0034, "LOCATION": 0x0035,
    "SUBSCRIBE": 0x0040, "UNSUBSCRIBE": 0x0041, "PUBLISH": 0x0042, "CHAT": 0x0050, "DELIVERY": 0x0051,
    "RECEIPT": 0x0060, "RECEIPT_NOTICE": 0x0061, "TYPING": 0x0070,
}
globals().update({"OP_" + name: value for name, value in OPS.items()})
OP_NAMES = {value: name for name, value in OPS.items()}

# Error codes (section 7).
ERRORS = {
    "BAD_MAGIC": 100, "UNSUPPORTED_VERSION": 101, "BAD_CRC": 102, "BODY_TOO_LARGE": 103, "MALFORMED_FRAME": 104,
    "UNKNOWN_TYPE": 105, "UNSUPPORTED_ENCRYPTION": 106, "UNSUPPORTED_COMPRESSION": 107,
    "DECOMPRESSION_FAILED": 108, "NOT_LOGGED_IN": 200, "AUTH_FAILED": 201, "TOKEN_EXPIRED": 202,
    "FORBIDDEN": 203, "INVALID_USER_ID": 204, "LOGIN_TIMEOUT": 205, "IDLE_TIMEOUT": 206,
    "SESSION_TAKEN_OVER": 207, "ALREADY_LOGGED_IN": 208, "DISCONNECTED": 209, "BAD_REQUEST": 300,
    "UNKNOWN_OPERATION": 301, "RATE_LIMITED": 302, "INVALID_TOPIC": 303, "QOS_NOT_SUPPORTED": 304,
    "MESSAGE_ID_REUSED": 305, "LIMIT_REACHED": 306, "INTERNAL_ERROR": 500, "SERVER_SHUTTING_DOWN": 501,
    "BROKER_UNAVAILABLE": 502, "STORE_UNAVAILABLE": 503,
}
ERROR_NAMES = {value: name for name, value in ERRORS.items()}

FEATURE_ZLIB = 0x0001

CONTENT_TAGS = range(0x1001, 0x1008)
NAMING_ITEMS = {TAGS["VERSION_REQUEST"]: OPS["HELLO"], TAGS["VERSION_RESPONSE"]: OPS["HELLO_OK"],
                TAGS["AUTH_TOKEN"]: OPS["LOGIN"], TAGS["USER_ID"]: OPS["LOGIN_OK"], TAGS["ERROR_CODE"]: OPS["ERROR"]}


class FrameError(Exception):
    """A framing error (section 2.1 steps 1 to 5): `name` is the error code's name."""

    def __init__(self, name, detail):
        super().__init__(f"{name}: {detail}")
        self.name = name
        self.code = ERRORS[name]
        self.detail = detail


# ---------------------------------------------------------------------------------------------
# Values and items

def u8(value): return struct.pack(">B", value)
def u16(value): return struct.pack(">H", value)
def u32(value): return struct.pack(">I", value)
def u64(value): return struct.pack(">Q", value)
def i32(value): return struct.pack(">i", value)
def f64(value): return struct.pack(">d", value)
def utf8(value): return value.encode("utf-8")
def version(major=1, minor=0, features=0): return struct.pack(">HH", (major << 8) | minor, features)


def item(tag, value):
    """One TLV item: tag (u16), length (u32), value bytes."""
    if isinstance(value, str):
        value = value.encode("utf-8")
    return struct.pack(">HI", tag, len(value)) + bytes(value)


def container(*items):
    return item(TAGS["CONTAINER"], b"".join(items))


def body(*items):
    return b"".join(items)


def parse_items(data, depth=0, top_level=True, offset=0):
    """The items of a body or container: a list of (tag, value) where a container's value is
    the list of its items. Raises FrameError MALFORMED_FRAME as section 3 says."""
    items = []
    seen = set()
    position = 0
    while position < len(data):
        if len(data) - position < 6:
            raise FrameError("MALFORMED_FRAME", f"malformed TLV at body offset {offset + position}: "
                                                f"{len(data) - position} trailing byte(s), not an item header")
        tag, length = struct.unpack_from(">HI", data, position)
        start = position + 6
        if length > len(data) - start:
            raise FrameError("MALFORMED_FRAME", f"malformed TLV at body offset {offset + position}: item "
                                                f"{TAG_NAMES.get(tag, hex(tag))} length {length} exceeds the "
                                                f"{len(data) - start} byte(s) left")
        value = bytes(data[start:start + length])
        if top_level:
            if tag in seen:
                raise FrameError("MALFORMED_FRAME", f"malformed TLV at body offset {offset + position}: "
                                                    f"duplicate top-level {TAG_NAMES.get(tag, hex(tag))}")
            seen.add(tag)
        if tag == TAGS["CONTAINER"]:
            if depth + 1 > 4:
                raise FrameError("MALFORMED_FRAME", f"malformed TLV at body offset {offset + position}: "
                                                    f"container nesting depth {depth + 1} above 4")
            value = parse_items(value, depth + 1, False, offset + start)
        items.append((tag, value))
        position = start + length
    return items


def first(items, tag):
    """The value of the first item with `tag`, or None."""
    for item_tag, value in items:
        if item_tag == tag:
            return value
    return None


def as_int(value):
    return None if value is None else int.from_bytes(value, "big")


def as_text(value):
    return None if value is None else value.decode("utf-8")


# ---------------------------------------------------------------------------------------------
# Frames

class Frame:
    """A decoded frame: header fields, the body as transmitted, and its items (inflated)."""

    def __init__(self, type, sequence, body=b"", session=1, timestamp=0, encrypt=0, compress=0,
                 major=1, minor=0, crc=None, items=None):
        self.type = type
        self.sequence = sequence
        self.body = body
        self.session = session
        self.timestamp = timestamp
        self.encrypt = encrypt
        self.compress = compress
        self.major = major
        self.minor = minor
        self.crc = crc if crc is not None else (zlib.crc32(body) & 0xFFFFFFFF if body else 0)
        self.items = items if items is not None else []

    def get(self, tag):
        return first(self.items, tag)

    def int(self, tag):
        return as_int(self.get(tag))

    def text(self, tag):
        return as_text(self.get(tag))

    @property
    def op(self):
        """The operation: OP, or the implied one (section 4), or None."""
        op = self.int(TAGS["OP"])
        if op is not None:
            return op
        tags = [tag for tag, _ in self.items]
        if self.type == DATA:
            if TAGS["TO"] in tags: return OPS["CHAT"]
            if TAGS["FROM"] in tags: return OPS["DELIVERY"]
            if TAGS["GROUP"] in tags: return OPS["CHAT"]
        elif self.type == READ_RECEIPT:
            if TAGS["TO"] in tags: return OPS["RECEIPT"]
            if TAGS["FROM"] in tags: return OPS["RECEIPT_NOTICE"]
        elif self.type == CONTROL:
            for tag in tags:
                if tag in NAMING_ITEMS:
                    return NAMING_ITEMS[tag]
        return None

    @property
    def error_code(self):
        return self.int(TAGS["ERROR_CODE"])

    def describe(self):
        name = TYPE_NAMES.get(self.type, str(self.type))
        op = self.op
        parts = [f"{name} seq={self.sequence} sid={self.session}"]
        if op is not None:
            parts.append(OP_NAMES.get(op, hex(op)))
        code = self.error_code
        if code is not None:
            parts.append(f"{ERROR_NAMES.get(code, code)} {self.text(TAGS['ERROR_MESSAGE']) or ''}".strip())
        return " ".join(parts)

    def __repr__(self):
        return f"<Frame {self.describe()}>"


def encode_frame(type, sequence, body=b"", session=1, timestamp=None, encrypt=0, compress=0,
                 major=1, minor=0, crc=None, length=None):
    """A frame's bytes. `compress=1` deflates `body` (the TLV) first. `crc` and `length`
    override the computed fields (for malformed frames)."""
    if timestamp is None:
        timestamp = int(time.time())
    if compress == 1:
        body = zlib.compress(body)
    if crc is None:
        crc = zlib.crc32(body) & 0xFFFFFFFF if body else 0
    if length is None:
        length = len(body)
    header = HEADER.pack(MAGIC, major, minor, type, sequence & 0xFFFFFFFF, timestamp & 0xFFFFFFFF,
                         encrypt, compress, session & 0xFFFF, length, crc)
    return header + body


def decode_header(data, max_body=DEFAULT_MAX_BODY):
    """Section 2.1 steps 1 and 2 on the first 28 bytes: the header fields, or FrameError."""
    magic, major, minor, type, sequence, timestamp, encrypt, compress, session, length, crc = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise FrameError("BAD_MAGIC", f"bad magic 0x{magic:08X}")
    if major != 1:
        raise FrameError("UNSUPPORTED_VERSION", f"unsupported version {major}.{minor}")
    if type not in TYPE_NAMES:
        raise FrameError("UNKNOWN_TYPE", f"unknown frame type {type}")
    if encrypt not in (0, 1):
        raise FrameError("UNSUPPORTED_ENCRYPTION", f"unsupported encrypt type {encrypt}")
    if compress not in (0, 1):
        raise FrameError("UNSUPPORTED_COMPRESSION", f"unsupported compress type {compress}")
    if length > max_body:
        raise FrameError("BODY_TOO_LARGE", f"body length {length} above limit {max_body}")
    if type == HEARTBEAT:
        valid = length == 0
    elif compress == 1:
        valid = length >= 8
    else:
        valid = length == 0 or length >= 6 or (type == ACK and length == 4)
    if not valid:
        raise FrameError("MALFORMED_FRAME", f"body length {length} invalid for {TYPE_NAMES[type]}")
    return dict(major=major, minor=minor, type=type, sequence=sequence, timestamp=timestamp,
                encrypt=encrypt, compress=compress, session=session, length=length, crc=crc)


def inflate(data, max_body=DEFAULT_MAX_BODY):
    decompressor = zlib.decompressobj()
    try:
        out = decompressor.decompress(data, max_body + 1)
    except zlib.error as error:
        raise FrameError("DECOMPRESSION_FAILED", f"zlib inflate failed ({error})")
    if len(out) > max_body:
        raise FrameError("BODY_TOO_LARGE", f"body inflates beyond limit {max_body}")
    if not decompressor.eof or decompressor.unused_data or decompressor.unconsumed_tail:
        raise FrameError("DECOMPRESSION_FAILED", "zlib inflate failed (not exactly one zlib stream)")
    return out


def decode_frame(data, max_body=DEFAULT_MAX_BODY):
    """One whole frame from `data` (exactly one frame) or FrameError."""
    if len(data) < HEADER_LENGTH:
        raise FrameError("MALFORMED_FRAME", "stream cut inside a frame header")
    header = decode_header(data, max_body)
    raw = bytes(data[HEADER_LENGTH:HEADER_LENGTH + header["length"]])
    if len(raw) < header["length"] or len(data) > HEADER_LENGTH + header["length"]:
        raise FrameError("MALFORMED_FRAME", "data is not exactly one frame")
    return _finish(header, raw, max_body)


def _finish(header, raw, max_body):
    crc = zlib.crc32(raw) & 0xFFFFFFFF if raw else 0
    if crc != header["crc"]:
        raise FrameError("BAD_CRC", f"bad CRC32: header 0x{header['crc']:08X}, body 0x{crc:08X}")
    tlv = inflate(raw, max_body) if header["compress"] == 1 else raw
    items = []
    if header["type"] == ACK and header["length"] == 4 and header["compress"] == 0:
        items = []  # the seed client's ACK form (section 5.4): 4 bytes, not TLV
    elif tlv:
        items = parse_items(tlv)
    length = header.pop("length")
    return Frame(body=raw, items=items, **header)


class FrameReader:
    """Buffers a byte stream (TCP reads, or WebSocket binary payloads) and yields whole frames."""

    def __init__(self, max_body=16 << 20):
        self.buffer = bytearray()
        self.max_body = max_body

    def feed(self, data):
        self.buffer += data
        frames = []
        while len(self.buffer) >= HEADER_LENGTH:
            header = decode_header(self.buffer, self.max_body)
            total = HEADER_LENGTH + header["length"]
            if len(self.buffer) < total:
                break
            raw = bytes(self.buffer[HEADER_LENGTH:total])
            del self.buffer[:total]
            frames.append(_finish(header, raw, self.max_body))
        return frames


# ---------------------------------------------------------------------------------------------
# Requests a client sends

def hello(sequence, session=1, features=0):
    return encode_frame(CONTROL, sequence, body(item(TAGS["OP"], u16(OPS["HELLO"])),
                                                item(TAGS["VERSION_REQUEST"], version(1, 0, features))), session)


def login(sequence, token, device=None, session=1, receipt_notices=None, carbons=None):
    items = [item(TAGS["OP"], u16(OPS["LOGIN"])), item(TAGS["AUTH_TOKEN"], utf8(token))]
    if device is not None:
        items.append(item(TAGS["DEVICE_ID"], utf8(device)))
    if receipt_notices is not None:
        items.append(item(TAGS["RECEIPT_NOTICES"], u8(receipt_notices)))
    if carbons is not None:
        items.append(item(TAGS["CARBONS"], u8(carbons)))
    return encode_frame(CONTROL, sequence, body(*items), session)


def logout(sequence, session=1):
    return encode_frame(CONTROL, sequence, item(TAGS["OP"], u16(OPS["LOGOUT"])), session)


def heartbeat(sequence, session=1):
    return encode_frame(HEARTBEAT, sequence, b"", session)


def ack(sequence, session=1, items=b""):
    return encode_frame(ACK, sequence, items, session)


def chat(sequence, to, message_id, text, session=1, group=None):
    target = item(TAGS["GROUP"], utf8(group)) if group is not None else item(TAGS["TO"], utf8(to))
    return encode_frame(DATA, sequence, body(target, item(TAGS["MESSAGE_ID"], utf8(message_id)),
                                             item(TAGS["TEXT"], utf8(text))), session)


def presence_watch(sequence, users, session=1):
    return encode_frame(CONTROL, sequence, body(item(TAGS["OP"], u16(OPS["PRESENCE_WATCH"])),
                                                container(*[item(TAGS["USER_ID"], utf8(u)) for u in users])), session)


def typing(sequence, to, state=1, session=1):
    return encode_frame(CONTROL, sequence, body(item(TAGS["OP"], u16(OPS["TYPING"])), item(TAGS["TO"], utf8(to)),
                                                item(TAGS["TYPING"], u8(state))), session)


# ---------------------------------------------------------------------------------------------
# Self-test against the vectors

def _value_bytes(spec):
    kind, value = spec["type"], spec.get("value")
    if kind == "u8": return u8(value)
    if kind == "u16": return u16(value)
    if kind == "u32": return u32(value)
    if kind == "u64": return u64(value)
    if kind == "i32": return i32(value)
    if kind == "f64": return f64(value)
    if kind == "utf8": return utf8(value)
    if kind == "bytes": return bytes.fromhex(value)
    if kind == "version": return version(value["major"], value["minor"], value["features"])
    if kind == "container": return b"".join(_item_bytes(child) for child in spec["items"])
    raise ValueError(f"unknown value type {kind}")


def _item_bytes(spec):
    return item(int(spec["tag"], 16), _value_bytes(spec))


def _compare_items(decoded, specs, path="body"):
    if len(decoded) != len(specs):
        return f"{path}: {len(decoded)} items, expected {len(specs)}"
    for index, ((tag, value), spec) in enumerate(zip(decoded, specs)):
        if tag != int(spec["tag"], 16):
            return f"{path}[{index}]: tag 0x{tag:04X}, expected {spec['tag']}"
        if spec["type"] == "container":
            problem = _compare_items(value, spec["items"], f"{path}[{index}]")
            if problem:
                return problem
        elif value != _value_bytes(spec):
            return f"{path}[{index}] {spec['name']}: {value.hex()} != {_value_bytes(spec).hex()}"
    return None


def self_test(vectors_path):
    with open(vectors_path) as file:
        catalog = json.load(file)
    passed = failed = 0

    def report(name, problem):
        nonlocal passed, failed
        if problem:
            failed += 1
            print(f"FAIL {name}: {problem}")
        else:
            passed += 1
            print(f"PASS {name}")

    report("crc32-check-value", None if zlib.crc32(b"123456789") == 0xCBF43926 else "crc32(123456789) != 0xCBF43926")
    for vector in catalog["vectors"]:
        name, header, expected = vector["name"], vector["header"], bytes.fromhex(vector["hex"])
        # Encoding: from the header fields and the items (or the raw body).
        if "rawBody" in vector:
            tlv = bytes.fromhex(vector["rawBody"])
        else:
            tlv = b"".join(_item_bytes(spec) for spec in vector["items"])
        problem = None
        if header["compress"] == 1:
            # Deflate output depends on the level; the frame's own compressed body must still
            # inflate to our TLV, and re-framing that body must give the same bytes.
            raw = expected[HEADER_LENGTH:]
            if zlib.decompress(raw) != tlv:
                problem = "inflated body differs from the encoded items"
            encoded = encode_frame(header["type"], header["sequence"], b"", header["session"], header["timestamp"],
                                   header["encrypt"], 0, header["versionMajor"], header["versionMinor"])
            encoded = encoded[:17] + bytes([1]) + encoded[18:20] + struct.pack(">II", len(raw), zlib.crc32(raw)) + raw
        else:
            encoded = encode_frame(header["type"], header["sequence"], tlv, header["session"], header["timestamp"],
                                   header["encrypt"], 0, header["versionMajor"], header["versionMinor"])
        if not problem and encoded != expected:
            problem = f"encoded {encoded.hex().upper()}\n  expected {vector['hex']}"
        report(f"encode {name}", problem)
        # Decoding: header fields, CRC, items; and through the stream reader, byte by byte.
        problem = None
        try:
            frame = decode_frame(expected)
            if (frame.type, frame.sequence, frame.session, frame.timestamp, frame.encrypt, frame.compress) != \
                    (header["type"], header["sequence"], header["session"], header["timestamp"], header["encrypt"],
                     header["compress"]):
                problem = "header fields differ"
            elif f"0x{frame.crc:08X}" != header["crc32"].upper().replace("0X", "0x"):
                problem = f"crc 0x{frame.crc:08X} != {header['crc32']}"
            elif "items" in vector:
                problem = _compare_items(frame.items, vector["items"])
            reader = FrameReader()
            frames = []
            for index in range(len(expected)):
                frames += reader.feed(expected[index:index + 1])
            if not problem and (len(frames) != 1 or frames[0].body != frame.body):
                problem = "the stream reader did not give back one identical frame"
        except FrameError as error:
            problem = f"decoding failed: {error}"
        report(f"decode {name}", problem)
    for vector in catalog["malformed"]:
        data = bytes.fromhex(vector["hex"])
        try:
            decode_frame(data)
            outcome = None
        except FrameError as error:
            outcome = error.name
        if vector["stage"] == "frame":
            problem = None if outcome == vector["errorName"] else f"got {outcome}, expected {vector['errorName']}"
        else:
            problem = None if outcome is None else f"framing error {outcome} for a message-stage vector"
        report(f"malformed {vector['name']}", problem)
    # Several frames in one chunk, and a frame split anywhere.
    stream = hello(1) + heartbeat(2) + chat(3, "bob", "m-1", "hi")
    reader = FrameReader()
    frames = reader.feed(stream[:5]) + reader.feed(stream[5:40]) + reader.feed(stream[40:])
    report("stream three frames", None if [f.op for f in frames] == [OPS["HELLO"], None, OPS["CHAT"]]
           and frames[1].type == HEARTBEAT else f"got {frames}")
    print(f"{passed} passed, {failed} failed")
    return failed == 0


def main():
    parser = argparse.ArgumentParser(description="IMWire frame building for the web tests (docs/PROTOCOL.md).")
    parser.add_argument("--self-test", action="store_true", help="check against the test vectors and exit")
    default_vectors = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "IMWireTests", "Fixtures",
                                   "vectors.json")
    parser.add_argument("--vectors", default=default_vectors, help="vectors.json (default: %(default)s)")
    arguments = parser.parse_args()
    if arguments.self_test:
        sys.exit(0 if self_test(arguments.vectors) else 1)
    parser.print_help()


if __name__ == "__main__":
    main()
