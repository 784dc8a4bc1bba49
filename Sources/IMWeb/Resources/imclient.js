// imclient.js: a JavaScript client for the IMGateway (imgw), over its WebSocket listener.
//
// One ES module, no build step, no dependencies. It runs in browsers and in node 20+ (which
// has no global WebSocket: pass one as the `WebSocket` option). It speaks the TLV protocol of
// docs/PROTOCOL.md (28-byte header, CRC-32, TLV items) inside binary WebSocket messages with
// the subprotocol `imgw.tlv.v1`, and mirrors the Swift IMClient (Sources/IMClient): an outbox
// of messages kept until ACKed, retransmitted with RESEND, reconnection with backoff and
// jitter, an adaptive heartbeat, de-duplication, catching up from the gateway's archive.
//
// Documentation: docs/JAVASCRIPT.md.
//
// ```js
// import { IMClient } from './imclient.js';
// const client = new IMClient({ url: 'ws://127.0.0.1:6980/im', token, deviceID: 'web' });
// client.addEventListener('message', (e) => console.log(e.detail.from, e.detail.text));
// await client.connect();
// await client.send('bob', 'hi');
// ```
//
// Not supported: zlib compression (the client never announces ZLIB, so the gateway never
// compresses; a compressed frame is refused with UNSUPPORTED_COMPRESSION), location sharing
// and generic publish/subscribe requests (incoming PUBLISH frames are ACKed and ignored).

// ---------------------------------------------------------------------------------------
// Protocol constants (PROTOCOL.md sections 2, 3.1, 4, 7)
// ---------------------------------------------------------------------------------------

/** The subprotocol the gateway's WebSocket listener requires. */
export const SUBPROTOCOL = 'imgw.tlv.v1';
/** The frame header's magic number. */
export const MAGIC = 0xdecafbad;
/** Bytes in a frame header. */
export const HEADER_LENGTH = 28;
/** The protocol version this client speaks. */
export const VERSION = { major: 1, minor: 0 };
/** The largest body any gateway may use (PROTOCOL.md 8): this client's receive limit. */
export const MAX_BODY_LENGTH = 10 * 1024 * 1024;

/** Frame types (header offset 6). */
export const FrameType = Object.freeze({ DATA: 0, HEARTBEAT: 1, ACK: 2, CONTROL: 3, READ_RECEIPT: 4 });
const FRAME_TYPE_NAMES = ['DATA', 'HEARTBEAT', 'ACK', 'CONTROL', 'READ_RECEIPT'];

/** TLV tags and their value types (PROTOCOL.md 3.1). */
const TAGS = [
  [0x0001, 'VERSION_REQUEST', 'version'], [0x0002, 'VERSION_RESPONSE', 'version'],
  [0x0010, 'SEED_READ_RECEIPT', 'u32'], [0x0011, 'GROUP', 'utf8'], [0x0012, 'FILE', 'bytes'],
  [0x0020, 'USER_STATUS', 'u8'], [0x0021, 'TYPING', 'u8'],
  [0x0100, 'AUTH_TOKEN', 'utf8'], [0x0101, 'DEVICE_ID', 'utf8'], [0x0102, 'USER_ID', 'utf8'],
  [0x0103, 'ERROR_CODE', 'u16'], [0x0104, 'ERROR_MESSAGE', 'utf8'], [0x0105, 'OP', 'u16'],
  [0x0106, 'REF_SEQUENCE', 'u32'], [0x0107, 'HEARTBEAT_INTERVAL', 'u16'],
  [0x0108, 'MAX_BODY_LENGTH', 'u32'], [0x0109, 'RECEIPT_NOTICES', 'u8'],
  [0x010a, 'TOKEN_EXPIRY', 'u64'], [0x010b, 'RETRY_AFTER', 'u32'], [0x010c, 'CARBONS', 'u8'],
  [0x010d, 'SESSION_RESUMED', 'u8'], [0x010e, 'SYNC_STATUS', 'u8'],
  [0x0200, 'TO', 'utf8'], [0x0201, 'FROM', 'utf8'], [0x0202, 'MESSAGE_ID', 'utf8'],
  [0x0203, 'SERVER_TIME', 'u64'], [0x0204, 'RESEND', 'u8'], [0x0205, 'QOS', 'u8'],
  [0x0206, 'RECEIPT_KIND', 'u8'], [0x0207, 'CARBON', 'u8'], [0x0208, 'STREAM_OFFSET', 'u64'],
  [0x0209, 'STREAM_EPOCH', 'u64'], [0x020a, 'ARCHIVED', 'u8'], [0x020b, 'BEFORE', 'u64'],
  [0x020c, 'AFTER', 'u64'], [0x020d, 'LIMIT', 'u16'], [0x020e, 'COMPLETE', 'u8'],
  [0x020f, 'UNREAD', 'u32'], [0x0210, 'READ_THROUGH', 'u64'], [0x0211, 'DELETED', 'u8'],
  [0x0300, 'LAST_SEEN', 'u64'],
  [0x0400, 'LAT', 'f64'], [0x0401, 'LON', 'f64'], [0x0402, 'ACC', 'u32'], [0x0403, 'TST', 'u64'],
  [0x0404, 'ALT', 'i32'], [0x0405, 'VEL', 'u16'], [0x0406, 'COG', 'u16'], [0x0407, 'BATT', 'u8'],
  [0x0408, 'DURATION', 'u32'],
  [0x0500, 'TOPIC', 'utf8'], [0x0501, 'PAYLOAD', 'bytes'], [0x0502, 'RETAIN', 'u8'],
  [0x1001, 'TEXT', 'utf8'], [0x1002, 'IMAGE', 'bytes'], [0x1003, 'FILE_CONTENT', 'bytes'],
  [0x1004, 'VOICE', 'bytes'], [0x1005, 'VIDEO', 'bytes'], [0x1006, 'LOCATION_CARD', 'bytes'],
  [0x1007, 'CUSTOM', 'bytes'],
  [0xffff, 'CONTAINER', 'container'],
];
/** Tag numbers by name, e.g. `Tag.MESSAGE_ID === 0x0202`. */
export const Tag = Object.freeze(Object.fromEntries(TAGS.map(([tag, name]) => [name, tag])));
const TAG_INFO = new Map(TAGS.map(([tag, name, type]) => [tag, { name, type }]));

/** The value type of `tag` (`'u8'`, `'utf8'`, `'container'`, ...); `'bytes'` for unknown tags. */
export function tagType(tag) {
  return TAG_INFO.get(tag)?.type ?? 'bytes';
}
/** The name of `tag` (`'TO'`), or `0xHHHH` for an unknown one. */
export function tagName(tag) {
  return TAG_INFO.get(tag)?.name ?? hex16(tag);
}

/** Operations (PROTOCOL.md 4), with the frame type each travels in. */
const OPS = [
  [0x0001, 'HELLO', 3], [0x0002, 'HELLO_OK', 3], [0x0010, 'LOGIN', 3], [0x0011, 'LOGIN_OK', 3],
  [0x0012, 'LOGOUT', 3], [0x0013, 'KICK', 3], [0x0014, 'ERROR', 3], [0x0015, 'TOKEN_REFRESH', 3],
  [0x0016, 'SYNC', 3], [0x0017, 'HISTORY', 3], [0x0018, 'HISTORY_PAGE', 3],
  [0x0019, 'CONVERSATIONS', 3], [0x001a, 'CONVERSATION_LIST', 3], [0x001b, 'READ_MARKER', 3],
  [0x001c, 'DELETE', 3], [0x0020, 'PRESENCE_WATCH', 3], [0x0021, 'PRESENCE_UNWATCH', 3],
  [0x0022, 'PRESENCE', 3], [0x0030, 'LOCATION_SHARE_START', 3], [0x0031, 'LOCATION_SHARE_STOP', 3],
  [0x0032, 'LOCATION_UPDATE', 3], [0x0033, 'LOCATION_WATCH', 3], [0x0034, 'LOCATION_UNWATCH', 3],
  [0x0035, 'LOCATION', 3], [0x0040, 'SUBSCRIBE', 3], [0x0041, 'UNSUBSCRIBE', 3],
  [0x0042, 'PUBLISH', 0], [0x0050, 'CHAT', 0], [0x0051, 'DELIVERY', 0], [0x0060, 'RECEIPT', 4],
  [0x0061, 'RECEIPT_NOTICE', 4], [0x0070, 'TYPING', 3],
];
/** Operation numbers by name, e.g. `Op.LOGIN === 0x0010`. */
export const Op = Object.freeze(Object.fromEntries(OPS.map(([op, name]) => [name, op])));
const OP_INFO = new Map(OPS.map(([op, name, frameType]) => [op, { name, frameType }]));

/** Error codes (PROTOCOL.md 7). */
export const ErrorCode = Object.freeze({
  BAD_MAGIC: 100, UNSUPPORTED_VERSION: 101, BAD_CRC: 102, BODY_TOO_LARGE: 103, MALFORMED_FRAME: 104,
  UNKNOWN_TYPE: 105, UNSUPPORTED_ENCRYPTION: 106, UNSUPPORTED_COMPRESSION: 107,
  DECOMPRESSION_FAILED: 108, NOT_LOGGED_IN: 200, AUTH_FAILED: 201, TOKEN_EXPIRED: 202, FORBIDDEN: 203,
  INVALID_USER_ID: 204, LOGIN_TIMEOUT: 205, IDLE_TIMEOUT: 206, SESSION_TAKEN_OVER: 207,
  ALREADY_LOGGED_IN: 208, DISCONNECTED: 209, BAD_REQUEST: 300, UNKNOWN_OPERATION: 301,
  RATE_LIMITED: 302, INVALID_TOPIC: 303, QOS_NOT_SUPPORTED: 304, MESSAGE_ID_REUSED: 305,
  LIMIT_REACHED: 306, INTERNAL_ERROR: 500, SERVER_SHUTTING_DOWN: 501, BROKER_UNAVAILABLE: 502,
  STORE_UNAVAILABLE: 503,
});
const ERROR_NAMES = new Map(Object.entries(ErrorCode).map(([name, code]) => [code, name]));
/** The name of a protocol error code (`'AUTH_FAILED'`), or `'ERROR_<code>'` for an unknown one. */
export function errorName(code) {
  return ERROR_NAMES.get(code) ?? `ERROR_${code}`;
}

/** Feature bits of HELLO / HELLO_OK (PROTOCOL.md 4.2). */
export const Feature = Object.freeze({
  ZLIB: 0x0001, AES: 0x0002, QOS2_CHAT: 0x0004, PRESENCE: 0x0008, LOCATION: 0x0010, PUBSUB: 0x0020,
  RECEIPTS: 0x0040, GROUPS: 0x0080, CARBONS: 0x0100, TYPING: 0x0200, ARCHIVE: 0x0400,
});

/** Typing states by wire value (PROTOCOL.md 6.13); 0 is "stopped", named `paused` here. */
export const TYPING_STATES = Object.freeze(['paused', 'typing', 'recording', 'away']);
const TYPING_ALIASES = { stopped: 0, paused: 0, typing: 1, recording: 2, away: 3 };
/** SYNC_STATUS names (PROTOCOL.md 6.14). */
export const SYNC_STATUSES = Object.freeze(['continued', 'new', 'epochChanged', 'expired', 'refused', 'unavailable']);
const CONTENT_KINDS = { 0x1001: 'text', 0x1002: 'image', 0x1003: 'file', 0x1004: 'voice', 0x1005: 'video', 0x1006: 'locationCard', 0x1007: 'custom' };

function hex16(n) {
  return '0x' + n.toString(16).toUpperCase().padStart(4, '0');
}
function hex32(n) {
  return '0x' + (n >>> 0).toString(16).toUpperCase().padStart(8, '0');
}

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

/**
 * A frame or message this side cannot accept (PROTOCOL.md 2.1, 7). `fatal` errors (framing,
 * codes 1xx) end the connection; the others concern one message.
 */
export class WireError extends Error {
  /**
   * @param {number} code a protocol error code (ErrorCode)
   * @param {string} message what is wrong
   * @param {object} [details] `sequence` and `session` of the offending frame, if known
   */
  constructor(code, message, details = {}) {
    super(message);
    this.name = 'WireError';
    this.code = code;
    this.codeName = errorName(code);
    this.fatal = code < 200;
    this.sequence = details.sequence;
    this.session = details.session;
  }
}

/**
 * Why an IMClient operation failed. `code` is the gateway's error code (a number such as 201
 * AUTH_FAILED) when the gateway refused, else one of the strings `'TIMEOUT'`,
 * `'DISCONNECTED'`, `'CANNOT_CONNECT'`, `'PROTOCOL_VIOLATION'`, `'CONNECTION_DEAD'`.
 * `codeName` is always a string (`'AUTH_FAILED'`, `'TIMEOUT'`); `kind` says what failed:
 * `'loginRefused'`, `'refused'` (a negative ACK), `'kicked'`, or the local kinds
 * `'timeout'`, `'disconnected'`, `'cannotConnect'`, `'protocolViolation'`, `'connectionDead'`.
 */
