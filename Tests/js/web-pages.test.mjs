// The pure helpers of the web chat page and the operator console (node --test Tests/js/).
// The pages themselves start only in a browser (they look for their DOM first), so importing
// them here runs no page code.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import {
  conversationKey, parseConversationKey, conversationSelector, conversationKeyOfMessage,
  keyOfConversationDescriptor, normalizeConversation, itemsOf, orderConversations, mergeConversation,
  compareMessages, mergeMessages, insertionIndex, newestOffset, compareOffsets, typingText, statusWord,
  presenceOf, webSocketURL, TypingNotifier, errorText, formatTime, countsAsUnread,
  displayText, syncStorageKey,
} from '../../Sources/IMWeb/Resources/chat.js';
import {
  pushPoint, connectionsTotal, ratePerSecond, sampleFromStats, niceStep, yAxis, formatTick,
  formatValue, linePath, plottedValues, formatDuration, apiErrorText, newMessageID, drawLinePlot, MAX_POINTS, timeTicks,
} from '../../Sources/IMWeb/Resources/console.js';

// ---- chat: conversations ----

test('conversation keys round-trip and give the history selector', () => {
  assert.equal(conversationKey('user', 'bob'), 'user:bob');
  assert.equal(conversationKey('group', 'team'), 'group:team');
  assert.deepEqual(parseConversationKey('user:bob'), { kind: 'user', name: 'bob' });
  assert.deepEqual(parseConversationKey('group:a:b'), { kind: 'group', name: 'a:b' });
  assert.deepEqual(conversationSelector('user:bob'), { with: 'bob' });
  assert.deepEqual(conversationSelector('group:team'), { group: 'team' });
});

test('a message belongs to its group, or to the other user', () => {
  assert.equal(conversationKeyOfMessage({ from: 'bob', to: 'alice', group: null }, 'alice'), 'user:bob');
  assert.equal(conversationKeyOfMessage({ from: 'alice', to: 'bob', group: null }, 'alice'), 'user:bob'); // a carbon
  assert.equal(conversationKeyOfMessage({ from: 'bob', to: 'alice', group: 'team' }, 'alice'), 'group:team');
  assert.equal(conversationKeyOfMessage({ from: 'system', to: 'alice' }, 'alice'), 'user:system');
});

test('conversation descriptors in the shapes a client library may use', () => {
  assert.equal(keyOfConversationDescriptor({ with: 'bob' }), 'user:bob');
  assert.equal(keyOfConversationDescriptor({ to: 'bob' }), 'user:bob');
  assert.equal(keyOfConversationDescriptor({ group: 'team' }), 'group:team');
  assert.equal(keyOfConversationDescriptor({ conversation: { group: 'team' }, unread: 2 }), 'group:team');
  assert.equal(keyOfConversationDescriptor({ conversation: { with: 'bob' } }), 'user:bob');
  assert.equal(keyOfConversationDescriptor('group:team'), 'group:team');
  assert.equal(keyOfConversationDescriptor('bob'), 'user:bob');
  assert.equal(keyOfConversationDescriptor({}), null);
  assert.equal(keyOfConversationDescriptor(null), null);
});

test('conversation list items are normalized, bigint offsets included', () => {
  const line = normalizeConversation({
    conversation: { with: 'bob' }, lastOffset: 12n, lastTime: 1795311234567n, readThrough: 10n, unread: 2,
    last: { id: 'm1', from: 'bob', to: 'alice', text: 'hi', ts: 1795311234567 },
  });
  assert.deepEqual(line, {
    key: 'user:bob', kind: 'user', name: 'bob', lastTs: 1795311234567, lastText: 'hi', lastFrom: 'bob',
    lastOffset: 12n, unread: 2,
  });
  const g = normalizeConversation({ group: 'team', ts: 5, unread: 0 });
  assert.equal(g.key, 'group:team');
  assert.equal(g.lastTs, 5);
  assert.equal(g.lastText, '');
  const d = normalizeConversation({ with: 'carol', last: { text: 'x', isDeleted: true, ts: 3 } });
  assert.equal(d.lastText, 'message deleted');
  assert.equal(d.lastTs, 3);
  assert.equal(normalizeConversation({ unread: 1 }), null);
});

test('itemsOf accepts arrays and pages', () => {
  assert.deepEqual(itemsOf([1]), [1]);
  assert.deepEqual(itemsOf({ items: [2], complete: true }), [2]);
  assert.deepEqual(itemsOf({ conversations: [3] }), [3]);
  assert.deepEqual(itemsOf({ lines: [4] }), [4]);
  assert.deepEqual(itemsOf({ messages: [5] }), [5]);
  assert.deepEqual(itemsOf(null), []);
});

