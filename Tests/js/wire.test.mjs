// The codec against PROTOCOL.md's test vectors (Tests/IMWireTests/Fixtures/vectors.json).
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import {
  crc32, FrameDecoder, decodeHeader, encodeFrame, encodeItems, decodeItems, readMessage, readValue,
  tagName, tagType, WireError, ErrorCode, errorName, Tag,
} from '../../Sources/IMWeb/Resources/imclient.js';
import { fromHex, toHex } from './support.mjs';

const fixture = JSON.parse(readFileSync(new URL('../IMWireTests/Fixtures/vectors.json', import.meta.url), 'utf8'));
const plain = fixture.vectors.filter((v) => v.header.compress === 0);

/** The decoded items in the fixture's shape: {name, tag: '0x0105', type, value} / {items}. */
function asFixtureItems(items) {
  return items.map((item) => {
    const tag = '0x' + item.tag.toString(16).toUpperCase().padStart(4, '0');
    if (item.items) return { items: asFixtureItems(item.items), name: tagName(item.tag), tag, type: 'container' };
    const type = tagType(item.tag);
    let value = readValue(item, type);
    if (value instanceof Uint8Array) value = toHex(value);
    return { name: tagName(item.tag), tag, type, value };
  });
}

/** The fixture's items as encodeItems takes them. */
function fromFixtureItems(items) {
  return items.map((item) => ({
    tag: parseInt(item.tag, 16),
    type: item.type,
    value: item.type === 'container' ? fromFixtureItems(item.items) : item.type === 'bytes' ? fromHex(item.value) : item.value,
  }));
}

function headerOf(vector) {
  const h = vector.header;
  return { type: h.type, sequence: h.sequence, timestamp: h.timestamp, encrypt: h.encrypt, compress: h.compress,
    session: h.session, versionMajor: h.versionMajor, versionMinor: h.versionMinor };
}

function decodeOne(bytes) {
  const decoder = new FrameDecoder();
  const frames = decoder.push(bytes);
  assert.equal(frames.length, 1);
  assert.equal(decoder.buffered, 0);
  return frames[0];
}

test('the fixture is the one this suite reads', () => {
  assert.equal(fixture.format, 'imwire-test-vectors/1');
  assert.ok(fixture.vectors.length >= 80, `${fixture.vectors.length} vectors`);
  assert.ok(fixture.malformed.length >= 20);
});

test('CRC-32 is zlib\'s: check value of "123456789" is 0xCBF43926, empty is 0', () => {
  assert.equal(crc32(new TextEncoder().encode('123456789')), 0xcbf43926);
  assert.equal(crc32(new Uint8Array(0)), 0);
  assert.equal(crc32(fromHex('00')), 0xd202ef8d);
});

describe('valid vectors', () => {
  for (const vector of fixture.vectors) {
    test(`${vector.name}: the header reads as documented`, () => {
      const h = decodeHeader(fromHex(vector.hex));
      assert.deepEqual({ ...h, magic: undefined, crc32: undefined, bodyLength: undefined },
        { ...headerOf(vector), magic: undefined, crc32: undefined, bodyLength: undefined });
      assert.equal(h.magic, 0xdecafbad);
      assert.equal(h.bodyLength, vector.header.bodyLength);
      assert.equal('0x' + h.crc32.toString(16).toUpperCase().padStart(8, '0'), vector.header.crc32);
    });
  }

  for (const vector of plain) {
    test(`${vector.name}: decodes to the documented items`, () => {
      const frame = decodeOne(fromHex(vector.hex));
      if (vector.rawBody !== undefined) {
        assert.equal(frame.items, null);
        assert.equal(toHex(frame.body), vector.rawBody);
      } else {
        assert.deepEqual(asFixtureItems(frame.items), vector.items ?? []);
      }
    });

    test(`${vector.name}: encoding the documented fields gives the hex`, () => {
      const body = vector.rawBody !== undefined ? fromHex(vector.rawBody) : encodeItems(fromFixtureItems(vector.items ?? []));
      assert.equal(toHex(encodeFrame({ ...headerOf(vector), body })), vector.hex);
    });

    test(`${vector.name}: reads as a message`, () => {
      const message = readMessage(decodeOne(fromHex(vector.hex)));
      const op = (vector.items ?? []).find((i) => i.name === 'OP');
      if (op) assert.equal(message.op, OP_NAMES[op.value]);
      if (vector.header.type === 2) assert.equal(message.op, 'ACK');
    });
  }

  test('the message reader names implied operations (PROTOCOL.md 4)', () => {
    const op = (name) => readMessage(decodeOne(fromHex(fixture.vectors.find((v) => v.name === name).hex))).op;
    assert.equal(op('chat'), 'CHAT');
    assert.equal(op('group-chat'), 'CHAT');
    assert.equal(op('delivery'), 'DELIVERY');
    assert.equal(op('group-delivery'), 'DELIVERY');
    assert.equal(op('carbon-group'), 'DELIVERY');
    assert.equal(op('carbon'), 'DELIVERY');
    assert.equal(op('read-receipt'), 'RECEIPT');
    assert.equal(op('receipt-delivered'), 'RECEIPT_NOTICE');
    assert.equal(op('hello-seed'), 'HELLO');
    assert.equal(op('control-implied-error'), 'ERROR');
    assert.equal(op('control-implied-login-ok'), 'LOGIN_OK');
    assert.equal(op('heartbeat'), 'HEARTBEAT');
    const seed = readMessage(decodeOne(fromHex(fixture.vectors.find((v) => v.name === 'delivery-ack-seed').hex)));
    assert.equal(seed.op, 'ACK');
    assert.equal(seed.sequence, 3, 'the seed ACK acknowledges the sequence in its body');
  });

  test('records and lists read by name', () => {
    const page = readMessage(decodeOne(fromHex(fixture.vectors.find((v) => v.name === 'history-page').hex)));
    assert.equal(page.items.CONTAINER.length, 2);
    assert.equal(page.items.CONTAINER[1].TEXT, 'Hi!');
    assert.equal(page.items.CONTAINER[1].CARBON, 1);
    const list = readMessage(decodeOne(fromHex(fixture.vectors.find((v) => v.name === 'conversation-list').hex)));
    assert.equal(list.items.CONTAINER[0].GROUP, 'team');
    assert.equal(list.items.CONTAINER[0].CONTAINER.TEXT, 'Lunch?');
    const watch = readMessage(decodeOne(fromHex(fixture.vectors.find((v) => v.name === 'presence-watch').hex)));
    assert.deepEqual(watch.items.CONTAINER, ['bob', 'carol']);
  });

  test('a compressed frame is refused cleanly: UNSUPPORTED_COMPRESSION (the client announces no ZLIB)', () => {
    for (const vector of fixture.vectors.filter((v) => v.header.compress === 1)) {
      assert.throws(() => new FrameDecoder().push(fromHex(vector.hex)), (e) => e instanceof WireError && e.code === ErrorCode.UNSUPPORTED_COMPRESSION && e.fatal);
    }
  });
});

