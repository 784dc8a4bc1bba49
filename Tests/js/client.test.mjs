// IMClient against a fake WebSocket and a fake clock: whole sessions, no real time passes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { IMClient, IMClientError, FrameType, Tag, Op, ErrorCode, SUBPROTOCOL, encodeFrame } from '../../Sources/IMWeb/Resources/imclient.js';
import { FakeClock, FakeGateway, flush, record } from './support.mjs';

function setup(options = {}) {
  const clock = new FakeClock();
  const gateway = new FakeGateway();
  const client = new IMClient({
    url: 'ws://127.0.0.1:6980/im', token: 'token-1', deviceID: 'web', WebSocket: gateway.WebSocket, clock, random: () => 0.5,
    ...options,
  });
  const events = record(client, ['message', 'receipt', 'presence', 'typing', 'state', 'kicked', 'synced', 'readMarker', 'deleted', 'error']);
  return { clock, gateway, client, events };
}

async function connected(options = {}, handshake = {}) {
  const s = setup(options);
  const login = s.client.connect();
  const socket = await s.gateway.socket(0);
  s.loginFrame = await s.gateway.handshake(socket, handshake);
  s.session = await login;
  s.socket = socket;
  return s;
}

const delivery = (sequence, from, id, text, extra = []) => ({
  type: FrameType.DATA, sequence, items: [
    { tag: Tag.FROM, value: from }, { tag: Tag.MESSAGE_ID, value: id }, { tag: Tag.SERVER_TIME, value: 1735689600123 }, ...extra,
    { tag: Tag.TEXT, value: text }],
});

test('HELLO then LOGIN with token and device; connect resolves after LOGIN_OK', async () => {
  const { clock, gateway, client, events } = setup();
  assert.equal(client.state, 'disconnected');
  const login = client.connect();
  const socket = await gateway.socket(0);
  assert.equal(socket.url, 'ws://127.0.0.1:6980/im');
  assert.equal(socket.protocol, SUBPROTOCOL);
  assert.equal(socket.binaryType, 'arraybuffer');
  assert.equal(client.state, 'connecting');
  gateway.open(socket);
  const hello = await gateway.next(socket);
  assert.equal(hello.op, 'HELLO');
  assert.deepEqual(hello.items.VERSION_REQUEST, { major: 1, minor: 0, features: 0 }, 'no ZLIB announced');
  const loginFrame = await gateway.next(socket);
  assert.equal(loginFrame.op, 'LOGIN');
  assert.equal(loginFrame.items.AUTH_TOKEN, 'token-1');
  assert.equal(loginFrame.items.DEVICE_ID, 'web');
  assert.equal(loginFrame.items.STREAM_EPOCH, undefined, 'no position known yet');
  let settled = false;
  login.then(() => { settled = true; });
  await flush();
  assert.equal(settled, false, 'not before LOGIN_OK');
  gateway.send(socket, { type: FrameType.CONTROL, sequence: 2, items: [
    { tag: Tag.OP, value: Op.LOGIN_OK }, { tag: Tag.USER_ID, value: 'alice' }, { tag: Tag.DEVICE_ID, value: 'web' },
    { tag: Tag.SERVER_TIME, value: 1735689600123 }, { tag: Tag.HEARTBEAT_INTERVAL, value: 30 }, { tag: Tag.REF_SEQUENCE, value: loginFrame.sequence }] });
  const session = await login;
  assert.equal(session.user, 'alice');
  assert.equal(session.device, 'web');
  assert.equal(client.state, 'connected');
  assert.deepEqual(events.filter((e) => e.name === 'state').map((e) => e.state), ['connecting', 'connected']);
  await client.close();
  assert.equal(client.state, 'disconnected');
  await clock.advance(120_000);
  assert.equal(gateway.sockets.length, 1, 'no reconnect after close()');
});

test('a refused login rejects connect() with the gateway\'s code and does not reconnect', async () => {
  const { clock, gateway, client } = setup();
  const login = client.connect();
  const socket = await gateway.socket(0);
  gateway.open(socket);
  await gateway.next(socket);
  const loginFrame = await gateway.next(socket);
  gateway.send(socket, { type: FrameType.CONTROL, sequence: 2, items: [
    { tag: Tag.OP, value: Op.ERROR }, { tag: Tag.ERROR_CODE, value: ErrorCode.AUTH_FAILED },
    { tag: Tag.ERROR_MESSAGE, value: 'token signature invalid' }, { tag: Tag.REF_SEQUENCE, value: loginFrame.sequence }] });
  await assert.rejects(login, (e) => e instanceof IMClientError && e.code === 201 && e.codeName === 'AUTH_FAILED' && e.kind === 'loginRefused' && /signature/.test(e.message));
  await clock.advance(60_000);
  assert.equal(gateway.sockets.length, 1);
  assert.equal(client.state, 'disconnected');
});