test('conversations are ordered the most recent first, ties by key', () => {
  const list = [
    { key: 'user:bob', lastTs: 10 }, { key: 'group:team', lastTs: 30 },
    { key: 'user:carol', lastTs: 10 }, { key: 'user:dave', lastTs: 0 },
  ];
  assert.deepEqual(orderConversations(list).map((c) => c.key), ['group:team', 'user:bob', 'user:carol', 'user:dave']);
  assert.equal(list[0].key, 'user:bob', 'the input is not reordered');
});

test('merging the server list keeps the newer last message and takes its unread count', () => {
  const known = { key: 'user:bob', kind: 'user', name: 'bob', lastTs: 50, lastText: 'newer', lastFrom: 'bob', lastOffset: 9, unread: 1 };
  const server = { ...known, lastTs: 40, lastText: 'older', lastOffset: 8, unread: 3 };
  const merged = mergeConversation(known, server);
  assert.equal(merged.lastText, 'newer');
  assert.equal(merged.lastTs, 50);
  assert.equal(merged.unread, 3);
  assert.equal(mergeConversation(known, { ...server, lastTs: 60 }).lastText, 'older');
  assert.equal(mergeConversation(known, server, { open: true }).unread, 0);
  assert.equal(mergeConversation(undefined, server, { open: true }).unread, 0);
  assert.equal(mergeConversation(undefined, server).unread, 3);
});

test('a message counts as unread once, not when the list already counted it', () => {
  const line = { key: 'user:bob', lastOffset: 10n, unread: 2 };
  assert.equal(countsAsUnread(line, { from: 'bob', offset: 11n }, 'alice'), true);
  assert.equal(countsAsUnread(line, { from: 'bob', offset: 10 }, 'alice'), false, 'counted by the list');
  assert.equal(countsAsUnread(line, { from: 'bob', offset: null }, 'alice'), true, 'no archive: no offsets');
  assert.equal(countsAsUnread(undefined, { from: 'bob', offset: 3 }, 'alice'), true);
  assert.equal(countsAsUnread(line, { from: 'alice', offset: 12 }, 'alice'), false, 'own messages');
  assert.equal(countsAsUnread(line, { from: 'bob', offset: 12, isDeleted: true }, 'alice'), false);
});

// ---- chat: messages ----

test('messages are ordered by time, then offset, then id; merged by id', () => {
  const a = { id: 'a', ts: 1, offset: 5n };
  const b = { id: 'b', ts: 2, offset: 1 };
  const c = { id: 'c', ts: 2, offset: '3' };
  const d = { id: 'd', ts: 2, offset: null };
  assert.deepEqual([c, d, b, a].sort(compareMessages).map((m) => m.id), ['a', 'b', 'c', 'd']);
  const merged = mergeMessages([a, { id: 'b', ts: 2, text: 'old' }], [{ id: 'b', ts: 2, text: 'new', offset: 1 }, c]);
  assert.deepEqual(merged.map((m) => m.id), ['a', 'b', 'c']);
  assert.equal(merged[1].text, 'new');
  assert.equal(insertionIndex(merged, { id: 'z', ts: 0 }), 0);
  assert.equal(insertionIndex(merged, { id: 'z', ts: 9 }), 3);
  assert.equal(insertionIndex(merged, { id: 'bb', ts: 2, offset: 2 }), 2);
});

test('offsets compare as u64 and the newest is found', () => {
  assert.equal(compareOffsets(2n ** 63n, 2n ** 63n - 1n), 1);
  assert.equal(compareOffsets('18446744073709551615', 1), 1);
  assert.equal(compareOffsets(3, 3n), 0);
  assert.equal(newestOffset([{ offset: 3 }, { offset: null }, { offset: 7n }, { offset: 5 }]), 7n);
  assert.equal(newestOffset([{ offset: null }]), null);
});

// ---- chat: typing, presence, status ----

test('the typing line names who is typing', () => {
  assert.equal(typingText(new Map()), '');
  assert.equal(typingText(new Map([['bob', 'typing']])), 'bob is typing');
  assert.equal(typingText(new Map([['bob', 'typing'], ['carol', 'typing']])), 'bob and carol are typing');
  assert.equal(typingText(new Map([['a', 'typing'], ['b', 'typing'], ['c', 'typing']])), 'a, b and c are typing');
  assert.equal(typingText(new Map([['a', 'typing'], ['b', 'typing'], ['c', 'typing'], ['d', 'typing']])), '4 people are typing');
  assert.equal(typingText(new Map([['bob', 'recording']])), 'bob is recording audio');
  assert.equal(typingText(new Map([['bob', 'paused']])), '');
});