const OP_NAMES = {
  1: 'HELLO', 2: 'HELLO_OK', 16: 'LOGIN', 17: 'LOGIN_OK', 18: 'LOGOUT', 19: 'KICK', 20: 'ERROR', 21: 'TOKEN_REFRESH',
  22: 'SYNC', 23: 'HISTORY', 24: 'HISTORY_PAGE', 25: 'CONVERSATIONS', 26: 'CONVERSATION_LIST', 27: 'READ_MARKER',
  28: 'DELETE', 32: 'PRESENCE_WATCH', 33: 'PRESENCE_UNWATCH', 34: 'PRESENCE', 48: 'LOCATION_SHARE_START',
  49: 'LOCATION_SHARE_STOP', 50: 'LOCATION_UPDATE', 51: 'LOCATION_WATCH', 52: 'LOCATION_UNWATCH', 53: 'LOCATION',
  64: 'SUBSCRIBE', 65: 'UNSUBSCRIBE', 66: 'PUBLISH', 80: 'CHAT', 81: 'DELIVERY', 96: 'RECEIPT', 97: 'RECEIPT_NOTICE', 112: 'TYPING',
};

describe('malformed vectors', () => {
  for (const vector of fixture.malformed) {
    test(`${vector.name}: refused with ${vector.errorName}`, () => {
      const bytes = fromHex(vector.hex);
      const compressed = decodeHeader(bytes).compress === 1;
      let error;
      try {
        // The vectors assume the gateway's default limit, 1 MiB.
        const frames = new FrameDecoder({ maxBodyLength: 1048576 }).push(bytes);
        assert.equal(vector.stage, 'message', 'a framing error must be found by the decoder');
        assert.equal(frames.length, 1);
        readMessage(frames[0]);
      } catch (e) {
        error = e;
      }
      assert.ok(error instanceof WireError, `refused (${error})`);
      if (compressed) {
        // zlib vectors: this client inflates nothing, so it refuses them one step earlier
        // (PROTOCOL.md 7: "zlib at a receiver without zlib" is UNSUPPORTED_COMPRESSION).
        assert.equal(error.code, vector.errorCode === 108 || vector.errorCode === 103 ? ErrorCode.UNSUPPORTED_COMPRESSION : vector.errorCode);
      } else {
        assert.equal(error.code, vector.errorCode);
        assert.equal(error.codeName, vector.errorName);
        assert.equal(errorName(error.code), vector.errorName);
      }
      assert.equal(error.fatal, vector.closesConnection);
      if (vector.stage === 'frame' && !compressed) assert.equal(error.message, vector.detail);
    });
  }

  test('the decoder stays failed after a framing error (no resynchronisation)', () => {
    const decoder = new FrameDecoder();
    const bad = fromHex(fixture.malformed.find((v) => v.name === 'bad-crc').hex);
    assert.throws(() => decoder.push(bad), (e) => e.code === ErrorCode.BAD_CRC);
    const good = fromHex(fixture.vectors.find((v) => v.name === 'heartbeat').hex);
    assert.throws(() => decoder.push(good), (e) => e.code === ErrorCode.BAD_CRC);
  });

  test('a body above the limit is refused as soon as the header is in, before any body byte', () => {
    const decoder = new FrameDecoder({ maxBodyLength: 100 });
    const frame = encodeFrame({ type: 0, sequence: 1, timestamp: 0, session: 1, items: [{ tag: Tag.TEXT, value: 'x'.repeat(200) }] });
    assert.throws(() => decoder.push(frame.subarray(0, 28)), (e) => e.code === ErrorCode.BODY_TOO_LARGE);
  });
});