test('chat: CHAT frame out, resolves with the ACK\'s offset and time', async () => {
  const { gateway, client, socket } = await connected();
  const sent = client.send('bob', 'Hello, Bob! 👋', { id: 'm-0001' });
  const chat = await gateway.next(socket);
  assert.equal(chat.frameType, FrameType.DATA);
  assert.equal(chat.op, 'CHAT');
  assert.equal(chat.items.TO, 'bob');
  assert.equal(chat.items.MESSAGE_ID, 'm-0001');
  assert.equal(chat.items.RESEND, undefined);
  assert.equal(chat.content.value, 'Hello, Bob! 👋');
  gateway.ack(socket, chat.sequence, [{ tag: Tag.MESSAGE_ID, value: 'm-0001' }, { tag: Tag.SERVER_TIME, value: 1735689600123 }, { tag: Tag.STREAM_OFFSET, value: 42 }]);
  assert.deepEqual(await sent, { id: 'm-0001', offset: 42, ts: 1735689600123 });

  const group = client.sendToGroup('team', 'hi all');
  const groupChat = await gateway.next(socket);
  assert.equal(groupChat.items.GROUP, 'team');
  assert.equal(groupChat.items.TO, undefined);
  assert.match(groupChat.items.MESSAGE_ID, /^[0-9a-f-]{36}$/);
  gateway.ack(socket, groupChat.sequence, [{ tag: Tag.ERROR_CODE, value: ErrorCode.FORBIDDEN }, { tag: Tag.ERROR_MESSAGE, value: 'not a member' }]);
  await assert.rejects(group, (e) => e.kind === 'refused' && e.code === 203 && e.message === 'not a member');
  await client.close();
});

test('every DELIVERY is ACKed; a duplicate is surfaced once (by sender and id, and by stream offset)', async () => {
  const { gateway, client, socket, events } = await connected();
  gateway.send(socket, delivery(7, 'bob', 'b-1', 'one', [{ tag: Tag.STREAM_OFFSET, value: 5 }]));
  const ack1 = await gateway.next(socket);
  assert.equal(ack1.frameType, FrameType.ACK);
  assert.equal(ack1.sequence, 7);
  assert.equal(ack1.session, 1);
  assert.deepEqual(ack1.items, {}, 'a plain ACK: empty body');
  gateway.send(socket, delivery(8, 'bob', 'b-1', 'one', [{ tag: Tag.RESEND, value: 1 }]));
  assert.equal((await gateway.next(socket)).sequence, 8, 'the duplicate is ACKed too');
  gateway.send(socket, delivery(9, 'bob', 'b-other', 'one again', [{ tag: Tag.STREAM_OFFSET, value: 5 }]));
  assert.equal((await gateway.next(socket)).sequence, 9, 'a repeated offset is ACKed too');
  gateway.send(socket, delivery(10, 'carol', 'b-1', 'same id, other sender', [{ tag: Tag.STREAM_OFFSET, value: 6 }]));
  assert.equal((await gateway.next(socket)).sequence, 10);
  const messages = events.filter((e) => e.name === 'message');
  assert.equal(messages.length, 2);
  assert.deepEqual(
    { id: messages[0].id, from: messages[0].from, to: messages[0].to, group: messages[0].group, text: messages[0].text, ts: messages[0].ts, offset: messages[0].offset, isArchived: messages[0].isArchived, isDeleted: messages[0].isDeleted },
    { id: 'b-1', from: 'bob', to: 'alice', group: null, text: 'one', ts: 1735689600123, offset: 5, isArchived: false, isDeleted: false });
  assert.equal(messages[1].from, 'carol');
  await client.close();
});