test('typing notifications: one per 3 s while typing, paused after 5 s idle, none after sending', () => {
  let now = 0;
  const timers = new Map();
  let nextTimer = 1;
  const sent = [];
  const n = new TypingNotifier({
    send: (s) => sent.push(`${now}:${s}`), now: () => now,
    setTimer: (f, ms) => { const id = nextTimer++; timers.set(id, { f, at: now + ms }); return id; },
    clearTimer: (id) => timers.delete(id),
  });
  const advance = (to) => {
    for (;;) {
      const due = [...timers.entries()].filter(([, t]) => t.at <= to).sort((x, y) => x[1].at - y[1].at)[0];
      if (!due) break;
      timers.delete(due[0]);
      now = due[1].at;
      due[1].f();
    }
    now = to;
  };
  for (let t = 0; t <= 7000; t += 500) { advance(t); n.input(); } // typing steadily for 7 s
  advance(20000); // then idle
  assert.deepEqual(sent, ['0:typing', '3000:typing', '6000:typing', '12000:paused']);
  sent.length = 0;
  advance(21000); n.input();
  advance(22000); n.sent(); // the message went out
  advance(40000);
  assert.deepEqual(sent, ['21000:typing']);
  assert.equal(timers.size, 0);
  n.pause(); // nothing active: nothing sent
  assert.deepEqual(sent, ['21000:typing']);
});

test('presence: online when any device is', () => {
  assert.equal(presenceOf(undefined), null);
  assert.equal(presenceOf(new Map()), null);
  assert.equal(presenceOf(new Map([['web', 'offline']])), 'offline');
  assert.equal(presenceOf(new Map([['web', 'offline'], ['phone', 'online']])), 'online');
});

test('status words and the WebSocket URL', () => {
  assert.equal(statusWord('connected'), 'online');
  assert.equal(statusWord('connecting'), 'connecting');
  assert.equal(statusWord('reconnecting'), 'reconnecting');
  assert.equal(statusWord('disconnected'), 'offline');
  assert.equal(statusWord(undefined), 'offline');
  assert.equal(webSocketURL({ protocol: 'http:', host: '127.0.0.1:6980' }), 'ws://127.0.0.1:6980/im');
  assert.equal(webSocketURL({ protocol: 'https:', host: 'chat.example.com' }, 'ws'), 'wss://chat.example.com/ws');
});

test('error texts and times', () => {
  assert.equal(errorText({ code: 'AUTH_FAILED', message: 'bad token' }), 'AUTH_FAILED: bad token');
  assert.equal(errorText({ code: 'X', message: 'X happened' }), 'X happened');
  assert.equal(errorText(new Error('boom')), 'boom');
  assert.equal(errorText('plain'), 'plain');
  assert.equal(errorText({ code: 201, codeName: 'AUTH_FAILED', message: 'token expired' }), 'AUTH_FAILED: token expired');
  assert.equal(errorText({ code: 308, name: 'RATE_LIMITED', message: null }), 'RATE_LIMITED');
  assert.equal(errorText(new TypeError('bad')), 'TypeError: bad');
  assert.equal(displayText({ text: 'hi' }), 'hi');
  assert.equal(displayText({ text: 'hi', isDeleted: true }), 'message deleted');
  assert.equal(displayText({ text: null, content: { kind: 'image', value: 'x' } }), '[image]');
  assert.equal(displayText({}), '');
  assert.equal(syncStorageKey('a.b', 'web'), 'imgw.chat.sync.a.b.web');
  const now = new Date(2026, 2, 3, 14, 5).getTime();
  assert.equal(formatTime(new Date(2026, 2, 3, 9, 7).getTime(), now), '09:07');
  assert.equal(formatTime(new Date(2026, 2, 1, 9, 7).getTime(), now), '1 Mar 09:07');
  assert.equal(formatTime(null, now), '');
});

// ---- console: rates and samples ----

test('rates per second from successive totals', () => {
  assert.equal(ratePerSecond(null, { ts: 1000, logins_total: 5 }, 'logins_total'), null);
  assert.equal(ratePerSecond({ ts: 1000, logins_total: 5 }, { ts: 3000, logins_total: 9 }, 'logins_total'), 2);
  assert.equal(ratePerSecond({ ts: 1000, chats_in_total: 100 }, { ts: 1500, chats_in_total: 150 }, 'chats_in_total'), 100);
  assert.equal(ratePerSecond({ ts: 1000, logins_total: 5 }, { ts: 1000, logins_total: 9 }, 'logins_total'), null, 'no time passed');
  assert.equal(ratePerSecond({ ts: 1000, logins_total: 9 }, { ts: 2000, logins_total: 1 }, 'logins_total'), null, 'a restarted gateway');
  assert.equal(ratePerSecond({ ts: 1000, gateway: 'gw-1', logins_total: 1 }, { ts: 2000, gateway: 'gw-2', logins_total: 5 }, 'logins_total'), null);
  assert.equal(ratePerSecond({ ts: 1000 }, { ts: 2000 }, 'logins_total'), null);
});