export class IMClientError extends Error {
  constructor(kind, code, message, extra = {}) {
    super(message || (typeof code === 'number' ? errorName(code) : String(code)));
    this.name = 'IMClientError';
    this.kind = kind;
    this.code = code;
    this.codeName = typeof code === 'number' ? errorName(code) : code;
    if (extra.retryAfter !== undefined) this.retryAfter = extra.retryAfter;
    if (extra.closeCode !== undefined) this.closeCode = extra.closeCode;
  }
  static timeout(message = 'no answer from the gateway in time') {
    return new IMClientError('timeout', 'TIMEOUT', message);
  }
  static disconnected(message = 'the connection to the gateway is closed', extra) {
    return new IMClientError('disconnected', 'DISCONNECTED', message, extra);
  }
}

// ---------------------------------------------------------------------------------------
// CRC-32 (zlib's: reflected polynomial 0xEDB88320, init and final XOR 0xFFFFFFFF)
// ---------------------------------------------------------------------------------------

const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

/** zlib's `crc32()` of `bytes` (a Uint8Array), as an unsigned 32-bit number. */
export function crc32(bytes) {
  let crc = 0xffffffff;
  for (let i = 0; i < bytes.length; i++) crc = CRC_TABLE[(crc ^ bytes[i]) & 0xff] ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

// ---------------------------------------------------------------------------------------
// TLV codec (PROTOCOL.md 3)
// ---------------------------------------------------------------------------------------

const utf8Encoder = new TextEncoder();
const utf8Decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
const EMPTY = new Uint8Array(0);
/** Items at depth 0 to 4; a container at depth 4 is too deep. */
const MAX_DEPTH = 4;

/**
 * Encodes one value of `type` to bytes. Integers are Numbers or BigInts, `version` is
 * `{major, minor, features}`, `bytes` a Uint8Array, `container` an array of items.
 */
export function encodeValue(type, value) {
  let out;
  let view;
  switch (type) {
    case 'u8': out = new Uint8Array(1); out[0] = Number(value); return out;
    case 'u16': out = new Uint8Array(2); new DataView(out.buffer).setUint16(0, Number(value)); return out;
    case 'u32': out = new Uint8Array(4); new DataView(out.buffer).setUint32(0, Number(value)); return out;
    case 'i32': out = new Uint8Array(4); new DataView(out.buffer).setInt32(0, Number(value)); return out;
    case 'u64': out = new Uint8Array(8); new DataView(out.buffer).setBigUint64(0, BigInt(value)); return out;
    case 'f64': out = new Uint8Array(8); new DataView(out.buffer).setFloat64(0, Number(value)); return out;
    case 'version':
      out = new Uint8Array(4);
      view = new DataView(out.buffer);
      view.setUint16(0, ((value.major & 0xff) << 8) | (value.minor & 0xff));
      view.setUint16(2, value.features ?? 0);
      return out;
    case 'utf8': return utf8Encoder.encode(String(value));
    case 'container': return encodeItems(value);
    default: return value instanceof Uint8Array ? value : new Uint8Array(value);
  }
}

/**
 * Encodes items to a TLV body. Each item is `{tag, value, type?}`; `type` defaults to the tag's
 * type in PROTOCOL.md's table. A CONTAINER's value is an array of items.
 * @returns {Uint8Array}
 */
export function encodeItems(items) {
  const parts = items.map((item) => {
    const type = item.type ?? tagType(item.tag);
    return [item.tag, encodeValue(type, item.value)];
  });
  const total = parts.reduce((sum, [, bytes]) => sum + 6 + bytes.length, 0);
  const out = new Uint8Array(total);
  const view = new DataView(out.buffer);
  let at = 0;
  for (const [tag, bytes] of parts) {
    view.setUint16(at, tag);
    view.setUint32(at + 2, bytes.length);
    out.set(bytes, at + 6);
    at += 6 + bytes.length;
  }
  return out;
}

/**
 * Decodes a TLV body into its structure: `[{tag, value: Uint8Array}]`, containers as
 * `{tag: 0xFFFF, items: [...]}`. Refuses what PROTOCOL.md 3 calls malformed (trailing bytes,
 * overruns, nesting deeper than 4, a tag twice at the top level) with MALFORMED_FRAME.
 */
export function decodeItems(body) {
  return decodeLevel(body, 0, 0);
}

function decodeLevel(bytes, depth, base) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const items = [];
  const seen = depth === 0 ? new Set() : null;
  let at = 0;
  while (at < bytes.length) {
    const left = bytes.length - at;
    if (left < 6) {
      throw new WireError(ErrorCode.MALFORMED_FRAME, `malformed TLV at body offset ${base + at}: ${left} trailing byte(s), not an item header`);
    }
    const tag = view.getUint16(at);
    const length = view.getUint32(at + 2);
    if (length > left - 6) {
      throw new WireError(ErrorCode.MALFORMED_FRAME,
        `malformed TLV at body offset ${base + at}: item ${tagName(tag)} (${hex16(tag)}) length ${length} exceeds the ${left - 6} byte(s) left`);
    }
    if (seen) {
      if (seen.has(tag)) {
        throw new WireError(ErrorCode.MALFORMED_FRAME, `malformed TLV at body offset ${base + at}: duplicate top-level ${tagName(tag)} (${hex16(tag)})`);
      }
      seen.add(tag);
    }
    const value = bytes.subarray(at + 6, at + 6 + length);
    if (tag === Tag.CONTAINER) {
      if (depth >= MAX_DEPTH) {
        throw new WireError(ErrorCode.MALFORMED_FRAME, `malformed TLV at body offset ${base + at + 6}: container nesting depth ${depth + 1} above ${MAX_DEPTH}`);
      }
      items.push({ tag, items: decodeLevel(value, depth + 1, base + at + 6) });
    } else {
      items.push({ tag, value });
    }
    at += 6 + length;
  }
  return items;
}

const INTEGER_SIZES = { u8: 1, u16: 2, u32: 4, u64: 8, i32: 4, f64: 8, version: 4 };
const IDENTIFIER_TAGS = new Set([Tag.USER_ID, Tag.DEVICE_ID, Tag.TO, Tag.FROM, Tag.GROUP]);
const FLAG_TAGS = new Set([Tag.RESEND, Tag.RETAIN, Tag.CARBON, Tag.ARCHIVED, Tag.DELETED, Tag.COMPLETE,
  Tag.SESSION_RESUMED, Tag.RECEIPT_NOTICES, Tag.CARBONS]);

/**
 * Reads the value of one decoded item as `type` (default: the tag's type). u64 values are
 * Numbers up to 2^53 - 1, BigInts above. Throws BAD_REQUEST for a wrong size or invalid
 * UTF-8 (the codes of PROTOCOL.md 7; identifier and range checks are in `readMessage`).
 */
export function readValue(item, type = tagType(item.tag)) {
  if (type === 'container') {
    if (!item.items) throw invalid(item.tag, 'not a container');
    return item.items;
  }
  const bytes = item.value;
  const size = INTEGER_SIZES[type];
  if (size !== undefined && bytes.length !== size) throw invalid(item.tag, `length ${bytes.length}, expected ${size}`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  switch (type) {
    case 'u8': return view.getUint8(0);
    case 'u16': return view.getUint16(0);
    case 'u32': return view.getUint32(0);
    case 'i32': return view.getInt32(0);
    case 'f64': return view.getFloat64(0);
    case 'u64': {
      const big = view.getBigUint64(0);
      return big <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(big) : big;
    }
    case 'version': {
      const word = view.getUint16(0);
      return { major: word >> 8, minor: word & 0xff, features: view.getUint16(2) };
    }
    case 'utf8':
      try {
        return utf8Decoder.decode(bytes);
      } catch {
        throw invalid(item.tag, 'invalid UTF-8');
      }
    default:
      return bytes;
  }
}

function invalid(tag, why, code = ErrorCode.BAD_REQUEST) {
  return new WireError(code, `invalid ${tagName(tag)} (${hex16(tag)}): ${why}`);
}

// ---------------------------------------------------------------------------------------
// Frames (PROTOCOL.md 2)
// ---------------------------------------------------------------------------------------

/**
 * Encodes a frame: the 28-byte header (body length and CRC computed) and the body.
 * @param {object} frame `{type, sequence, timestamp, session, body?, items?, encrypt?,
 *   compress?, versionMajor?, versionMinor?}`; `items` (encoded with encodeItems) or `body`.
 * @returns {Uint8Array}
 */
export function encodeFrame(frame) {
  const body = frame.body ?? (frame.items ? encodeItems(frame.items) : EMPTY);
  const out = new Uint8Array(HEADER_LENGTH + body.length);
  const view = new DataView(out.buffer);
  view.setUint32(0, MAGIC);
  view.setUint8(4, frame.versionMajor ?? VERSION.major);
  view.setUint8(5, frame.versionMinor ?? VERSION.minor);
  view.setUint16(6, frame.type);
  view.setUint32(8, frame.sequence >>> 0);
  view.setUint32(12, (frame.timestamp ?? unixSeconds()) >>> 0);
  view.setUint8(16, frame.encrypt ?? 0);
  view.setUint8(17, frame.compress ?? 0);
  view.setUint16(18, frame.session ?? 1);
  view.setUint32(20, body.length);
  view.setUint32(24, body.length === 0 ? 0 : crc32(body));
  out.set(body, HEADER_LENGTH);
  return out;
}

/** Reads the 28 header bytes at `bytes[offset]` without checking them. */
export function decodeHeader(bytes, offset = 0) {
  const view = new DataView(bytes.buffer, bytes.byteOffset + offset, HEADER_LENGTH);
  return {
    magic: view.getUint32(0),
    versionMajor: view.getUint8(4),
    versionMinor: view.getUint8(5),
    type: view.getUint16(6),
    sequence: view.getUint32(8),
    timestamp: view.getUint32(12),
    encrypt: view.getUint8(16),
    compress: view.getUint8(17),
    session: view.getUint16(18),
    bodyLength: view.getUint32(20),
    crc32: view.getUint32(24),
  };
}

/** Checks a header as PROTOCOL.md 2.1 steps 1 and 2 say; throws a fatal WireError. */
export function checkHeader(header, { maxBodyLength = MAX_BODY_LENGTH, acceptZlib = false } = {}) {
  const where = { sequence: header.sequence, session: header.session };
  if (header.magic !== MAGIC) throw new WireError(ErrorCode.BAD_MAGIC, `bad magic ${hex32(header.magic)}`);
  if (header.versionMajor !== VERSION.major) {
    throw new WireError(ErrorCode.UNSUPPORTED_VERSION, `unsupported version ${header.versionMajor}.${header.versionMinor}`, where);
  }
  if (header.type > 4) throw new WireError(ErrorCode.UNKNOWN_TYPE, `unknown frame type ${header.type}`, where);
  if (header.encrypt > 1) throw new WireError(ErrorCode.UNSUPPORTED_ENCRYPTION, `unsupported encrypt type ${header.encrypt}`, where);
  if (header.compress > 1) throw new WireError(ErrorCode.UNSUPPORTED_COMPRESSION, `unsupported compress type ${header.compress}`, where);
  if (header.compress === 1 && !acceptZlib) {
    // This client does not inflate: it never announces ZLIB, so no gateway should compress.
    throw new WireError(ErrorCode.UNSUPPORTED_COMPRESSION, 'zlib is not accepted by this client', where);
  }
  const length = header.bodyLength;
  if (length > maxBodyLength) throw new WireError(ErrorCode.BODY_TOO_LARGE, `body length ${length} above limit ${maxBodyLength}`, where);
  let valid;
  if (header.type === FrameType.HEARTBEAT) valid = length === 0;
  else if (header.compress === 1) valid = length >= 8;
  else valid = length === 0 || length >= 6 || (header.type === FrameType.ACK && length === 4);
  if (!valid) {
    throw new WireError(ErrorCode.MALFORMED_FRAME, `body length ${length} invalid for ${FRAME_TYPE_NAMES[header.type]}`, where);
  }
}

/**
 * Cuts a byte stream into frames (PROTOCOL.md 1, 2.1): feed it the payloads of binary
 * WebSocket messages in order; a frame may span several, and one may hold several frames.
 * Checks each header as soon as its 28 bytes are in, then the CRC and the TLV structure. A
 * framing error is thrown as a fatal WireError and the decoder stays failed (no resync).
 *
 * Each frame is `{header, body, items}`: `items` is the decoded TLV structure, or `null` for
 * a seed-form ACK (4-byte body, then `seedAck` holds the acknowledged sequence).
 */
export class FrameDecoder {
  constructor({ maxBodyLength = MAX_BODY_LENGTH } = {}) {
    this.maxBodyLength = maxBodyLength;
    this.acceptZlib = false; // this client inflates nothing
    this.buffer = new Uint8Array(4096);
    this.start = 0;
    this.end = 0;
    this.header = null;
    this.failure = null;
  }

  /** Bytes received and not yet part of a whole frame. */
  get buffered() {
    return this.end - this.start;
  }

  /**
   * Adds `chunk` (ArrayBuffer, Uint8Array or other view) and returns the whole frames it
   * completed, in order.
   */
  push(chunk) {
    if (this.failure) throw this.failure;
    const bytes = chunk instanceof Uint8Array ? chunk
      : ArrayBuffer.isView(chunk) ? new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength)
        : new Uint8Array(chunk);
    this.append(bytes);
    const frames = [];
    try {
      for (;;) {
        const frame = this.next();
        if (!frame) break;
        frames.push(frame);
      }
    } catch (error) {
      this.failure = error;
      throw error;
    }
    return frames;
  }

  append(bytes) {
    if (bytes.length === 0) return;
    if (this.end + bytes.length > this.buffer.length) {
      // Compact, and grow (doubling) if the live bytes and the new ones do not fit.
      const live = this.end - this.start;
      let capacity = this.buffer.length;
      while (capacity < live + bytes.length) capacity *= 2;
      const next = capacity === this.buffer.length ? this.buffer : new Uint8Array(capacity);
      next.set(this.buffer.subarray(this.start, this.end), 0);
      this.buffer = next;
      this.start = 0;
      this.end = live;
    }
    this.buffer.set(bytes, this.end);
    this.end += bytes.length;
  }

  next() {
    if (!this.header) {
      if (this.end - this.start < HEADER_LENGTH) return null;
      const header = decodeHeader(this.buffer, this.start);
      checkHeader(header, this);
      this.header = header;
    }
    const header = this.header;
    const total = HEADER_LENGTH + header.bodyLength;
    if (this.end - this.start < total) return null;
    // Copy the body out: the buffer is reused.
    const body = this.buffer.slice(this.start + HEADER_LENGTH, this.start + total);
    this.start += total;
    if (this.start === this.end) this.start = this.end = 0;
    this.header = null;
    const where = { sequence: header.sequence, session: header.session };
    const actual = body.length === 0 ? 0 : crc32(body);
    if (actual !== header.crc32) {
      throw new WireError(ErrorCode.BAD_CRC, `bad CRC32: header ${hex32(header.crc32)}, body ${hex32(actual)}`, where);
    }
    if (header.compress === 1) {
      throw new WireError(ErrorCode.UNSUPPORTED_COMPRESSION, 'zlib is not accepted by this client', where);
    }
    if (header.type === FrameType.ACK && body.length === 4) {
      return { header, body, items: null, seedAck: new DataView(body.buffer).getUint32(0) };
    }
    let items;
    try {
      items = decodeItems(body);
    } catch (error) {
      if (error instanceof WireError) {
        error.sequence = header.sequence;
        error.session = header.session;
      }
      throw error;
    }
    return { header, body, items };
  }
}