test('an unanswered chat is written again after the ACK timeout with the same id and RESEND', async () => {
  const { clock, gateway, client, socket } = await connected();
  const sent = client.send('bob', 'are you there?', { id: 'm-0002' });
  const first = await gateway.next(socket);
  assert.equal(first.items.RESEND, undefined);
  await clock.advance(9_999);
  assert.deepEqual(gateway.pending(socket).filter((f) => f.op === 'CHAT'), [], 'nothing before the timeout');
  await clock.advance(1);
  const again = (await gateway.next(socket));
  assert.equal(again.op, 'CHAT');
  assert.equal(again.items.MESSAGE_ID, 'm-0002');
  assert.equal(again.items.RESEND, 1);
  assert.notEqual(again.sequence, first.sequence);
  gateway.ack(socket, first.sequence, [{ tag: Tag.MESSAGE_ID, value: 'm-0002' }]);
  await flush();
  gateway.ack(socket, again.sequence, [{ tag: Tag.MESSAGE_ID, value: 'm-0002' }, { tag: Tag.SERVER_TIME, value: 5 }]);
  assert.deepEqual(await sent, { id: 'm-0002', offset: null, ts: 5 });
  await client.close();
});

test('reconnect after a drop: backoff levels, watches restored, unacknowledged chat resent with RESEND', async () => {
  const { clock, gateway, client, socket, events } = await connected();
  const watched = client.watchPresence(['bob', 'carol']);
  const watch = await gateway.next(socket);
  assert.equal(watch.op, 'PRESENCE_WATCH');
  assert.deepEqual(watch.items.CONTAINER, ['bob', 'carol']);
  gateway.ack(socket, watch.sequence);
  await watched;
  const unwatched = client.unwatchPresence(['carol']);
  const unwatch = await gateway.next(socket);
  assert.equal(unwatch.op, 'PRESENCE_UNWATCH');
  assert.deepEqual(unwatch.items.CONTAINER, ['carol']);
  gateway.ack(socket, unwatch.sequence);
  await unwatched;
  gateway.send(socket, { type: FrameType.CONTROL, sequence: 20, items: [
    { tag: Tag.OP, value: Op.PRESENCE }, { tag: Tag.USER_ID, value: 'bob' }, { tag: Tag.DEVICE_ID, value: 'phone' }, { tag: Tag.USER_STATUS, value: 1 }] });
  await flush();
  assert.deepEqual(events.filter((e) => e.name === 'presence').map(({ user, device, status }) => ({ user, device, status })), [{ user: 'bob', device: 'phone', status: 'online' }]);

  const sent = client.send('bob', 'in flight', { id: 'm-9' });
  const chat = await gateway.next(socket);
  gateway.drop(socket);
  await flush();
  const reconnecting = events.filter((e) => e.name === 'state' && e.state === 'reconnecting');
  assert.equal(reconnecting.length, 1);
  assert.equal(reconnecting[0].attempt, 0);
  assert.ok(reconnecting[0].delayMs > 0 && reconnecting[0].delayMs <= 1000);
  assert.equal(client.state, 'reconnecting');
  await clock.advance(reconnecting[0].delayMs - 1);
  assert.equal(gateway.sockets.length, 1, 'not before the delay');
  await clock.advance(1);
  const second = await gateway.socket(1);
  // This attempt fails: the next waits in (1, 2] s.
  gateway.drop(second, 1006);
  await flush();
  const retry = events.filter((e) => e.name === 'state' && e.state === 'reconnecting')[1];
  assert.equal(retry.attempt, 1);
  assert.ok(retry.delayMs > 1000 && retry.delayMs <= 2000);
  await clock.advance(retry.delayMs);
  const third = await gateway.socket(2);
  await gateway.handshake(third);
  const after = [await gateway.next(third), await gateway.next(third)];
  const resent = after.find((f) => f.op === 'CHAT');
  const restored = after.find((f) => f.op === 'PRESENCE_WATCH');
  assert.equal(resent.items.MESSAGE_ID, 'm-9');
  assert.equal(resent.items.RESEND, 1);
  assert.notEqual(resent.sequence, undefined);
  assert.deepEqual(restored.items.CONTAINER, ['bob'], 'the watch, without the unwatched user');
  gateway.ack(third, resent.sequence, [{ tag: Tag.MESSAGE_ID, value: 'm-9' }]);
  assert.equal((await sent).id, 'm-9');
  assert.equal(chat.items.MESSAGE_ID, 'm-9');
  // A login resets the levels: the next drop waits in (0, 1] s again.
  gateway.drop(third);
  await flush();
  const reset = events.filter((e) => e.name === 'state' && e.state === 'reconnecting')[2];
  assert.equal(reset.attempt, 0);
  await client.close();
});