describe('a byte stream, not messages', () => {
  const all = plain.map((v) => fromHex(v.hex));
  const joined = new Uint8Array(all.reduce((n, b) => n + b.length, 0));
  let at = 0;
  for (const b of all) { joined.set(b, at); at += b.length; }

  test('every vector fed byte by byte gives the same frame', () => {
    for (const bytes of all) {
      const decoder = new FrameDecoder();
      const frames = [];
      for (let i = 0; i < bytes.length; i++) {
        const out = decoder.push(bytes.subarray(i, i + 1));
        if (i < bytes.length - 1) assert.equal(out.length, 0, 'no frame before its last byte');
        frames.push(...out);
      }
      assert.equal(frames.length, 1);
      assert.deepEqual(frames[0].body, decodeOne(bytes).body);
    }
  });

  test('all vectors in one message give every frame, in order', () => {
    const frames = new FrameDecoder().push(joined);
    assert.equal(frames.length, all.length);
    frames.forEach((frame, i) => assert.equal(toHex(encodeFrame({ ...frame.header, body: frame.body })), plain[i].hex));
  });

  test('all vectors in messages of odd sizes (frames spanning messages, several per message)', () => {
    for (const size of [3, 7, 29, 64, 1000]) {
      const decoder = new FrameDecoder();
      const frames = [];
      for (let i = 0; i < joined.length; i += size) frames.push(...decoder.push(joined.slice(i, i + size).buffer));
      assert.equal(frames.length, all.length, `chunks of ${size}`);
      assert.equal(decoder.buffered, 0);
      frames.forEach((frame, i) => assert.equal(frame.header.sequence, decodeHeader(all[i]).sequence));
    }
  });

  test('a large frame spanning many messages', () => {
    const text = 'é'.repeat(300000);
    const bytes = encodeFrame({ type: 0, sequence: 9, timestamp: 0, session: 1, items: [{ tag: Tag.FROM, value: 'a' }, { tag: Tag.MESSAGE_ID, value: 'm' }, { tag: Tag.SERVER_TIME, value: 1 }, { tag: Tag.TEXT, value: text }] });
    const decoder = new FrameDecoder();
    const frames = [];
    for (let i = 0; i < bytes.length; i += 4096) frames.push(...decoder.push(bytes.subarray(i, i + 4096)));
    assert.equal(frames.length, 1);
    assert.equal(readMessage(frames[0]).content.value, text);
  });
});

describe('TLV', () => {
  test('u64 above 2^53 reads as a BigInt, and round-trips', () => {
    const body = encodeItems([{ tag: Tag.STREAM_OFFSET, value: 2n ** 60n }, { tag: Tag.STREAM_EPOCH, value: 42 }]);
    const items = decodeItems(body);
    assert.equal(readValue(items[0]), 2n ** 60n);
    assert.equal(readValue(items[1]), 42);
  });
  test('unknown tags are ignored by the message reader; application tags kept', () => {
    const body = encodeItems([{ tag: Tag.TO, value: 'bob' }, { tag: Tag.MESSAGE_ID, value: 'm' }, { tag: 0x0999, value: fromHex('01') }, { tag: 0xf001, value: fromHex('6170') }, { tag: Tag.TEXT, value: 'x' }]);
    const message = readMessage({ header: { type: 0, sequence: 1, session: 1 }, items: decodeItems(body) });
    assert.equal(message.op, 'CHAT');
    assert.equal(toHex(message.items['0xF001']), '6170');
  });
  test('two content items are BAD_REQUEST; an invalid identifier INVALID_USER_ID', () => {
    const two = encodeItems([{ tag: Tag.FROM, value: 'a' }, { tag: Tag.MESSAGE_ID, value: 'm' }, { tag: Tag.SERVER_TIME, value: 1 }, { tag: Tag.TEXT, value: 'x' }, { tag: Tag.IMAGE, value: fromHex('00') }]);
    assert.throws(() => readMessage({ header: { type: 0, sequence: 1, session: 1 }, items: decodeItems(two) }), (e) => e.code === ErrorCode.BAD_REQUEST && !e.fatal);
    const bad = encodeItems([{ tag: Tag.OP, value: 0x22 }, { tag: Tag.USER_ID, value: 'a#b' }, { tag: Tag.USER_STATUS, value: 1 }]);
    assert.throws(() => readMessage({ header: { type: 3, sequence: 1, session: 1 }, items: decodeItems(bad) }), (e) => e.code === ErrorCode.INVALID_USER_ID);
  });
});