// ---------------------------------------------------------------------------------------
// Messages: what a frame means (PROTOCOL.md 4, 4.1), with the checks of step 6 of 2.1
// ---------------------------------------------------------------------------------------

/** Items each operation requires (PROTOCOL.md 4.1); `|` means one of. */
const REQUIRED = {
  HELLO: ['VERSION_REQUEST'], HELLO_OK: ['VERSION_RESPONSE'], LOGIN: ['AUTH_TOKEN'],
  LOGIN_OK: ['USER_ID'], KICK: ['ERROR_CODE'], ERROR: ['ERROR_CODE'], TOKEN_REFRESH: ['AUTH_TOKEN'],
  HISTORY: ['TO|GROUP'], HISTORY_PAGE: ['REF_SEQUENCE'], CONVERSATION_LIST: ['REF_SEQUENCE'],
  READ_MARKER: ['TO|GROUP', 'READ_THROUGH'], DELETE: ['MESSAGE_ID'], PRESENCE_WATCH: ['CONTAINER'],
  PRESENCE_UNWATCH: ['CONTAINER'], PRESENCE: ['USER_ID', 'USER_STATUS'],
  LOCATION_SHARE_START: ['DURATION', 'CONTAINER'], LOCATION_UPDATE: ['LAT', 'LON', 'TST'],
  LOCATION_WATCH: ['CONTAINER'], LOCATION_UNWATCH: ['CONTAINER'], LOCATION: ['USER_ID', 'LAT', 'LON', 'TST'],
  SUBSCRIBE: ['CONTAINER'], UNSUBSCRIBE: ['CONTAINER'], PUBLISH: ['TOPIC'],
  CHAT: ['TO|GROUP', 'MESSAGE_ID'], DELIVERY: ['FROM', 'MESSAGE_ID', 'SERVER_TIME'],
  RECEIPT: ['TO', 'MESSAGE_ID'], RECEIPT_NOTICE: ['FROM', 'MESSAGE_ID', 'RECEIPT_KIND', 'SERVER_TIME'],
  TYPING: ['TYPING'],
};
/** Operations whose STREAM_EPOCH and STREAM_OFFSET come together (or not at all). */
const POSITION_OPS = new Set(['LOGIN', 'LOGIN_OK', 'SYNC']);
const NAMING_ITEMS = new Map([[Tag.VERSION_REQUEST, 'HELLO'], [Tag.VERSION_RESPONSE, 'HELLO_OK'],
  [Tag.AUTH_TOKEN, 'LOGIN'], [Tag.USER_ID, 'LOGIN_OK'], [Tag.ERROR_CODE, 'ERROR']]);

/**
 * Reads a decoded frame (from FrameDecoder) as a message: `{frameType, op, sequence,
 * session, items, content}` where `op` is an operation name (`'CHAT'`, `'DELIVERY'`, ...,
 * `'ACK'`, `'HEARTBEAT'`), `items` maps tag names to values (containers: arrays, of values
 * for a list, of objects for records), and `content` is `{tag, kind, value}` or null.
 * Throws a non-fatal WireError for what step 6 of PROTOCOL.md 2.1 refuses.
 */
export function readMessage(frame) {
  const { header } = frame;
  const base = { frameType: header.type, sequence: header.sequence, session: header.session };
  if (header.type === FrameType.HEARTBEAT) return { ...base, op: 'HEARTBEAT', items: {}, content: null };
  if (frame.items === null) {
    // The seed client's ACK: the acknowledged sequence in a 4-byte body (PROTOCOL.md 5.4).
    return { ...base, op: 'ACK', sequence: frame.seedAck, items: {}, content: null };
  }
  const items = readItems(frame.items, true);
  let content = null;
  for (const item of frame.items) {
    if (item.tag >= 0x1001 && item.tag <= 0x1007) {
      if (content) throw invalid(item.tag, 'a second content item');
      const value = readValue(item);
      content = { tag: item.tag, kind: CONTENT_KINDS[item.tag], value };
    }
  }
  if (header.type === FrameType.ACK) return { ...base, op: 'ACK', items, content };
  const op = operationOf(header.type, frame.items, items);
  const message = { ...base, op, items, content };
  for (const need of REQUIRED[op] ?? []) {
    const names = need.split('|');
    if (!names.some((name) => items[name] !== undefined)) {
      throw new WireError(ErrorCode.BAD_REQUEST, `missing ${names.map((n) => `${n} (${hex16(Tag[n])})`).join(' or ')}`);
    }
  }
  if (POSITION_OPS.has(op)) {
    if (items.STREAM_OFFSET !== undefined && items.STREAM_EPOCH === undefined) throw new WireError(ErrorCode.BAD_REQUEST, `missing STREAM_EPOCH (${hex16(Tag.STREAM_EPOCH)})`);
    if (items.STREAM_EPOCH !== undefined && items.STREAM_OFFSET === undefined) throw new WireError(ErrorCode.BAD_REQUEST, `missing STREAM_OFFSET (${hex16(Tag.STREAM_OFFSET)})`);
  }
  if ((op === 'CHAT' || (op === 'DELIVERY' && items.DELETED !== 1)) && !content) {
    throw new WireError(ErrorCode.BAD_REQUEST, 'missing content item (0x1001-0x1007)');
  }
  return message;
}

/** The operation a DATA, CONTROL or READ_RECEIPT frame carries (PROTOCOL.md 4). */
function operationOf(type, raw, items) {
  const frameTypeName = FRAME_TYPE_NAMES[type];
  if (items.OP !== undefined) {
    const info = OP_INFO.get(items.OP);
    if (!info || info.frameType !== type) throw new WireError(ErrorCode.UNKNOWN_OPERATION, `unknown operation ${hex16(items.OP)} in ${frameTypeName}`);
    return info.name;
  }
  if (type === FrameType.DATA) {
    if (items.TO !== undefined) return 'CHAT';
    if (items.FROM !== undefined) return 'DELIVERY';
    if (items.GROUP !== undefined) return 'CHAT';
  } else if (type === FrameType.READ_RECEIPT) {
    if (items.TO !== undefined) return 'RECEIPT';
    if (items.FROM !== undefined) return 'RECEIPT_NOTICE';
  } else if (type === FrameType.CONTROL) {
    for (const item of raw) {
      const named = NAMING_ITEMS.get(item.tag);
      if (named) return named;
    }
  }
  throw new WireError(ErrorCode.UNKNOWN_OPERATION, `unknown operation (none) in ${frameTypeName}`);
}

/** Items by name, values checked; unknown tags are ignored (application tags kept as `0xF001`). */
function readItems(raw, topLevel) {
  const out = {};
  for (const item of raw) {
    const info = TAG_INFO.get(item.tag);
    if (!info) {
      if (item.tag >= 0xf000 && item.tag <= 0xfffe) out[tagName(item.tag)] = item.value;
      continue;
    }
    if (!topLevel && out[info.name] !== undefined) throw invalid(item.tag, 'twice in one record');
    out[info.name] = info.type === 'container' ? readContainer(item.items) : checkedValue(item);
  }
  return out;
}

/**
 * A container (PROTOCOL.md 3): a list of records (containers inside: an array of objects), a
 * list of one tag (an array of values), or one record (distinct tags: an object).
 */
function readContainer(items) {
  if (items.length > 0 && items.every((item) => item.tag === Tag.CONTAINER)) {
    return items.map((item) => readRecord(item.items));
  }
  const tags = new Set(items.map((item) => item.tag));
  if (tags.size > 1) return readRecord(items);
  return items.map((item) => (TAG_INFO.has(item.tag) ? checkedValue(item) : item.value));
}

function readRecord(items) {
  return readItems(items, false);
}