test('frames spanning messages and several frames in one message reach the client', async () => {
  const { gateway, client, events } = setup();
  const login = client.connect();
  const socket = await gateway.socket(0);
  gateway.open(socket);
  await gateway.next(socket);
  const loginFrame = await gateway.next(socket);
  const ok = encodeFrame({ type: FrameType.CONTROL, sequence: 2, timestamp: 0, session: 1, items: [
    { tag: Tag.OP, value: Op.LOGIN_OK }, { tag: Tag.USER_ID, value: 'alice' }, { tag: Tag.REF_SEQUENCE, value: loginFrame.sequence }] });
  gateway.sendBytes(socket, ok.subarray(0, 5));
  gateway.sendBytes(socket, ok.subarray(5, 30));
  gateway.sendBytes(socket, ok.subarray(30));
  await login;
  const a = encodeFrame({ type: 0, sequence: 3, timestamp: 0, session: 1, items: delivery(3, 'bob', 'x-1', 'first').items });
  const b = encodeFrame({ type: 0, sequence: 4, timestamp: 0, session: 1, items: delivery(4, 'bob', 'x-2', 'second').items });
  const both = new Uint8Array(a.length + b.length + 10);
  both.set(a);
  both.set(b, a.length);
  const c = encodeFrame({ type: 0, sequence: 5, timestamp: 0, session: 1, items: delivery(5, 'bob', 'x-3', 'third').items });
  both.set(c.subarray(0, 10), a.length + b.length);
  gateway.sendBytes(socket, both);
  gateway.sendBytes(socket, c.subarray(10));
  const acks = [await gateway.next(socket), await gateway.next(socket), await gateway.next(socket)];
  assert.deepEqual(acks.map((f) => f.sequence), [3, 4, 5]);
  assert.deepEqual(events.filter((e) => e.name === 'message').map((e) => e.text), ['first', 'second', 'third']);
  await client.close();
});

test('receipts, typing, carbons, read markers, deletions and errors become events', async () => {
  const { gateway, client, socket, events } = await connected();
  gateway.send(socket, { type: FrameType.READ_RECEIPT, sequence: 30, items: [
    { tag: Tag.FROM, value: 'bob' }, { tag: Tag.MESSAGE_ID, value: 'm-1' }, { tag: Tag.RECEIPT_KIND, value: 2 }, { tag: Tag.SERVER_TIME, value: 9 }] });
  assert.equal((await gateway.next(socket)).sequence, 30, 'a receipt notice is ACKed');
  gateway.send(socket, { type: FrameType.CONTROL, sequence: 31, items: [{ tag: Tag.OP, value: Op.TYPING }, { tag: Tag.FROM, value: 'bob' }, { tag: Tag.TYPING, value: 1 }] });
  gateway.send(socket, { type: FrameType.CONTROL, sequence: 32, items: [{ tag: Tag.OP, value: Op.TYPING }, { tag: Tag.FROM, value: 'carol' }, { tag: Tag.GROUP, value: 'team' }, { tag: Tag.TYPING, value: 0 }] });
  gateway.send(socket, { type: FrameType.DATA, sequence: 33, items: [
    { tag: Tag.OP, value: Op.DELIVERY }, { tag: Tag.FROM, value: 'alice' }, { tag: Tag.TO, value: 'bob' }, { tag: Tag.CARBON, value: 1 },
    { tag: Tag.MESSAGE_ID, value: 'own-1' }, { tag: Tag.SERVER_TIME, value: 1 }, { tag: Tag.TEXT, value: 'from my phone' }] });
  assert.equal((await gateway.next(socket)).sequence, 33);
  gateway.send(socket, delivery(34, 'carol', 'g-1', 'group hello', [{ tag: Tag.GROUP, value: 'team' }]));
  assert.equal((await gateway.next(socket)).sequence, 34);
  gateway.send(socket, { type: FrameType.CONTROL, sequence: 35, items: [{ tag: Tag.OP, value: Op.READ_MARKER }, { tag: Tag.GROUP, value: 'team' }, { tag: Tag.READ_THROUGH, value: 43 }, { tag: Tag.UNREAD, value: 0 }] });
  gateway.send(socket, { type: FrameType.DATA, sequence: 36, items: [
    { tag: Tag.FROM, value: 'bob' }, { tag: Tag.MESSAGE_ID, value: 'b-1' }, { tag: Tag.SERVER_TIME, value: 2 }, { tag: Tag.STREAM_OFFSET, value: 44 }, { tag: Tag.DELETED, value: 1 }] });
  assert.equal((await gateway.next(socket)).sequence, 36, 'a tombstone is ACKed');
  gateway.send(socket, { type: FrameType.CONTROL, sequence: 37, items: [{ tag: Tag.OP, value: Op.ERROR }, { tag: Tag.ERROR_CODE, value: 500 }, { tag: Tag.ERROR_MESSAGE, value: 'oops' }] });
  await flush();
  const pick = (name) => events.filter((e) => e.name === name);
  assert.deepEqual(pick('receipt').map(({ id, from, status }) => ({ id, from, status })), [{ id: 'm-1', from: 'bob', status: 'read' }]);
  assert.deepEqual(pick('typing').map(({ from, to, group, state }) => ({ from, to, group, state })),
    [{ from: 'bob', to: 'alice', group: null, state: 'typing' }, { from: 'carol', to: null, group: 'team', state: 'paused' }]);
  const [carbon, groupMessage] = pick('message');
  assert.deepEqual([carbon.from, carbon.to, carbon.isCarbon, carbon.text], ['alice', 'bob', true, 'from my phone']);
  assert.deepEqual([groupMessage.group, groupMessage.to, groupMessage.text], ['team', null, 'group hello']);
  assert.deepEqual(pick('readMarker').map(({ conversation, through }) => ({ conversation, through })), [{ conversation: { group: 'team' }, through: 43 }]);
  assert.deepEqual(pick('deleted').map(({ id, from }) => ({ id, from })), [{ id: 'b-1', from: 'bob' }]);
  assert.deepEqual(pick('error').map(({ code, message }) => ({ code, message })), [{ code: 500, message: 'oops' }]);
  await client.close();
});