test('a sample from /v1/stats', () => {
  const stats = (ts, logins, chats, p99) => ({
    gateway: 'gw-1', ts, uptime_s: 12, connections: { tcp: 3, websocket: 2 }, logged_in: 4,
    logins_total: logins, chats_in_total: chats, messages_out_total: 0, chat_p99_ms: p99,
    broker: { connected: true, url: 'mqtt://127.0.0.1:1883' }, archive: { available: true, queued: 0 },
  });
  const first = sampleFromStats(stats(10_000, 10, 100, null), null);
  assert.equal(first.connections, 5);
  assert.equal(first.tcp, 3);
  assert.equal(first.websocket, 2);
  assert.equal(first.logins, null);
  assert.equal(first.chats, null);
  assert.equal(first.p99, null);
  const second = sampleFromStats(stats(11_000, 12, 130, 1.8), first.raw);
  assert.equal(second.logins, 2);
  assert.equal(second.chats, 30);
  assert.equal(second.p99, 1.8);
  const noTs = sampleFromStats({ connections: {}, logins_total: 1 }, null, 777);
  assert.equal(noTs.raw.ts, 777);
  assert.equal(noTs.connections, 0);
  assert.equal(connectionsTotal({ connections: { tcp: 1 } }), 1);
});

test('series keep the last 120 points', () => {
  const s = [];
  for (let i = 0; i < 130; i++) pushPoint(s, i);
  assert.equal(s.length, MAX_POINTS);
  assert.equal(s[0], 10);
  assert.equal(s.at(-1), 129);
  assert.deepEqual(pushPoint([1, 2, 3], 4, 2), [3, 4]);
});

// ---- console: plot scaling ----

test('nice steps and y axes', () => {
  assert.equal(niceStep(0.3), 0.5);
  assert.equal(niceStep(1), 1);
  assert.equal(niceStep(1.2), 2);
  assert.equal(niceStep(3), 5);
  assert.equal(niceStep(7), 10);
  assert.equal(niceStep(2500), 5000);
  assert.equal(niceStep(0), 1);
  assert.deepEqual(yAxis([]).ticks, [0, 0.5, 1]);
  assert.deepEqual(yAxis([0, 0, 0]), { min: 0, max: 1, step: 0.5, ticks: [0, 0.5, 1] });
  assert.deepEqual(yAxis([0, 1], 4, { integer: true }).ticks, [0, 1], 'no half connections');
  assert.deepEqual(yAxis([0, 3], 4, { integer: true }).ticks, [0, 1, 2, 3]);
  assert.deepEqual(yAxis([0, 1.2]).ticks, [0, 0.5, 1, 1.5]);
  const a = yAxis([3, 17, null, 9]);
  assert.equal(a.min, 0);
  assert.equal(a.max, 20);
  assert.deepEqual(a.ticks, [0, 5, 10, 15, 20]);
  const b = yAxis([0.1, 0.7]);
  assert.deepEqual(b.ticks, [0, 0.2, 0.4, 0.6, 0.8]);
  const c = yAxis([1234]);
  assert.ok(c.max >= 1234);
  assert.ok(c.ticks.length >= 2 && c.ticks.length <= 6);
  for (const v of [1, 5, 37, 99, 101, 1e6 + 1, 0.013]) {
    const axis = yAxis([v]);
    assert.ok(axis.max >= v, `max covers ${v}`);
    assert.ok(axis.ticks.length <= 6 && axis.ticks.length >= 2, `${axis.ticks.length} ticks for ${v}`);
  }
});

test('tick labels and current values', () => {
  assert.equal(formatTick(0), '0');
  assert.equal(formatTick(0.25), '0.25');
  assert.equal(formatTick(1500), '1.5k');
  assert.equal(formatTick(2_000_000), '2M');
  assert.equal(formatValue(null), '—');
  assert.equal(formatValue(1.234), '1.23');
  assert.equal(formatValue(12.34), '12.3');
  assert.equal(formatValue(1234.5), '1235');
  assert.equal(formatValue(3.7, { integer: true }), '4');
  assert.equal(formatDuration(12), '12 s');
  assert.equal(formatDuration(125), '2 min 5 s');
  assert.equal(formatDuration(3 * 3600 + 120), '3 h 2 min');
  assert.equal(formatDuration(2 * 86400 + 3600), '2 d 1 h');
});