function checkedValue(item) {
  const value = readValue(item);
  const tag = item.tag;
  if (IDENTIFIER_TAGS.has(tag)) {
    const length = item.value.length;
    if (length < 1 || length > 128 || /[/+#\u0000]/.test(value)) {
      throw invalid(tag, `identifier ${JSON.stringify(value)} ${length < 1 || length > 128 ? `is ${length} bytes long` : 'contains / + # or NUL'}`, ErrorCode.INVALID_USER_ID);
    }
  } else if (tag === Tag.MESSAGE_ID && (item.value.length < 1 || item.value.length > 128)) {
    throw invalid(tag, `is ${item.value.length} bytes long`);
  } else if (tag === Tag.QOS && value > 2) {
    throw invalid(tag, `value ${value} out of range`, ErrorCode.QOS_NOT_SUPPORTED);
  } else if (FLAG_TAGS.has(tag) && value > 1) {
    throw invalid(tag, `value ${value} out of range`);
  }
  return value;
}

// ---------------------------------------------------------------------------------------
// Policies, each a small pure object (ports of Sources/IMClient/Policy and State)
// ---------------------------------------------------------------------------------------

/**
 * Reconnect delays (IMClient's ReconnectBackoff, seed 003): attempt 0 waits a random time
 * in (0, base], attempt n in (base·2^(n-1), base·2^n], until the level would pass `cap`;
 * then every attempt draws from (cap/2, cap]. Defaults: (0-1], (1-2], (2-4], (4-8], (8-16],
 * then (16-32] seconds. Milliseconds throughout.
 */
export class Backoff {
  constructor({ baseMs = 1000, capMs = 32000 } = {}) {
    if (!(baseMs > 0) || !(capMs > 0)) throw new RangeError('the backoff base and cap must be positive');
    this.baseMs = baseMs;
    this.capMs = capMs;
  }

  /** `[lower, upper]` of `attempt`'s level: delays are drawn from (lower, upper]. */
  level(attempt) {
    if (!(attempt > 0)) return [0, Math.min(this.baseMs, this.capMs)];
    let upper = this.baseMs;
    for (let doublings = 0; doublings < attempt; doublings++) {
      if (!(upper < this.capMs && upper <= this.capMs / 2)) {
        upper = this.capMs;
        break;
      }
      upper *= 2;
    }
    upper = Math.min(upper, this.capMs);
    return [upper / 2, upper];
  }

  /** A delay drawn uniformly from `attempt`'s level; `random()` returns [0, 1). */
  delay(attempt, random = Math.random) {
    const [lower, upper] = this.level(attempt);
    // 1 - [0, 1) is (0, 1]: never `lower` itself, at most `upper`.
    return lower + (upper - lower) * (1 - random());
  }
}

/**
 * The connection lifecycle (IMClient's ConnectionStateMachine, seed 000): four states,
 * explicit events, and the actions each transition asks for. Decides only; no I/O.
 *
 * States: `disconnected`, `connecting`, `connected`, `disconnecting`. Events (`{type, failure?}`
 * with failure `'transient'` or `'terminal'`): `connect`, `connectSucceeded`, `connectFailed`,
 * `connectionLost`, `reconnectDue`, `networkAvailable`, `disconnect`, `disconnectCompleted`.
 * Actions (`{type, attempt?}`): `openConnection`, `closeConnection`, `loggedIn`,
 * `connectionDown`, `scheduleReconnect` (with `attempt`), `cancelReconnect`, `finish`.
 * A terminal failure or `disconnect` finishes the machine: nothing reconnects after it.
 */
export class ConnectionStateMachine {
  constructor() {
    this.state = 'disconnected';
    /** Failed attempts since the last login: the backoff level of the next reconnect. */
    this.attempt = 0;
    this.isReconnectScheduled = false;
    this.isFinished = false;
  }

  /** Moves on `event` (a string or `{type, failure}`) and returns the actions to take, in order. */
  handle(event) {
    const type = typeof event === 'string' ? event : event.type;
    const failure = typeof event === 'string' ? 'transient' : event.failure ?? 'transient';
    const endsTransport = type === 'disconnectCompleted' || type === 'connectionLost' || type === 'connectFailed';
    if (this.isFinished) {
      // Finished: only the close that completes a disconnect still matters.
      if (this.state === 'disconnecting' && endsTransport) {
        this.state = 'disconnected';
        return [{ type: 'connectionDown' }, { type: 'finish' }];
      }
      return [];
    }
    switch (`${this.state}:${type}`) {
      case 'disconnected:connect': {
        const cancel = this.isReconnectScheduled ? [{ type: 'cancelReconnect' }] : [];
        this.isReconnectScheduled = false;
        this.state = 'connecting';
        return [...cancel, { type: 'openConnection' }];
      }
      case 'disconnected:reconnectDue':
        if (!this.isReconnectScheduled) return [];
        this.isReconnectScheduled = false;
        this.state = 'connecting';
        return [{ type: 'openConnection' }];
      case 'disconnected:networkAvailable':
        if (!this.isReconnectScheduled) return [];
        this.isReconnectScheduled = false;
        this.state = 'connecting';
        return [{ type: 'cancelReconnect' }, { type: 'openConnection' }];
      case 'disconnected:disconnect': {
        const cancel = this.isReconnectScheduled ? [{ type: 'cancelReconnect' }] : [];
        this.isReconnectScheduled = false;
        this.isFinished = true;
        return [...cancel, { type: 'finish' }];
      }
      case 'connecting:connectSucceeded':
        this.state = 'connected';
        this.attempt = 0;
        return [{ type: 'loggedIn' }];
      case 'connecting:connectFailed':
      case 'connecting:connectionLost':
        this.state = 'disconnected';
        return [{ type: 'closeConnection' }, ...this.afterFailure(failure)];
      case 'connecting:disconnect':
      case 'connected:disconnect':
        this.state = 'disconnecting';
        this.isFinished = true;
        return [{ type: 'closeConnection' }];
      case 'connected:connectionLost':
        this.state = 'disconnected';
        return [{ type: 'closeConnection' }, { type: 'connectionDown' }, ...this.afterFailure(failure)];
      default:
        // Stale or out of place (a late answer, a timer racing a state change): ignored.
        return [];
    }
  }

  afterFailure(failure) {
    if (failure === 'terminal') {
      this.isFinished = true;
      return [{ type: 'finish' }];
    }
    this.isReconnectScheduled = true;
    const attempt = this.attempt;
    this.attempt += 1;
    return [{ type: 'scheduleReconnect', attempt }];
  }
}

/** Outbox priorities: chat first, then receipts (and typing), presence, other requests. */
export const Priority = Object.freeze({ chat: 0, receipt: 1, presence: 2, other: 3 });
const PRIORITY_COUNT = 4;

/**
 * The requests waiting for their ACK (IMClient's Outbox, PROTOCOL.md 10): queued by
 * priority then enqueue order, at most `maxInFlight` written and unanswered, put back in
 * their place (marked `resend`) when an ACK is overdue or the connection is lost.
 * Durable entries (chat, receipts) survive a lost connection; the others are dropped.
 */
export class Outbox {
  constructor({ maxInFlight = 64, maxRetransmits = 3 } = {}) {
    this.maxInFlight = Math.max(1, maxInFlight);
    this.maxRetransmits = Math.max(0, maxRetransmits);
    this.stored = new Map(); // id -> entry
    this.queues = Array.from({ length: PRIORITY_COUNT }, () => []); // sorted ids
    this.inFlight = new Map(); // sequence -> {id, deadline}
    this.sequenceOf = new Map(); // id -> sequence
    this.overdue = new Map(); // id -> overdue count on this connection
    this.nextID = 1;
  }

  get count() { return this.stored.size; }
  get inFlightCount() { return this.inFlight.size; }
  entry(id) { return this.stored.get(id); }
  isInFlight(sequence) { return this.inFlight.has(sequence); }
  hasInFlight(priority) {
    for (const { id } of this.inFlight.values()) if (this.stored.get(id)?.priority === priority) return true;
    return false;
  }

  /** Queues `message` and returns its entry id. */
  enqueue(message, { priority, durable }) {
    const id = this.nextID++;
    this.stored.set(id, { id, message, priority, durable, attempts: 0, resend: false });
    this.queues[priority].push(id);
    return id;
  }

  /** Puts entries (e.g. refused with RATE_LIMITED) back in their place, marked `resend`. */
  restore(entries) {
    for (const entry of entries) {
      if (this.stored.has(entry.id)) continue;
      entry.resend = true;
      this.stored.set(entry.id, entry);
      this.requeue(entry.id, entry.priority);
    }
  }

  /** The entries to write now, in send order, within the window; none of `paused` priorities. */
  nextToSend(paused = new Set()) {
    const room = this.maxInFlight - this.inFlight.size;
    const result = [];
    for (let priority = 0; priority < PRIORITY_COUNT && result.length < room; priority++) {
      if (paused.has(priority)) continue;
      for (const id of this.queues[priority]) {
        if (result.length >= room) break;
        result.push(this.stored.get(id));
      }
    }
    return result;
  }

  /** Entry `id` was written with `sequence`; its ACK is due by `deadline`. */
  markSent(id, sequence, deadline) {
    const entry = this.stored.get(id);
    if (!entry) return;
    const previous = this.sequenceOf.get(id);
    if (previous !== undefined) this.inFlight.delete(previous);
    else this.dequeue(id, entry.priority);
    entry.attempts += 1;
    this.inFlight.set(sequence, { id, deadline });
    this.sequenceOf.set(id, sequence);
  }

  /** An ACK for `sequence`: removes and returns the entry in flight with it, if any. */
  acknowledge(sequence) {
    const flight = this.inFlight.get(sequence);
    if (!flight) return undefined;
    this.inFlight.delete(sequence);
    this.sequenceOf.delete(flight.id);
    this.overdue.delete(flight.id);
    const entry = this.stored.get(flight.id);
    this.stored.delete(flight.id);
    return entry;
  }

  /**
   * Puts entries whose ACK is overdue at `now` back in their queues, marked `resend`.
   * `connectionBroken` when one was overdue more than `maxRetransmits` times on this connection.
   */
  expire(now) {
    const due = [...this.inFlight.entries()].filter(([, f]) => f.deadline <= now).sort((a, b) => a[1].id - b[1].id);
    const result = { retransmit: [], connectionBroken: false };
    for (const [sequence, flight] of due) {
      this.inFlight.delete(sequence);
      this.sequenceOf.delete(flight.id);
      const entry = this.stored.get(flight.id);
      entry.resend = true;
      this.requeue(flight.id, entry.priority);
      const count = (this.overdue.get(flight.id) ?? 0) + 1;
      this.overdue.set(flight.id, count);
      if (count > this.maxRetransmits) result.connectionBroken = true;
      result.retransmit.push(flight.id);
    }
    return result;
  }

  /** The earliest ACK deadline in flight, or undefined. */
  get nextDeadline() {
    let min;
    for (const { deadline } of this.inFlight.values()) if (min === undefined || deadline < min) min = deadline;
    return min;
  }

  /** The connection was lost: durable entries go back (resend), the others are removed and returned. */
  connectionLost() {
    for (const { id } of this.inFlight.values()) {
      const entry = this.stored.get(id);
      if (entry.durable) {
        entry.resend = true;
        this.requeue(id, entry.priority);
      }
    }
    const dropped = [...this.stored.values()].filter((e) => !e.durable).sort((a, b) => a.priority - b.priority || a.id - b.id);
    for (const entry of dropped) {
      if (!this.sequenceOf.has(entry.id)) this.dequeue(entry.id, entry.priority);
      this.stored.delete(entry.id);
    }
    this.inFlight.clear();
    this.sequenceOf.clear();
    this.overdue.clear();
    return dropped;
  }

  /** Removes entry `id` wherever it is; returns it, or undefined. */
  cancel(id) {
    const entry = this.stored.get(id);
    if (!entry) return undefined;
    this.stored.delete(id);
    const sequence = this.sequenceOf.get(id);
    if (sequence !== undefined) {
      this.sequenceOf.delete(id);
      this.inFlight.delete(sequence);
    } else {
      this.dequeue(id, entry.priority);
    }
    this.overdue.delete(id);
    return entry;
  }

  requeue(id, priority) {
    const queue = this.queues[priority];
    let low = 0;
    let high = queue.length;
    while (low < high) {
      const middle = (low + high) >> 1;
      if (queue[middle] < id) low = middle + 1;
      else high = middle;
    }
    queue.splice(low, 0, id);
  }

  dequeue(id, priority) {
    const queue = this.queues[priority];
    const index = queue.indexOf(id);
    if (index >= 0) queue.splice(index, 1);
  }
}

/**
 * When to send a HEARTBEAT and when the connection is dead (IMClient's AdaptiveHeartbeat,
 * seed 003): due when nothing was sent or nothing received for the interval; the interval
 * starts at half of `maxIntervalMs`, grows by 10% of it per answered heartbeat and shrinks
 * by 30% per unanswered one, within [min, max]; `failuresUntilDead` unanswered in a row
 * make the connection dead. The ACK timeout is `rttFactor` × the smoothed RTT, clamped.
 */
export class AdaptiveHeartbeat {
  constructor(config = {}, now = 0) {
    this.configure(config);
    this.adaptiveInterval = this.clamp(this.config.maxIntervalMs / 2);
    this.smoothedRTT = null;
    this.connectionStarted(now);
  }

  configure(config) {
    this.config = {
      minIntervalMs: 5000, maxIntervalMs: 30000, failuresUntilDead: 3, minAckTimeoutMs: 2000,
      maxAckTimeoutMs: 10000, rttFactor: 4, ...config,
    };
    this.config.minIntervalMs = Math.min(this.config.minIntervalMs, this.config.maxIntervalMs);
    if (this.adaptiveInterval !== undefined) this.adaptiveInterval = this.clamp(this.adaptiveInterval);
  }

  clamp(ms) {
    return Math.min(Math.max(ms, this.config.minIntervalMs), this.config.maxIntervalMs);
  }

  get interval() { return this.adaptiveInterval; }
  get step() { return this.config.maxIntervalMs * 0.1; }
  get ackTimeout() {
    if (this.smoothedRTT === null) return this.config.maxAckTimeoutMs;
    return Math.min(Math.max(this.smoothedRTT * this.config.rttFactor, this.config.minAckTimeoutMs), this.config.maxAckTimeoutMs);
  }

  /** A new connection: failures cleared, timers restarted; the interval and RTT are kept. */
  connectionStarted(now) {
    this.failures = 0;
    this.outstanding = null;
    this.dueNow = null;
    this.isDead = false;
    this.lastSent = now;
    this.lastReceived = now;
  }

  frameSent(now) { this.lastSent = Math.max(this.lastSent, now); }
  frameReceived(now) { this.lastReceived = Math.max(this.lastReceived, now); }

  roundTripMeasured(sample) {
    if (this.smoothedRTT === null && sample > 0) this.smoothedRTT = sample;
  }

  heartbeatSent(sequence, now) {
    this.settleOverdue(now);
    if (this.isDead) return;
    this.outstanding = { sequence, sentAt: now };
    this.dueNow = null;
    this.frameSent(now);
  }

  ackReceived(sequence, now) {
    this.frameReceived(now);
    this.settleOverdue(now);
    if (!this.outstanding || this.outstanding.sequence !== sequence) return;
    const sample = Math.max(0, now - this.outstanding.sentAt);
    this.outstanding = null;
    this.smoothedRTT = this.smoothedRTT === null ? sample : this.smoothedRTT * 7 / 8 + sample / 8;
    this.failures = 0;
    this.adaptiveInterval = this.clamp(this.adaptiveInterval + this.step);
  }

  /** `{type: 'send'}`, `{type: 'wait', until}` or `{type: 'dead'}` at `now`. */
  nextAction(now) {
    this.settleOverdue(now);
    if (this.isDead) return { type: 'dead' };
    if (this.outstanding) return { type: 'wait', until: this.outstanding.sentAt + this.ackTimeout };
    const due = this.nextDue();
    return now >= due ? { type: 'send' } : { type: 'wait', until: due };
  }

  /** When `nextAction` has something to do next, without changing anything. */
  peekDeadline(now) {
    if (this.isDead) return now;
    if (this.outstanding) return this.outstanding.sentAt + this.ackTimeout;
    return this.nextDue();
  }

  nextDue() {
    const idle = Math.min(this.lastSent, this.lastReceived) + this.interval;
    return this.dueNow === null ? idle : Math.min(this.dueNow, idle);
  }

  settleOverdue(now) {
    if (this.isDead || !this.outstanding) return;
    const failedAt = this.outstanding.sentAt + this.ackTimeout;
    if (now < failedAt) return;
    this.outstanding = null;
    this.failures += 1;
    this.adaptiveInterval = this.clamp(this.adaptiveInterval - this.step * 3);
    if (this.failures >= this.config.failuresUntilDead) {
      this.isDead = true;
      this.dueNow = null;
    } else {
      this.dueNow = failedAt; // retry at once
    }
  }
}

/** Recently surfaced keys, the oldest forgotten first (IMClient's DeliveryDedup). */
export class DedupWindow {
  constructor(capacity = 4096) {
    this.capacity = Math.max(1, capacity);
    this.seen = new Set();
  }

  /** `true` the first time `key` is seen within the window. */
  firstSighting(key) {
    if (this.seen.has(key)) return false;
    this.seen.add(key);
    if (this.seen.size > this.capacity) this.seen.delete(this.seen.values().next().value);
    return true;
  }
}

/**
 * Where the device is in its stream of stored messages (IMClient's StreamCursor, PROTOCOL.md
 * 6.14): `offset` is the offset up to which everything arrived; offsets seen above it are
 * remembered so a message delivered twice (live and from the archive) is surfaced once.
 */
export class StreamCursor {
  static maxAbove = 8192;

  constructor(position = null) {
    this.epoch = position?.epoch ?? null;
    this.offset = position?.offset ?? 0;
    this.above = new Set();
  }

  /** What LOGIN and SYNC carry: `{epoch, offset}`, or null before a gateway named its epoch. */
  get position() {
    return this.epoch === null ? null : { epoch: this.epoch, offset: this.offset };
  }

  /** A delivery (or own chat) at `offset`: `true` the first time. */
  received(offset) {
    if (offset <= this.offset || this.above.has(offset)) return false;
    if (offset === this.offset + 1) {
      this.offset = offset;
      this.advance();
    } else {
      this.above.add(offset);
      if (this.above.size > StreamCursor.maxAbove) {
        const lowest = Math.min(...this.above);
        this.above.delete(lowest);
        this.offset = lowest;
        this.advance();
      }
    }
    return true;
  }

  advance() {
    while (this.above.delete(this.offset + 1)) this.offset += 1;
  }

  /** LOGIN_OK's position and SYNC_STATUS: continued / expired move on, the others restart there. */
  loggedIn(epoch, offset, status) {
    if (status === 5) return; // archive unavailable
    if (status === 0 || status === 3) {
      this.caughtUp(offset, epoch);
    } else {
      this.epoch = epoch;
      this.offset = offset;
      this.above.clear();
    }
  }

  /** A SYNC's ACK: everything up to `through` of `epoch` came before it. */
  caughtUp(through, epoch) {
    if (this.epoch !== null && this.epoch !== epoch) {
      this.epoch = epoch;
      this.offset = through;
      this.above.clear();
      return;
    }
    this.epoch = epoch;
    if (through <= this.offset) return;
    this.offset = through;
    for (const seen of this.above) if (seen <= through) this.above.delete(seen);
    this.advance();
  }
}

/**
 * When to refresh the session's token (IMClient's TokenRefreshSchedule, PROTOCOL.md 6.1.1):
 * at 80% of its lifetime or 60 s before it expires, whichever comes first, counted on the
 * local monotonic clock from LOGIN_OK's SERVER_TIME; failures retried with backoff
 * (1 s doubling to 32 s) while before the expiry.
 */
export class TokenRefreshSchedule {
  constructor({ lifetimeFraction = 0.8, marginMs = 60000, retryBackoff = new Backoff() } = {}) {
    this.lifetimeFraction = lifetimeFraction;
    this.marginMs = marginMs;
    this.retryBackoff = retryBackoff;
    this.state = 'idle';
    this.due = null;
    this.anchor = null;
    this.expiresAt = null;
    this.refreshPoint = null;
    this.failures = 0;
  }

  loggedIn(serverTime, tokenExpiry, now) {
    this.anchor = { serverTime, instant: now };
    this.granted(tokenExpiry, now);
  }

  refreshed(tokenExpiry, now) {
    this.granted(tokenExpiry, now);
  }

  granted(tokenExpiry, now) {
    this.failures = 0;
    if (tokenExpiry === undefined || tokenExpiry === null || !this.anchor) {
      this.expiresAt = this.refreshPoint = this.due = null;
      this.state = 'idle';
      return;
    }
    const expiresAt = this.anchor.instant + (Number(tokenExpiry) - this.anchor.serverTime);
    const lifetime = expiresAt - now;
    const wait = lifetime > 0 ? Math.max(0, Math.min(this.lifetimeFraction * lifetime, lifetime - this.marginMs)) : 0;
    this.expiresAt = expiresAt;
    this.refreshPoint = now + wait;
    this.due = this.refreshPoint;
    this.state = 'scheduled';
  }

  refreshStarted() { this.state = 'refreshing'; }

  refreshFailed(now, random = Math.random) {
    const retry = now + this.retryBackoff.delay(this.failures, random);
    this.failures += 1;
    if (this.expiresAt !== null && retry >= this.expiresAt) {
      this.state = 'exhausted';
    } else {
      this.state = 'scheduled';
      this.due = retry;
    }
  }

  connectionLost() {
    this.state = 'idle';
    this.failures = 0;
  }

  /** `'refresh'`, `{until}` or null. */
  nextAction(now) {
    if (this.state !== 'scheduled') return null;
    return this.due <= now ? 'refresh' : { until: this.due };
  }

  isRefreshDue(now) {
    return this.refreshPoint !== null && this.refreshPoint <= now;
  }
}

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

function unixSeconds() {
  return Math.floor(Date.now() / 1000) >>> 0;
}

/** A new message id: a lowercase UUID (crypto.randomUUID where available). */
export function makeMessageID() {
  const c = globalThis.crypto;
  if (c?.randomUUID) return c.randomUUID();
  const bytes = new Uint8Array(16);
  if (c?.getRandomValues) c.getRandomValues(bytes);
  else for (let i = 0; i < 16; i++) bytes[i] = Math.floor(Math.random() * 256);
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const h = [...bytes].map((b) => b.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** `{with: 'bob'}` / `{group: 'team'}` (also `{to}`, `'user:bob'`, `'group:team'`) as items. */
function conversationItems(conversation) {
  if (typeof conversation === 'string') {
    const [kind, ...rest] = conversation.split(':');
    const id = rest.join(':');
    if (kind === 'group') return [{ tag: Tag.GROUP, value: id }];
    if (kind === 'user') return [{ tag: Tag.TO, value: id }];
    throw new TypeError(`not a conversation: ${conversation}`);
  }
  const user = conversation?.with ?? conversation?.to;
  if (typeof user === 'string' && conversation.group === undefined) return [{ tag: Tag.TO, value: user }];
  if (typeof conversation?.group === 'string' && user === undefined) return [{ tag: Tag.GROUP, value: conversation.group }];
  throw new TypeError('a conversation is { with: user } or { group: id }');
}

function conversationOf(items) {
  return items.GROUP !== undefined ? { group: items.GROUP } : { with: items.TO };
}

const DEFAULT_CLOCK = {
  now: () => (globalThis.performance?.now ? globalThis.performance.now() : Date.now()),
  setTimeout: (fn, ms) => globalThis.setTimeout(fn, ms),
  clearTimeout: (handle) => globalThis.clearTimeout(handle),
};

/** KICK and login-refusal codes after which the client reconnects (IMClient's rule). */
const TRANSIENT_CODES = new Set([ErrorCode.SERVER_SHUTTING_DOWN, ErrorCode.IDLE_TIMEOUT,
  ErrorCode.BROKER_UNAVAILABLE, ErrorCode.INTERNAL_ERROR, ErrorCode.LOGIN_TIMEOUT]);
const WS_OPEN = 1;

// ---------------------------------------------------------------------------------------
// The client
// ---------------------------------------------------------------------------------------

/**
 * A logged-in device on an IMGateway over WebSocket. Extends EventTarget: listen with
 * `addEventListener(name, (e) => e.detail)`. Events: `message`, `receipt`, `presence`,
 * `typing`, `state`, `kicked`, `synced`, `readMarker`, `deleted`, `error` (docs/JAVASCRIPT.md).
 *
 * Reliability, as IMClient: chat messages and read receipts stay in an outbox until the
 * gateway ACKs them, are written again with RESEND when an ACK is overdue and after every
 * reconnect; deliveries are ACKed at once and surfaced once per (sender, message id) and per
 * stream offset; a lost connection is reopened after a random delay in (0-1], (1-2], (2-4]
 * ... (16-32] s (reset by a login), never after close(), logout(), a refused first login or
 * a KICK such as SESSION_TAKEN_OVER; presence watches are restored after a reconnect.
 */
export class IMClient extends EventTarget {
  /**
   * @param {object} options
   * @param {string} options.url the gateway's WebSocket URL, e.g. `ws://127.0.0.1:6980/im`
   * @param {string} [options.token] the login token (HS256 JWT); optional with a tokenProvider
   * @param {string} [options.deviceID] this device's id (default: the token's `device` claim)
   * @param {() => Promise<string>} [options.tokenProvider] a fresh token on demand: used to
   *   refresh the session before the token expires (TOKEN_REFRESH) and to log in again
   * @param {{epoch: number, offset: number}} [options.syncPosition] the `syncPosition` kept
   *   from an earlier run: the gateway catches the device up from there
   * @param {Function} [options.WebSocket] the WebSocket constructor (default globalThis.WebSocket)
   * @param {{now(): number, setTimeout: Function, clearTimeout: Function}} [options.clock]
   *   monotonic milliseconds and timers (tests inject a fake one)
   * @param {() => number} [options.random] uniform in [0, 1) for the backoff's jitter
   * @param {number} [options.ackTimeoutMs=10000] wait for an ACK before writing a request again
   * @param {number} [options.maxRetransmits=3] overdue ACKs of one request before the
   *   connection is treated as broken
   * @param {number|null} [options.sendTimeoutMs=120000] how long send() and receipt() may take
   *   in all, across reconnects (null: until close)
   * @param {number} [options.connectTimeoutMs=10000] open and log in within this
   * @param {boolean} [options.reconnect=true] reconnect after a lost connection
   * @param {{baseMs?: number, capMs?: number}} [options.backoff] the reconnect levels (1 s, 32 s)
   * @param {boolean} [options.receiptNotices=true] ask for delivered/read notices
   * @param {boolean} [options.carbons=true] ask for copies of what this user's other devices send
   * @param {boolean} [options.syncOnLogin=true] send SYNC after login (the `synced` event)
   * @param {object} [options.heartbeat] AdaptiveHeartbeat bounds (`minIntervalMs`, `maxIntervalMs`, ...)
   * @param {boolean} [options.watchNetwork=true] in a browser, reconnect at once on the `online` event
   */
  constructor(options) {
    super();
    if (!options || typeof options.url !== 'string') throw new TypeError('IMClient: options.url is required');
    if (typeof options.token !== 'string' && typeof options.tokenProvider !== 'function') {
      throw new TypeError('IMClient: options.token or options.tokenProvider is required');
    }
    this.options = {
      ackTimeoutMs: 10000, maxRetransmits: 3, sendTimeoutMs: 120000, connectTimeoutMs: 10000,
      reconnect: true, maxInFlight: 64, dedupWindow: 4096, receiptNotices: true, carbons: true,
      syncOnLogin: true, hello: true, watchNetwork: true, ...options,
    };
    this.clock = options.clock ?? DEFAULT_CLOCK;
    this.random = options.random ?? Math.random;
    this.WebSocketImpl = options.WebSocket ?? globalThis.WebSocket;
    this.backoff = new Backoff(options.backoff);
    this.machine = new ConnectionStateMachine();
    this.outbox = new Outbox({ maxInFlight: this.options.maxInFlight, maxRetransmits: this.options.maxRetransmits });
    this.dedup = new DedupWindow(this.options.dedupWindow);
    this.cursor = new StreamCursor(options.syncPosition ?? null);
    this.tokenSchedule = new TokenRefreshSchedule(options.tokenRefresh);
    this.heartbeat = null;
    this.newestToken = options.token ?? null;
    this.tokenExpired = false;
    this.lastSequence = 0;
    this.sessionID = 1;
    this.waiters = new Map(); // entry id -> {resolve, reject, timer}
    this.deferred = []; // {entry, at}
    this.answers = new Map(); // request sequence -> HISTORY_PAGE / CONVERSATION_LIST message
    this.restoring = new Set(); // entry ids of restored watches
    this.presenceWatches = new Set();
    this.chatPausedUntil = null;
    this.connection = null;
    this.generation = 0;
    this.loginDeadline = null;
    this.reconnectAt = null;
    this.openedAt = null;
    this.lastCause = IMClientError.disconnected();
    this.hasLoggedIn = false;
    this.loggedInNow = false; // LOGIN_OK seen on the current connection
    this.endedByApplication = false;
    this.firstLogin = null;
    this.closeWaiters = [];
    this.timer = null;
    this.session = null;
    this.gatewayFeatures = null;
    this.replayed = 0;
    this.onOnline = () => this.networkAvailable();
  }

  // -- Public API ------------------------------------------------------------------------

  /**
   * `'connecting'`, `'connected'`, `'reconnecting'` (waiting to reconnect) or
   * `'disconnected'` (not started, or ended).
   */
  get state() {
    const s = this.machine.state;
    if (s === 'disconnected') return this.machine.isReconnectScheduled ? 'reconnecting' : 'disconnected';
    if (s === 'disconnecting') return 'disconnected';
    return s;
  }

  /**
   * Where this device is in its stream of stored messages (`{epoch, offset}`), or null before
   * a gateway with an archive said so. Keep it (with the messages the app stored) and pass it
   * back as the `syncPosition` option next time.
   */
  get syncPosition() {
    return this.cursor.position;
  }

  /** The newest token the gateway accepted (or the provider gave): the next LOGIN's. */
  get currentToken() {
    return this.newestToken;
  }

  /**
   * Opens the connection and logs in. Resolves with the session (`{user, device, serverTime,
   * heartbeatInterval, resumed, syncStatus, features}`) after LOGIN_OK; rejects with an
   * IMClientError (e.g. `code` 201 AUTH_FAILED, `'CANNOT_CONNECT'`, `'TIMEOUT'`). From then on
   * the client stays connected until close() or logout().
   */
  connect() {
    if (this.firstLogin) return this.firstLogin.promise;
    if (this.machine.isFinished) return Promise.reject(IMClientError.disconnected('the client was closed'));
    if (this.machine.state !== 'disconnected') return Promise.resolve(this.session);
    let resolve;
    let reject;
    const promise = new Promise((res, rej) => { resolve = res; reject = rej; });
    this.firstLogin = { promise, resolve, reject };
    if (this.options.watchNetwork && typeof globalThis.addEventListener === 'function') {
      globalThis.addEventListener('online', this.onOnline);
    }
    this.handle('connect');
    return promise;
  }

  /**
   * Sends `text` to `user`; resolves `{id, offset, ts}` once the gateway ACKed it (its
   * broker and archive have it), however many retransmissions and reconnects that takes
   * (within `sendTimeoutMs`). Rejects with IMClientError: `refused` (e.g. 204
   * INVALID_USER_ID, 203 FORBIDDEN, 305 MESSAGE_ID_REUSED), `TIMEOUT`, `DISCONNECTED`.
   * @param {string} user
   * @param {string} text
   * @param {{id?: string}} [options] `id`: the message id (default a new UUID)
   */
  send(user, text, options = {}) {
    return this.sendChat({ tag: Tag.TO, value: user }, text, options);
  }

  /** Sends `text` to every member of `group` (PROTOCOL.md 6.11); like send(). */
  sendToGroup(group, text, options = {}) {
    return this.sendChat({ tag: Tag.GROUP, value: group }, text, options);
  }

  /**
   * Watches the presence of `users`: `presence` events follow with each device's state and
   * every change. Restored after every reconnect. When not connected, the watch is made at
   * the next login (and this resolves at once).
   */
  async watchPresence(users) {
    const list = [...users];
    list.forEach((u) => this.presenceWatches.add(u));
    if (this.machine.state !== 'connected') {
      if (this.machine.isFinished) throw IMClientError.disconnected();
      return;
    }
    try {
      await this.request(watchMessage(Op.PRESENCE_WATCH, list), { priority: Priority.presence, durable: false });
    } catch (error) {
      if (error.kind === 'refused') list.forEach((u) => this.presenceWatches.delete(u));
      throw error;
    }
  }

  /** Stops watching the presence of `users`. */
  async unwatchPresence(users) {
    const list = [...users];
    list.forEach((u) => this.presenceWatches.delete(u));
    if (this.machine.state !== 'connected') return;
    await this.request(watchMessage(Op.PRESENCE_UNWATCH, list), { priority: Priority.presence, durable: false });
  }

  /**
   * Tells `user` what this user is doing: `'typing'`, `'paused'` (stopped), `'recording'`,
   * `'away'`. Ephemeral and not retried; resolves `true` once ACKed, `false` if not sent or
   * refused (e.g. RATE_LIMITED: the gateway takes 4 a second). Never rejects.
   */
  typing(user, state = 'typing') {
    return this.sendTyping({ tag: Tag.TO, value: user }, state);
  }

  /** typing() in a group conversation. */
  typingInGroup(group, state = 'typing') {
    return this.sendTyping({ tag: Tag.GROUP, value: group }, state);
  }

  /**
   * Sends a read receipt for `message` (a `message` event's detail, or `{id, from}`) to its
   * sender, reliably like a chat message. Only `'read'`: delivered receipts are the gateway's.
   */
  async receipt(message, status = 'read') {
    if (status !== 'read') throw new TypeError("receipt status must be 'read' (delivered receipts come from the gateway)");
    const items = [{ tag: Tag.TO, value: message.from }, { tag: Tag.MESSAGE_ID, value: message.id }];
    await this.request({ frameType: FrameType.READ_RECEIPT, kind: 'receipt', build: () => items },
      { priority: Priority.receipt, durable: true, timeoutMs: this.options.sendTimeoutMs });
  }

  /**
   * A page of a conversation's history from the gateway's archive (PROTOCOL.md 6.15):
   * the newest messages, or those `before` / `after` a stream offset; at most `limit`
   * (default 50, at most 200). Resolves `{items: [message...], complete, epoch}`, oldest first.
   * @param {{with: string}|{group: string}} conversation
   * @param {{before?: number, after?: number, limit?: number}} [options]
   */
  async history(conversation, { before, after, limit } = {}) {
    const items = [{ tag: Tag.OP, value: Op.HISTORY }, ...conversationItems(conversation)];
    if (before !== undefined && before !== null) items.push({ tag: Tag.BEFORE, value: before });
    if (after !== undefined && after !== null) items.push({ tag: Tag.AFTER, value: after });
    if (limit !== undefined && limit !== null) items.push({ tag: Tag.LIMIT, value: limit });
    const ack = await this.request(controlMessage('history', items), { priority: Priority.other, durable: false });
    const page = ack.answer;
    if (!page || page.op !== 'HISTORY_PAGE') throw new IMClientError('refused', ErrorCode.BAD_REQUEST, 'the gateway answered HISTORY without a HISTORY_PAGE');
    const records = page.items.CONTAINER ?? [];
    return {
      items: records.map((record) => this.messageOf(record, null, true)),
      complete: page.items.COMPLETE === 1,
      epoch: page.items.STREAM_EPOCH ?? null,
    };
  }

  /**
   * The user's conversations, most recent first (PROTOCOL.md 6.16). Resolves `{items, complete}`,
   * each item `{conversation: {with}|{group}, key: 'user:bob'|'group:team', lastOffset,
   * lastTime, last: message|null, readThrough, unread}`.
   */
  async conversations({ limit, before } = {}) {
    const items = [{ tag: Tag.OP, value: Op.CONVERSATIONS }];
    if (before !== undefined && before !== null) items.push({ tag: Tag.BEFORE, value: before });
    if (limit !== undefined && limit !== null) items.push({ tag: Tag.LIMIT, value: limit });
    const ack = await this.request(controlMessage('conversations', items), { priority: Priority.other, durable: false });
    const list = ack.answer;
    if (!list || list.op !== 'CONVERSATION_LIST') throw new IMClientError('refused', ErrorCode.BAD_REQUEST, 'the gateway answered CONVERSATIONS without a CONVERSATION_LIST');
    return {
      items: (list.items.CONTAINER ?? []).map((line) => {
        const conversation = conversationOf(line);
        const last = line.CONTAINER && !Array.isArray(line.CONTAINER) ? line.CONTAINER : null;
        return {
          conversation,
          key: conversation.group !== undefined ? `group:${conversation.group}` : `user:${conversation.with}`,
          lastOffset: line.STREAM_OFFSET ?? null,
          lastTime: line.SERVER_TIME ?? null,
          last: last ? this.messageOf(last, null, true) : null,
          readThrough: line.READ_THROUGH ?? 0,
          unread: line.UNREAD ?? 0,
        };
      }),
      complete: list.items.COMPLETE === 1,
    };
  }

  /**
   * Marks a conversation read up to stream offset `through` (PROTOCOL.md 6.17). Resolves
   * `{through, unread}`: where the marker is now (it never moves back).
   */
  async markRead(conversation, through) {
    const items = [{ tag: Tag.OP, value: Op.READ_MARKER }, ...conversationItems(conversation), { tag: Tag.READ_THROUGH, value: through }];
    const ack = await this.request(controlMessage('readMarker', items), { priority: Priority.receipt, durable: false });
    return { through: ack.items.READ_THROUGH ?? through, unread: ack.items.UNREAD ?? 0 };
  }

  /** Deletes a message this user sent, for everyone (PROTOCOL.md 6.18). Resolves `{id, deletedAt}`. */
  async deleteMessage(id) {
    const items = [{ tag: Tag.OP, value: Op.DELETE }, { tag: Tag.MESSAGE_ID, value: id }];
    const ack = await this.request(controlMessage('delete', items), { priority: Priority.receipt, durable: false });
    return { id, deletedAt: ack.items.SERVER_TIME ?? null };
  }

  /**
   * Asks the gateway to deliver every stored message this device has not had (call it when
   * the page becomes visible again). Resolves `{epoch, offset, status, replayed}` once they came.
   */
  async sync() {
    const ack = await this.request(this.syncMessage(), { priority: Priority.chat, durable: false });
    return ack.synced ?? null;
  }

  /**
   * Hands the gateway a newer token (TOKEN_REFRESH); later LOGINs use it too. Resolves the
   * new expiry (Unix ms) or null; rejects `refused` (the session goes on with the old token).
   */
  async refreshToken(token) {
    const ack = await this.request(controlMessage('tokenRefresh', [{ tag: Tag.OP, value: Op.TOKEN_REFRESH }, { tag: Tag.AUTH_TOKEN, value: token }]),
      { priority: Priority.chat, durable: false });
    this.newestToken = token;
    this.tokenExpired = false;
    this.tokenSchedule.refreshed(ack.items.TOKEN_EXPIRY, this.clock.now());
    this.schedule();
    return ack.items.TOKEN_EXPIRY ?? null;
  }

  /** The network is back (browsers: the `online` event does this): a pending reconnect starts now. */
  networkAvailable() {
    this.handle('networkAvailable');
  }

  /**
   * Closes the connection without logging out and stops reconnecting: the gateway keeps
   * the device's session and queues its messages for the next login. Pending requests
   * reject with DISCONNECTED.
   */
  close() {
    this.endedByApplication = true;
    if (this.machine.isFinished && this.machine.state === 'disconnected') return Promise.resolve();
    const done = new Promise((resolve) => this.closeWaiters.push(resolve));
    this.handle('disconnect');
    if (this.machine.state === 'disconnecting') {
      if (!this.connection || this.connection.ended) {
        this.handle('disconnectCompleted');
      } else {
        // Browsers wait for the server's close frame; do not wait for ever.
        const generation = this.generation;
        this.clock.setTimeout(() => {
          if (generation === this.generation && this.machine.state === 'disconnecting') {
            this.generation += 1;
            this.handle('disconnectCompleted');
          }
        }, 2000);
      }
    }
    return done;
  }

  /**
   * Ends this device's session (LOGOUT: its presence goes offline; messages sent meanwhile
   * still arrive at its next login), then closes.
   */
  async logout() {
    if (this.machine.state === 'connected') {
      this.endedByApplication = true;
      try {
        await this.request(controlMessage('logout', [{ tag: Tag.OP, value: Op.LOGOUT }]), { priority: Priority.chat, durable: false });
      } catch {
        // Closing anyway.
      }
    }
    await this.close();
  }

  // -- Requests --------------------------------------------------------------------------

  async sendChat(recipient, text, { id = makeMessageID() } = {}) {
    if (typeof text !== 'string') throw new TypeError('text must be a string');
    const build = (resend) => {
      const items = [recipient, { tag: Tag.MESSAGE_ID, value: id }];
      if (resend) items.push({ tag: Tag.RESEND, value: 1 });
      items.push({ tag: Tag.TEXT, value: text });
      return items;
    };
    const ack = await this.request({ frameType: FrameType.DATA, kind: 'chat', build },
      { priority: Priority.chat, durable: true, timeoutMs: this.options.sendTimeoutMs });
    return { id: ack.items.MESSAGE_ID ?? id, offset: ack.items.STREAM_OFFSET ?? null, ts: ack.items.SERVER_TIME ?? null };
  }

  async sendTyping(recipient, state) {
    const value = typeof state === 'number' ? state : TYPING_ALIASES[state];
    if (value === undefined) throw new TypeError(`unknown typing state ${state}`);
    if (this.machine.state !== 'connected') return false;
    try {
      await this.request(controlMessage('typing', [{ tag: Tag.OP, value: Op.TYPING }, recipient, { tag: Tag.TYPING, value }]),
        { priority: Priority.receipt, durable: false });
      return true;
    } catch {
      return false;
    }
  }

  syncMessage() {
    return {
      frameType: FrameType.CONTROL,
      kind: 'sync',
      build: () => {
        const items = [{ tag: Tag.OP, value: Op.SYNC }];
        const position = this.cursor.position;
        if (position) items.push({ tag: Tag.STREAM_EPOCH, value: position.epoch }, { tag: Tag.STREAM_OFFSET, value: position.offset });
        return items;
      },
    };
  }

  /**
   * Puts `message` in the outbox and resolves with its positive ACK (`{sequence, items,
   * answer?}`) or rejects with `refused`. Durable requests wait across reconnects (within
   * `timeoutMs`); the others need the connection now and its ACK within `ackTimeoutMs`.
   */
  request(message, { priority, durable, timeoutMs }) {
    if (this.machine.isFinished) return Promise.reject(IMClientError.disconnected());
    if (!durable && this.machine.state !== 'connected') return Promise.reject(IMClientError.disconnected());
    const limit = durable ? timeoutMs : timeoutMs ?? this.options.ackTimeoutMs;
    return new Promise((resolve, reject) => {
      const id = this.outbox.enqueue(message, { priority, durable });
      const waiter = { resolve, reject, timer: null };
      if (limit !== null && limit !== undefined) {
        waiter.timer = this.clock.setTimeout(() => this.giveUp(id), limit);
      }
      this.waiters.set(id, waiter);
      this.pump();
    });
  }

  giveUp(id) {
    this.outbox.cancel(id);
    this.deferred = this.deferred.filter((d) => d.entry.id !== id);
    this.settleWaiter(id, null, IMClientError.timeout());
  }

  settleWaiter(id, value, error) {
    const waiter = this.waiters.get(id);
    if (!waiter) return;
    this.waiters.delete(id);
    if (waiter.timer !== null) this.clock.clearTimeout(waiter.timer);
    if (error) waiter.reject(error);
    else waiter.resolve(value);
  }

  /** An ACK from the gateway (or an answer naming a request): the heartbeat's, or an entry's. */
  settle(ack) {
    const now = this.clock.now();
    this.heartbeat?.ackReceived(ack.sequence, now);
    const entry = this.outbox.acknowledge(ack.sequence);
    if (!entry) return;
    const code = ack.items.ERROR_CODE;
    if ((code === ErrorCode.RATE_LIMITED || code === ErrorCode.STORE_UNAVAILABLE) && entry.priority === Priority.chat && entry.durable) {
      // Chat faster than the gateway takes it: back in its place, no chat until RETRY_AFTER;
      // those in flight behind it are refused too and go again in their order (6.3).
      this.outbox.restore([entry]);
      const pause = ack.items.RETRY_AFTER ?? 1000;
      this.chatPausedUntil = Math.max(this.chatPausedUntil ?? now, now + pause);
      this.schedule();
      return;
    }
    if (code !== undefined && entry.durable && (code === ErrorCode.RATE_LIMITED || code === ErrorCode.BROKER_UNAVAILABLE)) {
      this.deferred.push({ entry, at: now + 1000 });
      this.schedule();
      return;
    }
    if (code === undefined) this.acknowledged(entry, ack);
    if (this.restoring.delete(entry.id) && code !== undefined) {
      this.emit('error', { code, codeName: errorName(code), message: `restoring watches after reconnecting: ${ack.items.ERROR_MESSAGE ?? errorName(code)}` });
    }
    if (code !== undefined) {
      this.settleWaiter(entry.id, null, new IMClientError('refused', code, ack.items.ERROR_MESSAGE, { retryAfter: ack.items.RETRY_AFTER }));
    } else {
      this.settleWaiter(entry.id, ack);
    }
    this.pump();
  }

  /** What a positive ACK tells of the stream: where an own chat was stored, how far a SYNC got. */
  acknowledged(entry, ack) {
    if (entry.message.kind === 'chat' && typeof ack.items.STREAM_OFFSET === 'number') {
      this.cursor.received(ack.items.STREAM_OFFSET);
    } else if (entry.message.kind === 'sync') {
      const { STREAM_OFFSET: offset, STREAM_EPOCH: epoch, SYNC_STATUS: status } = ack.items;
      if (offset === undefined || epoch === undefined) return;
      this.cursor.caughtUp(offset, epoch);
      const synced = { epoch, offset: this.cursor.offset, status: SYNC_STATUSES[status ?? 0] ?? status, replayed: this.replayed };
      this.replayed = 0;
      ack.synced = synced;
      this.emit('synced', synced);
    }
  }

  restoreRegistrations() {
    if (this.presenceWatches.size === 0) return;
    const id = this.outbox.enqueue(watchMessage(Op.PRESENCE_WATCH, [...this.presenceWatches].sort()), { priority: Priority.presence, durable: false });
    this.restoring.add(id);
  }

  // -- The state machine's driver --------------------------------------------------------

  handle(event) {
    for (const action of this.machine.handle(event)) this.perform(action);
    this.schedule();
  }

  perform(action) {
    switch (action.type) {
      case 'openConnection':
        this.open();
        break;
      case 'closeConnection':
        this.loginDeadline = null;
        this.closeTransport(this.connection);
        if (this.machine.state !== 'disconnecting') this.connection = null;
        break;
      case 'loggedIn':
        this.didLogIn();
        break;
      case 'connectionDown':
        this.connectionDown();
        break;
      case 'scheduleReconnect': {
        const delayMs = this.backoff.delay(action.attempt, this.random);
        this.reconnectAt = this.clock.now() + delayMs;
        const cause = this.lastCause;
        this.emit('state', { state: 'reconnecting', attempt: action.attempt, delayMs, cause: { code: cause.code, message: cause.message } });
        break;
      }
      case 'cancelReconnect':
        this.reconnectAt = null;
        break;
      case 'finish':
        this.finish();
        break;
      default:
        break;
    }
  }

  open() {
    this.generation += 1;
    const generation = this.generation;
    this.loggedInNow = false;
    this.openedAt = this.clock.now();
    this.loginDeadline = this.openedAt + this.options.connectTimeoutMs;
    const connection = { generation, ws: null, opened: false, ended: false, decoder: new FrameDecoder() };
    this.connection = connection;
    this.emit('state', { state: 'connecting' });
    let ws;
    try {
      if (typeof this.WebSocketImpl !== 'function') throw new TypeError('no WebSocket implementation (pass options.WebSocket)');
      ws = new this.WebSocketImpl(this.options.url, SUBPROTOCOL);
    } catch (error) {
      connection.ended = true;
      queueMicrotask(() => this.transportEnded(connection, new IMClientError('cannotConnect', 'CANNOT_CONNECT', `cannot open ${this.options.url}: ${error.message}`)));
      return;
    }
    connection.ws = ws;
    ws.binaryType = 'arraybuffer';
    ws.onopen = () => {
      if (connection.ended) return;
      connection.opened = true;
      this.transportOpened(connection);
    };
    ws.onmessage = (event) => this.received(connection, event.data);
    ws.onerror = () => {}; // a close event follows
    ws.onclose = (event) => {
      if (connection.ended) return;
      connection.ended = true;
      const closeCode = event?.code;
      const cause = connection.opened
        ? IMClientError.disconnected(`the connection was closed (${closeCode ?? 'no code'}${event?.reason ? `: ${event.reason}` : ''})`, { closeCode })
        : new IMClientError('cannotConnect', 'CANNOT_CONNECT', `cannot connect to ${this.options.url} (${closeCode ?? 'no code'})`, { closeCode });
      this.transportEnded(connection, cause);
    };
  }

  closeTransport(connection) {
    if (!connection || !connection.ws) return;
    const ws = connection.ws;
    if (ws.readyState === 0 || ws.readyState === WS_OPEN) {
      try {
        ws.close(1000);
      } catch {
        // Already closing.
      }
    }
  }

  /** The transport is open: log in (with a fresh token first if the one in hand is stale). */
  transportOpened(connection) {
    if (connection !== this.connection || this.machine.state !== 'connecting') return;
    const provider = this.options.tokenProvider;
    if (provider && (this.tokenExpired || !this.newestToken || this.tokenSchedule.isRefreshDue(this.clock.now()))) {
      Promise.resolve().then(provider).then(
        (token) => {
          if (connection !== this.connection || this.machine.state !== 'connecting') return;
          this.newestToken = token;
          this.tokenExpired = false;
          this.sendLogin(connection);
        },
        (error) => {
          if (connection !== this.connection || this.machine.state !== 'connecting') return;
          if (this.tokenExpired || !this.newestToken) {
            this.closeTransport(connection);
            this.lost(new IMClientError('loginRefused', ErrorCode.TOKEN_EXPIRED, `no valid token: the token provider failed: ${error?.message ?? error}`));
            return;
          }
          this.sendLogin(connection);
        });
      return;
    }
    this.sendLogin(connection);
  }

  sendLogin(connection) {
    if (this.options.hello) {
      // HELLO without ZLIB: the gateway then never compresses what it sends.
      this.write(connection, { type: FrameType.CONTROL, sequence: this.nextSequence(), items: [
        { tag: Tag.OP, value: Op.HELLO }, { tag: Tag.VERSION_REQUEST, value: { major: 1, minor: 0, features: 0 } }] });
    }
    const items = [{ tag: Tag.OP, value: Op.LOGIN }, { tag: Tag.AUTH_TOKEN, value: this.newestToken }];
    if (this.options.deviceID) items.push({ tag: Tag.DEVICE_ID, value: this.options.deviceID });
    if (!this.options.receiptNotices) items.push({ tag: Tag.RECEIPT_NOTICES, value: 0 });
    if (!this.options.carbons) items.push({ tag: Tag.CARBONS, value: 0 });
    const position = this.cursor.position;
    if (position) items.push({ tag: Tag.STREAM_EPOCH, value: position.epoch }, { tag: Tag.STREAM_OFFSET, value: position.offset });
    this.write(connection, { type: FrameType.CONTROL, sequence: this.nextSequence(), items });
  }

  /** Bytes from the gateway on `connection`. */
  received(connection, data) {
    if (connection !== this.connection || connection.ended) return;
    if (typeof data === 'string') {
      this.protocolViolation(connection, new WireError(ErrorCode.MALFORMED_FRAME, 'a text message (frames travel in binary messages)'));
      return;
    }
    let frames;
    try {
      frames = connection.decoder.push(data);
    } catch (error) {
      if (!(error instanceof WireError)) throw error;
      this.protocolViolation(connection, error);
      return;
    }
    for (const frame of frames) {
      if (connection !== this.connection || connection.ended) return;
      this.heartbeat?.frameReceived(this.clock.now());
      this.react(connection, frame);
    }
    this.schedule();
  }

  /** A framing error: say why (PROTOCOL.md 6.10), close, and reconnect. */
  protocolViolation(connection, error) {
    const items = [{ tag: Tag.OP, value: Op.ERROR }, { tag: Tag.ERROR_CODE, value: error.code }, { tag: Tag.ERROR_MESSAGE, value: error.message }];
    if (error.sequence !== undefined) items.push({ tag: Tag.REF_SEQUENCE, value: error.sequence });
    this.write(connection, { type: FrameType.CONTROL, sequence: this.nextSequence(), items });
    this.closeTransport(connection);
    this.lost(new IMClientError('protocolViolation', 'PROTOCOL_VIOLATION', `${error.codeName}: ${error.message}`));
  }

  /** What the client does with one frame (IMClient's InboundRouter). */
  react(connection, frame) {
    let message;
    try {
      message = readMessage(frame);
    } catch (error) {
      if (!(error instanceof WireError)) throw error;
      // A well-framed message we cannot read: refuse it if it expects an ACK.
      const type = frame.header.type;
      if (type === FrameType.DATA || type === FrameType.READ_RECEIPT) {
        this.write(connection, { type: FrameType.ACK, sequence: frame.header.sequence, session: frame.header.session,
          items: [{ tag: Tag.ERROR_CODE, value: error.code }, { tag: Tag.ERROR_MESSAGE, value: error.message }] });
      }
      return;
    }
    const ackIt = () => this.write(connection, { type: FrameType.ACK, sequence: frame.header.sequence, session: frame.header.session });
    if (message.op === 'HEARTBEAT') {
      ackIt();
      return;
    }
    if (message.op === 'HELLO_OK') {
      this.gatewayFeatures = message.items.VERSION_RESPONSE?.features ?? null;
      return;
    }
    if (!this.loggedInNow) {
      switch (message.op) {
        case 'LOGIN_OK':
          this.loggedInNow = true;
          this.onLoginOK(message);
          return;
        case 'ERROR':
        case 'KICK':
          this.closeTransport(connection);
          this.lost(new IMClientError('loginRefused', message.items.ERROR_CODE, message.items.ERROR_MESSAGE));
          return;
        default:
          return;
      }
    }
    const items = message.items;
    switch (message.op) {
      case 'ACK':
        this.settle(message);
        return;
      case 'DELIVERY':
        this.onDelivery(message);
        ackIt();
        return;
      case 'RECEIPT_NOTICE':
        this.emit('receipt', { id: items.MESSAGE_ID, from: items.FROM, status: items.RECEIPT_KIND === 2 ? 'read' : 'delivered', ts: items.SERVER_TIME });
        ackIt();
        return;
      case 'PUBLISH':
        ackIt(); // not surfaced by this client; ACKed so that it does not hold the session
        return;
      case 'PRESENCE':
        this.emit('presence', { user: items.USER_ID, device: items.DEVICE_ID ?? null, status: items.USER_STATUS === 1 ? 'online' : 'offline', lastSeen: items.LAST_SEEN ?? null });
        return;
      case 'TYPING':
        if (items.FROM === undefined) return;
        this.emit('typing', {
          from: items.FROM, to: items.GROUP !== undefined ? null : items.TO ?? this.session?.user ?? null, group: items.GROUP ?? null,
          state: TYPING_STATES[items.TYPING] ?? 'paused',
        });
        return;
      case 'READ_MARKER':
        this.emit('readMarker', { conversation: conversationOf(items), through: items.READ_THROUGH, unread: items.UNREAD ?? 0 });
        return;
      case 'HISTORY_PAGE':
      case 'CONVERSATION_LIST': {
        const sequence = items.REF_SEQUENCE;
        if (!this.outbox.isInFlight(sequence)) return; // its request gave up meanwhile
        this.settle({ op: 'ACK', sequence, items: {}, answer: message });
        return;
      }
      case 'KICK': {
        const code = items.ERROR_CODE;
        this.emit('kicked', { reason: errorName(code), code, message: items.ERROR_MESSAGE ?? null });
        this.closeTransport(connection);
        this.lost(new IMClientError('kicked', code, items.ERROR_MESSAGE));
        return;
      }
      case 'ERROR':
        // A framing error of ours, or a refused request without ACK; the gateway closes after 1xx.
        this.emit('error', { code: items.ERROR_CODE, codeName: errorName(items.ERROR_CODE), message: items.ERROR_MESSAGE ?? null });
        return;
      default:
        // A late LOGIN_OK, LOCATION, or a client-to-gateway message: nothing to do.
    }
  }

  /** A DELIVERY: surfaced once per stream offset and per (sender, message id); always ACKed. */
  onDelivery(message) {
    const items = message.items;
    if (typeof items.STREAM_OFFSET === 'number' && !this.cursor.received(items.STREAM_OFFSET)) return;
    if (items.DELETED === 1) {
      if (!this.dedup.firstSighting(`${items.FROM}\u0000${items.MESSAGE_ID}\u0000deleted`)) return;
      this.emit('deleted', { id: items.MESSAGE_ID, from: items.FROM, to: items.TO ?? null, group: items.GROUP ?? null,
        isCarbon: items.CARBON === 1, deletedAt: items.SERVER_TIME, offset: items.STREAM_OFFSET ?? null });
      return;
    }
    if (!this.dedup.firstSighting(`${items.FROM}\u0000${items.MESSAGE_ID}`)) return;
    if (items.ARCHIVED === 1) this.replayed += 1;
    this.emit('message', this.messageOf(items, message.content, false));
  }

  /** A message event's detail from DELIVERY items (or a history record). */
  messageOf(items, content, stored) {
    if (content === null) {
      for (const [tag, kind] of Object.entries(CONTENT_KINDS)) {
        const name = tagName(Number(tag));
        if (items[name] !== undefined) content = { tag: Number(tag), kind, value: items[name] };
      }
    }
    const group = items.GROUP ?? null;
    const isCarbon = items.CARBON === 1;
    return {
      id: items.MESSAGE_ID,
      from: items.FROM,
      to: group !== null ? null : items.TO ?? this.session?.user ?? null,
      group,
      text: content?.kind === 'text' ? content.value : null,
      content: content ? { kind: content.kind, value: content.value } : null,
      ts: items.SERVER_TIME ?? null,
      offset: items.STREAM_OFFSET ?? null,
      isArchived: stored || items.ARCHIVED === 1,
      isDeleted: items.DELETED === 1,
      isCarbon,
      resend: items.RESEND === 1,
    };
  }

  onLoginOK(message) {
    const items = message.items;
    const interval = items.HEARTBEAT_INTERVAL > 0 ? items.HEARTBEAT_INTERVAL * 1000 : 30000;
    this.session = {
      user: items.USER_ID, device: items.DEVICE_ID ?? this.options.deviceID ?? null, serverTime: items.SERVER_TIME ?? null,
      heartbeatInterval: interval, resumed: items.SESSION_RESUMED === undefined ? null : items.SESSION_RESUMED === 1,
      syncStatus: items.SYNC_STATUS === undefined ? null : SYNC_STATUSES[items.SYNC_STATUS] ?? items.SYNC_STATUS,
      tokenExpiry: items.TOKEN_EXPIRY ?? null, features: this.gatewayFeatures,
    };
    if (items.STREAM_EPOCH !== undefined && items.SYNC_STATUS !== undefined) {
      this.cursor.loggedIn(items.STREAM_EPOCH, items.STREAM_OFFSET, items.SYNC_STATUS);
    }
    this.tokenSchedule.loggedIn(items.SERVER_TIME ?? Date.now(), items.TOKEN_EXPIRY, this.clock.now());
    this.handle('connectSucceeded');
  }

  didLogIn() {
    this.loginDeadline = null;
    const now = this.clock.now();
    const config = { ...this.options.heartbeat };
    config.maxIntervalMs = Math.min(config.maxIntervalMs ?? 30000, this.session.heartbeatInterval);
    if (!this.heartbeat) this.heartbeat = new AdaptiveHeartbeat(config, now);
    else this.heartbeat.configure(config);
    this.heartbeat.connectionStarted(now);
    if (this.openedAt !== null) this.heartbeat.roundTripMeasured(now - this.openedAt);
    this.restoreRegistrations();
    const again = this.hasLoggedIn;
    this.hasLoggedIn = true;
    if (this.options.syncOnLogin && this.cursor.position) {
      this.replayed = 0;
      // Nobody waits for it: the `synced` event tells.
      this.request(this.syncMessage(), { priority: Priority.chat, durable: false }).catch(() => {});
    }
    this.emit('state', { state: 'connected', reconnected: again, session: this.session });
    if (this.firstLogin) {
      const first = this.firstLogin;
      this.firstLogin = { promise: first.promise, resolve() {}, reject() {} };
      first.resolve(this.session);
    }
    this.pump();
  }

  connectionDown() {
    this.tokenSchedule.connectionLost();
    this.chatPausedUntil = null;
    for (const entry of this.outbox.connectionLost()) {
      this.restoring.delete(entry.id);
      this.settleWaiter(entry.id, null, IMClientError.disconnected());
    }
  }

  transportEnded(connection, cause) {
    if (connection !== this.connection) return;
    switch (this.machine.state) {
      case 'connecting':
      case 'connected':
        this.connection = null;
        this.lost(cause);
        break;
      case 'disconnecting':
        this.connection = null;
        this.handle('disconnectCompleted');
        break;
      default:
        this.connection = null;
    }
  }

  /** The current connection is lost or failed because of `cause`. */
  lost(cause) {
    this.lastCause = cause;
    if ((cause.kind === 'kicked' || cause.kind === 'loginRefused') && cause.code === ErrorCode.TOKEN_EXPIRED) this.tokenExpired = true;
    const failure = this.isTerminal(cause) ? 'terminal' : 'transient';
    switch (this.machine.state) {
      case 'connecting': this.handle({ type: 'connectFailed', failure }); break;
      case 'connected': this.handle({ type: 'connectionLost', failure }); break;
      case 'disconnecting': this.handle('disconnectCompleted'); break;
      default: break;
    }
  }

  isTerminal(cause) {
    if (!this.hasLoggedIn || !this.options.reconnect || this.endedByApplication) return true;
    if (cause.kind === 'kicked' || cause.kind === 'loginRefused') {
      if (cause.code === ErrorCode.TOKEN_EXPIRED && this.options.tokenProvider) return false;
      return !TRANSIENT_CODES.has(cause.code);
    }
    return false;
  }

  finish() {
    this.reconnectAt = null;
    this.loginDeadline = null;
    if (this.timer) {
      this.clock.clearTimeout(this.timer.handle);
      this.timer = null;
    }
    if (typeof globalThis.removeEventListener === 'function') globalThis.removeEventListener('online', this.onOnline);
    if (this.firstLogin) {
      const first = this.firstLogin;
      first.reject(this.endedByApplication && !this.hasLoggedIn ? IMClientError.disconnected('closed before login') : this.lastCause);
      this.firstLogin = { promise: first.promise, resolve() {}, reject() {} };
      first.promise.catch(() => {});
    }
    for (const id of [...this.waiters.keys()]) this.settleWaiter(id, null, IMClientError.disconnected());
    for (const entry of this.outbox.connectionLost()) this.restoring.delete(entry.id);
    this.deferred = [];
    const cause = this.endedByApplication ? null : { code: this.lastCause.code, message: this.lastCause.message };
    this.emit('state', { state: 'disconnected', cause });
    const waiting = this.closeWaiters;
    this.closeWaiters = [];
    waiting.forEach((resolve) => resolve());
  }

  // -- Timer -----------------------------------------------------------------------------

  /** Arms the one timer for the earliest deadline (login, reconnect, ACK, heartbeat, token). */
  schedule() {
    if (this.machine.isFinished && this.machine.state !== 'disconnecting') return;
    const now = this.clock.now();
    const candidates = [this.loginDeadline, this.reconnectAt];
    for (const d of this.deferred) candidates.push(d.at);
    if (this.chatPausedUntil !== null && this.chatPausedUntil > now) candidates.push(this.chatPausedUntil);
    if (this.machine.state === 'connected') {
      candidates.push(this.outbox.nextDeadline);
      if (this.heartbeat) candidates.push(this.heartbeat.peekDeadline(now));
      if (this.options.tokenProvider) {
        const next = this.tokenSchedule.nextAction(now);
        if (next === 'refresh') candidates.push(now);
        else if (next) candidates.push(next.until);
      }
    }
    const valid = candidates.filter((c) => typeof c === 'number');
    if (valid.length === 0) return;
    const next = Math.min(...valid);
    if (this.timer && this.timer.deadline <= next) return;
    if (this.timer) this.clock.clearTimeout(this.timer.handle);
    const timer = { deadline: next, handle: null };
    timer.handle = this.clock.setTimeout(() => {
      if (this.timer !== timer) return;
      this.timer = null;
      this.tick();
    }, Math.max(0, next - now));
    this.timer = timer;
  }

  tick() {
    const now = this.clock.now();
    if (this.loginDeadline !== null && this.loginDeadline <= now) {
      this.loginDeadline = null;
      this.closeTransport(this.connection);
      this.lost(IMClientError.timeout('no LOGIN_OK in time'));
    }
    if (this.reconnectAt !== null && this.reconnectAt <= now) {
      this.reconnectAt = null;
      this.handle('reconnectDue');
    }
    const due = this.deferred.filter((d) => d.at <= now);
    if (due.length) {
      this.deferred = this.deferred.filter((d) => d.at > now);
      this.outbox.restore(due.map((d) => d.entry));
    }
    if (this.machine.state === 'connected') {
      const expiry = this.outbox.expire(now);
      if (expiry.connectionBroken) {
        this.closeTransport(this.connection);
        this.lost(IMClientError.timeout('requests went unanswered: the connection is broken'));
      }
    }
    if (this.machine.state === 'connected' && this.heartbeat) {
      const action = this.heartbeat.nextAction(now);
      if (action.type === 'send') {
        this.sendHeartbeat();
      } else if (action.type === 'dead') {
        this.closeTransport(this.connection);
        this.lost(new IMClientError('connectionDead', 'CONNECTION_DEAD', 'the connection stopped answering heartbeats'));
      }
    }
    this.refreshTokenIfDue(now);
    this.pump();
    this.schedule();
  }

  refreshTokenIfDue(now) {
    const provider = this.options.tokenProvider;
    if (this.machine.state !== 'connected' || !provider || this.tokenSchedule.nextAction(now) !== 'refresh') return;
    this.tokenSchedule.refreshStarted();
    const generation = this.generation;
    Promise.resolve().then(provider).then((token) => this.refreshToken(token)).catch(() => {
      if (generation !== this.generation || this.machine.state !== 'connected') return;
      this.tokenSchedule.refreshFailed(this.clock.now(), this.random);
      this.schedule();
    });
  }

  // -- Writing ---------------------------------------------------------------------------

  /** Writes what the outbox allows now. */
  pump() {
    const connection = this.connection;
    if (this.machine.state !== 'connected' || !connection) return;
    const now = this.clock.now();
    const paused = new Set();
    if (this.chatPausedUntil !== null) {
      if (this.chatPausedUntil > now || this.outbox.hasInFlight(Priority.chat)) paused.add(Priority.chat);
      else this.chatPausedUntil = null;
    }
    for (const entry of this.outbox.nextToSend(paused)) {
      const sequence = this.nextSequence();
      this.outbox.markSent(entry.id, sequence, now + this.options.ackTimeoutMs);
      this.write(connection, { type: entry.message.frameType, sequence, items: entry.message.build(entry.resend) });
    }
    this.schedule();
  }

  sendHeartbeat() {
    const sequence = this.nextSequence();
    this.heartbeat.heartbeatSent(sequence, this.clock.now());
    this.write(this.connection, { type: FrameType.HEARTBEAT, sequence });
  }

  /** The next sequence number not in flight (PROTOCOL.md 5.1: 1, 2, ... wrapping to 0). */
  nextSequence() {
    do {
      this.lastSequence = (this.lastSequence + 1) >>> 0;
    } while (this.outbox.isInFlight(this.lastSequence));
    return this.lastSequence;
  }

  write(connection, frame) {
    const ws = connection?.ws;
    if (!ws || connection.ended || ws.readyState !== WS_OPEN) return;
    const bytes = encodeFrame({ session: frame.session ?? this.sessionID, timestamp: unixSeconds(), ...frame });
    this.heartbeat?.frameSent(this.clock.now());
    ws.send(bytes);
  }

  emit(name, detail) {
    this.dispatchEvent(new CustomEvent(name, { detail }));
  }
}

function controlMessage(kind, items) {
  return { frameType: FrameType.CONTROL, kind, build: () => items };
}

function watchMessage(op, users) {
  return controlMessage('watch', [{ tag: Tag.OP, value: op }, { tag: Tag.CONTAINER, value: users.map((u) => ({ tag: Tag.USER_ID, value: u })) }]);
}