test('requests: typing, receipt, history, conversations, markRead, deleteMessage', async () => {
  const { gateway, client, socket } = await connected();
  const typing = client.typing('bob', 'typing');
  const typingFrame = await gateway.next(socket);
  assert.deepEqual([typingFrame.op, typingFrame.items.TO, typingFrame.items.TYPING], ['TYPING', 'bob', 1]);
  gateway.ack(socket, typingFrame.sequence);
  assert.equal(await typing, true);
  const groupTyping = client.typingInGroup('team', 'recording');
  const groupTypingFrame = await gateway.next(socket);
  assert.deepEqual([groupTypingFrame.items.GROUP, groupTypingFrame.items.TYPING], ['team', 2]);
  gateway.ack(socket, groupTypingFrame.sequence, [{ tag: Tag.ERROR_CODE, value: ErrorCode.RATE_LIMITED }, { tag: Tag.RETRY_AFTER, value: 250 }]);
  assert.equal(await groupTyping, false, 'typing never rejects');

  const receipt = client.receipt({ id: 'b-1', from: 'bob' }, 'read');
  const receiptFrame = await gateway.next(socket);
  assert.deepEqual([receiptFrame.frameType, receiptFrame.op, receiptFrame.items.TO, receiptFrame.items.MESSAGE_ID], [FrameType.READ_RECEIPT, 'RECEIPT', 'bob', 'b-1']);
  gateway.ack(socket, receiptFrame.sequence);
  await receipt;

  const history = client.history({ with: 'bob' }, { before: 50, limit: 20 });
  const historyFrame = await gateway.next(socket);
  assert.deepEqual([historyFrame.op, historyFrame.items.TO, historyFrame.items.BEFORE, historyFrame.items.LIMIT], ['HISTORY', 'bob', 50, 20]);
  const record = (items) => ({ tag: Tag.CONTAINER, value: items });
  gateway.send(socket, { type: FrameType.CONTROL, sequence: 40, items: [
    { tag: Tag.OP, value: Op.HISTORY_PAGE }, { tag: Tag.REF_SEQUENCE, value: historyFrame.sequence }, { tag: Tag.STREAM_EPOCH, value: 7 },
    { tag: Tag.TO, value: 'bob' }, { tag: Tag.COMPLETE, value: 1 },
    { tag: Tag.CONTAINER, value: [
      record([{ tag: Tag.FROM, value: 'bob' }, { tag: Tag.MESSAGE_ID, value: 'h-1' }, { tag: Tag.SERVER_TIME, value: 1 }, { tag: Tag.STREAM_OFFSET, value: 41 }, { tag: Tag.TEXT, value: 'old' }]),
      record([{ tag: Tag.OP, value: Op.DELIVERY }, { tag: Tag.FROM, value: 'alice' }, { tag: Tag.TO, value: 'bob' }, { tag: Tag.CARBON, value: 1 }, { tag: Tag.MESSAGE_ID, value: 'h-2' }, { tag: Tag.SERVER_TIME, value: 2 }, { tag: Tag.STREAM_OFFSET, value: 42 }, { tag: Tag.TEXT, value: 'mine' }]),
    ] }] });
  const page = await history;
  assert.equal(page.complete, true);
  assert.deepEqual(page.items.map(({ id, from, to, text, offset, isArchived }) => ({ id, from, to, text, offset, isArchived })), [
    { id: 'h-1', from: 'bob', to: 'alice', text: 'old', offset: 41, isArchived: true },
    { id: 'h-2', from: 'alice', to: 'bob', text: 'mine', offset: 42, isArchived: true }]);

  const list = client.conversations({ limit: 10 });
  const listFrame = await gateway.next(socket);
  assert.deepEqual([listFrame.op, listFrame.items.LIMIT], ['CONVERSATIONS', 10]);
  gateway.send(socket, { type: FrameType.CONTROL, sequence: 41, items: [
    { tag: Tag.OP, value: Op.CONVERSATION_LIST }, { tag: Tag.REF_SEQUENCE, value: listFrame.sequence }, { tag: Tag.COMPLETE, value: 1 },
    { tag: Tag.CONTAINER, value: [record([{ tag: Tag.GROUP, value: 'team' }, { tag: Tag.STREAM_OFFSET, value: 43 }, { tag: Tag.SERVER_TIME, value: 3 }, { tag: Tag.READ_THROUGH, value: 0 }, { tag: Tag.UNREAD, value: 1 },
      record([{ tag: Tag.FROM, value: 'carol' }, { tag: Tag.GROUP, value: 'team' }, { tag: Tag.MESSAGE_ID, value: 'c-1' }, { tag: Tag.SERVER_TIME, value: 3 }, { tag: Tag.TEXT, value: 'Lunch?' }])])] }] });
  const conversations = await list;
  assert.equal(conversations.complete, true);
  assert.deepEqual(conversations.items[0].conversation, { group: 'team' });
  assert.equal(conversations.items[0].key, 'group:team');
  assert.equal(conversations.items[0].unread, 1);
  assert.equal(conversations.items[0].last.text, 'Lunch?');

  const marked = client.markRead({ group: 'team' }, 43);
  const markFrame = await gateway.next(socket);
  assert.deepEqual([markFrame.op, markFrame.items.GROUP, markFrame.items.READ_THROUGH], ['READ_MARKER', 'team', 43]);
  gateway.ack(socket, markFrame.sequence, [{ tag: Tag.READ_THROUGH, value: 43 }, { tag: Tag.UNREAD, value: 0 }]);
  assert.deepEqual(await marked, { through: 43, unread: 0 });

  const deleted = client.deleteMessage('m-1');
  const deleteFrame = await gateway.next(socket);
  assert.deepEqual([deleteFrame.op, deleteFrame.items.MESSAGE_ID], ['DELETE', 'm-1']);
  gateway.ack(socket, deleteFrame.sequence, [{ tag: Tag.MESSAGE_ID, value: 'm-1' }, { tag: Tag.SERVER_TIME, value: 77 }]);
  assert.deepEqual(await deleted, { id: 'm-1', deletedAt: 77 });
  await client.close();
});