test('line paths put the newest point at the right edge and break at gaps', () => {
  const area = { left: 10, top: 0, width: 100, height: 50, yMin: 0, yMax: 10, slots: 11 };
  assert.equal(linePath([0, 10], area), 'M100.0,50.0L110.0,0.0');
  assert.equal(linePath([5, null, 5], { ...area, slots: 3 }), 'M10.0,25.0M110.0,25.0');
  assert.equal(linePath([], area), '');
  const full = linePath(Array.from({ length: 11 }, (_, i) => i), area);
  assert.ok(full.startsWith('M10.0,50.0'));
  assert.ok(full.endsWith('L110.0,0.0'));
  assert.deepEqual(plottedValues([1, null, 2.123456, NaN]), [1, 2.1235]);
});

test('the time axis: now, then every minute back', () => {
  assert.deepEqual(timeTicks(120, 1), [{ slot: 119, text: 'now' }, { slot: 59, text: '-1 min' }, { slot: 0, text: '-2 min' }]);
  assert.deepEqual(timeTicks(31, 1), [{ slot: 30, text: 'now' }, { slot: 15, text: '-15 s' }, { slot: 0, text: '-30 s' }]);
});

test('API error texts and message ids', () => {
  assert.equal(apiErrorText(401, { error: 'unauthorized', message: 'no valid key' }), '401 unauthorized: no valid key');
  assert.equal(apiErrorText(404, { error: 'no_such_user' }), '404 no_such_user');
  assert.equal(apiErrorText(502, 'Bad Gateway'), '502 Bad Gateway');
  assert.equal(apiErrorText(500, null), 'HTTP 500');
  const a = newMessageID();
  assert.match(a, /^console-/);
  assert.notEqual(a, newMessageID());
  assert.ok(a.length <= 128);
});

// ---- console: the plot on a minimal DOM ----

class FakeNode {
  constructor(name) { this.name = name; this.attributes = new Map(); this.children = []; this.textContent = ''; }
  setAttribute(k, v) { this.attributes.set(k, String(v)); }
  getAttribute(k) { return this.attributes.get(k) ?? null; }
  append(...nodes) { this.children.push(...nodes); }
  replaceChildren(...nodes) { this.children = nodes; }
}

test('drawLinePlot writes data-values, gridlines with labels and one path per series', () => {
  const doc = { createElementNS: (_ns, name) => new FakeNode(name) };
  const svg = new FakeNode('svg');
  svg.ownerDocument = doc;
  svg.getBoundingClientRect = () => ({ width: 500 });
  drawLinePlot(svg, [{ values: [null, 1, 2, 3] }, { values: [0, 1, 1, 1] }]);
  assert.equal(svg.getAttribute('data-values'), '[1,2,3]');
  assert.equal(svg.getAttribute('viewBox'), '0 0 500 180');
  const labels = svg.children.filter((n) => n.name === 'text').map((n) => n.textContent);
  assert.ok(labels.includes('0') && labels.includes('3'), labels.join(' '));
  assert.ok(labels.includes('now') && labels.includes('-1 min') && labels.includes('-2 min'), labels.join(' '));
  const paths = svg.children.filter((n) => n.name === 'path');
  assert.equal(paths.length, 2);
  assert.equal(svg.children.filter((n) => n.name === 'circle').length, 2);
  drawLinePlot(svg, [{ values: [] }]);
  assert.equal(svg.getAttribute('data-values'), '[]');
  assert.equal(svg.children.filter((n) => n.name === 'path').length, 0);
});

test('figures given by transport are summed: /v1/stats gives logins_total and logged_in as {tcp, websocket}', async () => {
  const { total, sampleFromStats } = await import('../../Sources/IMWeb/Resources/console.js');
  assert.equal(total(4), 4);
  assert.equal(total({ tcp: 3, websocket: 2 }), 5);
  assert.equal(total(undefined), undefined);
  const first = sampleFromStats({ gateway: 'gw', ts: 1000, connections: { tcp: 1, websocket: 1 }, logins_total: { tcp: 1, websocket: 1 } }, null);
  const second = sampleFromStats({ gateway: 'gw', ts: 2000, connections: { tcp: 2, websocket: 3 }, logins_total: { tcp: 2, websocket: 4 } }, first.raw);
  assert.equal(second.logins, 4);
});