test('KICK SESSION_TAKEN_OVER ends the client; KICK SERVER_SHUTTING_DOWN reconnects', async () => {
  {
    const { clock, gateway, client, socket, events } = await connected();
    gateway.send(socket, { type: FrameType.CONTROL, sequence: 50, items: [{ tag: Tag.OP, value: Op.KICK }, { tag: Tag.ERROR_CODE, value: 207 }, { tag: Tag.ERROR_MESSAGE, value: 'elsewhere' }] });
    await flush();
    assert.deepEqual(events.filter((e) => e.name === 'kicked').map(({ reason, code }) => ({ reason, code })), [{ reason: 'SESSION_TAKEN_OVER', code: 207 }]);
    assert.equal(client.state, 'disconnected');
    assert.deepEqual(socket.closeCodes, [1000]);
    await clock.advance(100_000);
    assert.equal(gateway.sockets.length, 1);
    await assert.rejects(client.send('bob', 'x'), (e) => e.code === 'DISCONNECTED');
  }
  {
    const { clock, gateway, client, socket } = await connected();
    gateway.send(socket, { type: FrameType.CONTROL, sequence: 50, items: [{ tag: Tag.OP, value: Op.KICK }, { tag: Tag.ERROR_CODE, value: 501 }] });
    await flush();
    assert.equal(client.state, 'reconnecting');
    await clock.advance(1000);
    await gateway.handshake(await gateway.socket(1));
    await flush();
    assert.equal(client.state, 'connected');
    await client.close();
  }
});

test('heartbeat: answers the gateway\'s, sends its own when quiet, reconnects when three go unanswered', async () => {
  const { clock, gateway, client, socket } = await connected({}, { interval: 30 });
  gateway.autoHeartbeat = false;
  gateway.send(socket, { type: FrameType.HEARTBEAT, sequence: 77 });
  const ack = await gateway.next(socket);
  assert.deepEqual([ack.frameType, ack.sequence], [FrameType.ACK, 77]);
  await clock.advance(15_000); // half of the announced 30 s, the adaptive start
  const beat = await gateway.next(socket);
  assert.equal(beat.op, 'HEARTBEAT');
  gateway.ack(socket, beat.sequence);
  await clock.advance(60_000);
  const beats = gateway.pending(socket).filter((f) => f.op === 'HEARTBEAT');
  assert.ok(beats.length >= 3, `${beats.length} unanswered heartbeats`);
  assert.equal(client.state, 'reconnecting');
  await client.close();
});

test('a compressed frame from the gateway is refused cleanly: ERROR 107, then a reconnect', async () => {
  const { clock, gateway, client, socket, events } = await connected();
  const body = new Uint8Array(20);
  const bytes = encodeFrame({ type: FrameType.DATA, sequence: 4, timestamp: 0, session: 1, compress: 1, body });
  gateway.sendBytes(socket, bytes);
  const error = await gateway.next(socket);
  assert.deepEqual([error.op, error.items.ERROR_CODE], ['ERROR', ErrorCode.UNSUPPORTED_COMPRESSION]);
  await flush();
  assert.equal(client.state, 'reconnecting');
  assert.equal(events.filter((e) => e.name === 'state' && e.state === 'reconnecting')[0].cause.code, 'PROTOCOL_VIOLATION');
  await clock.advance(1000);
  assert.equal(gateway.sockets.length, 2);
  await client.close();
});

test('RATE_LIMITED chat waits RETRY_AFTER, then goes again in order with RESEND', async () => {
  const { clock, gateway, client, socket } = await connected();
  const a = client.send('bob', 'a', { id: 'a' });
  const b = client.send('bob', 'b', { id: 'b' });
  const [fa, fb] = [await gateway.next(socket), await gateway.next(socket)];
  gateway.ack(socket, fa.sequence, [{ tag: Tag.ERROR_CODE, value: ErrorCode.RATE_LIMITED }, { tag: Tag.RETRY_AFTER, value: 500 }]);
  gateway.ack(socket, fb.sequence, [{ tag: Tag.ERROR_CODE, value: ErrorCode.RATE_LIMITED }, { tag: Tag.RETRY_AFTER, value: 500 }]);
  await clock.advance(499);
  assert.deepEqual(gateway.pending(socket).filter((f) => f.op === 'CHAT'), []);
  await clock.advance(1);
  const again = [await gateway.next(socket), await gateway.next(socket)];
  assert.deepEqual(again.map((f) => [f.items.MESSAGE_ID, f.items.RESEND]), [['a', 1], ['b', 1]]);
  again.forEach((f) => gateway.ack(socket, f.sequence, [{ tag: Tag.MESSAGE_ID, value: f.items.MESSAGE_ID }]));
  assert.deepEqual([(await a).id, (await b).id], ['a', 'b']);
  await client.close();
});

test('the sync position: sent in LOGIN, SYNC after LOGIN_OK, moved by deliveries and own chats', async () => {
  const { gateway, client, socket, events, loginFrame } = await connected({ syncPosition: { epoch: 7, offset: 40 } }, {
    loginOK: [{ tag: Tag.SESSION_RESUMED, value: 1 }, { tag: Tag.STREAM_EPOCH, value: 7 }, { tag: Tag.STREAM_OFFSET, value: 40 }, { tag: Tag.SYNC_STATUS, value: 0 }],
  });
  assert.deepEqual([loginFrame.items.STREAM_EPOCH, loginFrame.items.STREAM_OFFSET], [7, 40]);
  const sync = await gateway.next(socket);
  assert.deepEqual([sync.op, sync.items.STREAM_EPOCH, sync.items.STREAM_OFFSET], ['SYNC', 7, 40]);
  gateway.send(socket, delivery(60, 'bob', 'z-1', 'missed', [{ tag: Tag.STREAM_OFFSET, value: 41 }, { tag: Tag.ARCHIVED, value: 1 }]));
  await gateway.next(socket);
  gateway.ack(socket, sync.sequence, [{ tag: Tag.SYNC_STATUS, value: 0 }, { tag: Tag.STREAM_OFFSET, value: 41 }, { tag: Tag.STREAM_EPOCH, value: 7 }]);
  await flush();
  assert.deepEqual(events.filter((e) => e.name === 'synced').map(({ epoch, offset, replayed }) => ({ epoch, offset, replayed })), [{ epoch: 7, offset: 41, replayed: 1 }]);
  assert.equal(events.find((e) => e.name === 'message').isArchived, true);
  const sent = client.send('bob', 'mine', { id: 'own' });
  const chat = await gateway.next(socket);
  gateway.ack(socket, chat.sequence, [{ tag: Tag.MESSAGE_ID, value: 'own' }, { tag: Tag.STREAM_OFFSET, value: 42 }]);
  await sent;
  assert.deepEqual(client.syncPosition, { epoch: 7, offset: 42 });
  await client.close();
});

test('token refresh: a fresh token from tokenProvider before the expiry; used for the next LOGIN', async () => {
  let n = 1;
  const tokenProvider = async () => `token-${++n}`;
  const { clock, gateway, client, socket } = await connected({ tokenProvider }, {
    loginOK: [{ tag: Tag.TOKEN_EXPIRY, value: 1735689600123 + 120_000 }],
  });
  await clock.advance(59_999);
  assert.deepEqual(gateway.pending(socket).filter((f) => f.op === 'TOKEN_REFRESH'), []);
  await clock.advance(1);
  const refresh = await gateway.next(socket);
  assert.deepEqual([refresh.op, refresh.items.AUTH_TOKEN], ['TOKEN_REFRESH', 'token-2']);
  gateway.ack(socket, refresh.sequence, [{ tag: Tag.TOKEN_EXPIRY, value: 1735689600123 + 3_600_000 }]);
  await flush();
  assert.equal(client.currentToken, 'token-2');
  gateway.drop(socket);
  await clock.advance(1000);
  const next = await gateway.socket(1);
  const login = await gateway.handshake(next);
  assert.equal(login.items.AUTH_TOKEN, 'token-2');
  await client.close();
});

test('logout sends LOGOUT and ends the client; text messages are a protocol violation', async () => {
  {
    const { gateway, client, socket } = await connected();
    const done = client.logout();
    const logout = await gateway.next(socket);
    assert.equal(logout.op, 'LOGOUT');
    gateway.ack(socket, logout.sequence);
    await done;
    assert.equal(client.state, 'disconnected');
  }
  {
    const { gateway, client, socket } = await connected();
    socket.onmessage({ data: 'hello' });
    const error = await gateway.next(socket);
    assert.deepEqual([error.op, error.items.ERROR_CODE], ['ERROR', ErrorCode.MALFORMED_FRAME]);
    await flush();
    assert.equal(client.state, 'reconnecting');
    await client.close();
  }
});

test('no WebSocket in node without the option: connect() rejects cleanly', async () => {
  const client = new IMClient({ url: 'ws://127.0.0.1:1/im', token: 't', WebSocket: undefined, clock: new FakeClock() });
  if (globalThis.WebSocket) return; // a runtime with a global WebSocket would try to connect
  await assert.rejects(client.connect(), (e) => e instanceof IMClientError && e.code === 'CANNOT_CONNECT');
});
