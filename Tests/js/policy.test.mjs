// The client's pure policies: backoff, connection state machine, outbox, heartbeat, cursor, token schedule.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import {
  Backoff, ConnectionStateMachine, Outbox, Priority, AdaptiveHeartbeat, StreamCursor, DedupWindow, TokenRefreshSchedule,
} from '../../Sources/IMWeb/Resources/imclient.js';

describe('Backoff (README "Reconnect": (0-1], (1-2], (2-4] ... (16-32] s)', () => {
  const backoff = new Backoff();
  test('levels', () => {
    assert.deepEqual([0, 1, 2, 3, 4, 5, 6, 50, 1e9].map((a) => backoff.level(a)),
      [[0, 1000], [1000, 2000], [2000, 4000], [4000, 8000], [8000, 16000], [16000, 32000], [16000, 32000], [16000, 32000], [16000, 32000]]);
    assert.deepEqual(backoff.level(-1), [0, 1000]);
  });
  test('draws stay inside their level, open below, closed above', () => {
    for (let attempt = 0; attempt < 8; attempt++) {
      const [lower, upper] = backoff.level(attempt);
      assert.equal(backoff.delay(attempt, () => 0), upper, 'random 0 gives the top');
      assert.ok(backoff.delay(attempt, () => 0.9999999) > lower, 'never the bottom');
      for (let i = 0; i < 200; i++) {
        const d = backoff.delay(attempt);
        assert.ok(d > lower && d <= upper, `attempt ${attempt}: ${d} in (${lower}, ${upper}]`);
      }
    }
  });
  test('jitter spreads the draws', () => {
    const draws = new Set(Array.from({ length: 50 }, () => Math.round(backoff.delay(3))));
    assert.ok(draws.size > 10);
  });
  test('other bases and caps', () => {
    const b = new Backoff({ baseMs: 500, capMs: 3000 });
    assert.deepEqual([0, 1, 2, 3, 4].map((a) => b.level(a)), [[0, 500], [500, 1000], [1000, 2000], [1500, 3000], [1500, 3000]]);
    assert.throws(() => new Backoff({ baseMs: 0 }));
  });
});

describe('ConnectionStateMachine', () => {
  const types = (actions) => actions.map((a) => (a.attempt === undefined ? a.type : `${a.type}(${a.attempt})`));

  test('connect, log in, lose the connection, reconnect with growing attempts, reset by a login', () => {
    const m = new ConnectionStateMachine();
    assert.deepEqual(types(m.handle('connect')), ['openConnection']);
    assert.equal(m.state, 'connecting');
    assert.deepEqual(types(m.handle('connectSucceeded')), ['loggedIn']);
    assert.equal(m.state, 'connected');
    assert.deepEqual(types(m.handle({ type: 'connectionLost', failure: 'transient' })), ['closeConnection', 'connectionDown', 'scheduleReconnect(0)']);
    assert.equal(m.state, 'disconnected');
    assert.ok(m.isReconnectScheduled);
    assert.deepEqual(types(m.handle('reconnectDue')), ['openConnection']);
    assert.deepEqual(types(m.handle({ type: 'connectFailed', failure: 'transient' })), ['closeConnection', 'scheduleReconnect(1)']);
    assert.deepEqual(types(m.handle('reconnectDue')), ['openConnection']);
    assert.deepEqual(types(m.handle({ type: 'connectFailed' })), ['closeConnection', 'scheduleReconnect(2)']);
    assert.deepEqual(types(m.handle('networkAvailable')), ['cancelReconnect', 'openConnection']);
    assert.deepEqual(types(m.handle('connectSucceeded')), ['loggedIn']);
    assert.equal(m.attempt, 0);
    assert.deepEqual(types(m.handle({ type: 'connectionLost' })), ['closeConnection', 'connectionDown', 'scheduleReconnect(0)']);
  });

  test('a terminal failure finishes: nothing reconnects after it', () => {
    const m = new ConnectionStateMachine();
    m.handle('connect');
    m.handle('connectSucceeded');
    assert.deepEqual(types(m.handle({ type: 'connectionLost', failure: 'terminal' })), ['closeConnection', 'connectionDown', 'finish']);
    assert.ok(m.isFinished);
    for (const e of ['connect', 'reconnectDue', 'networkAvailable', 'connectSucceeded', 'disconnect']) assert.deepEqual(m.handle(e), []);
  });

  test('disconnect while connected waits for the transport to close, then finishes', () => {
    const m = new ConnectionStateMachine();
    m.handle('connect');
    m.handle('connectSucceeded');
    assert.deepEqual(types(m.handle('disconnect')), ['closeConnection']);
    assert.equal(m.state, 'disconnecting');
    assert.deepEqual(m.handle('reconnectDue'), []);
    assert.deepEqual(types(m.handle('disconnectCompleted')), ['connectionDown', 'finish']);
    assert.equal(m.state, 'disconnected');
  });

  test('disconnect while waiting to reconnect cancels the reconnect', () => {
    const m = new ConnectionStateMachine();
    m.handle('connect');
    m.handle('connectSucceeded');
    m.handle({ type: 'connectionLost' });
    assert.deepEqual(types(m.handle('disconnect')), ['cancelReconnect', 'finish']);
    assert.deepEqual(m.handle('reconnectDue'), []);
  });

  test('stale events change nothing', () => {
    const m = new ConnectionStateMachine();
    assert.deepEqual(m.handle('connectSucceeded'), []);
    assert.deepEqual(m.handle('reconnectDue'), []);
    assert.deepEqual(m.handle({ type: 'connectionLost' }), []);
    assert.equal(m.state, 'disconnected');
    m.handle('connect');
    assert.deepEqual(m.handle('connect'), []);
    assert.deepEqual(m.handle('reconnectDue'), []);
    assert.equal(m.state, 'connecting');
  });
});

describe('Outbox', () => {
  const msg = (kind) => ({ kind });
  test('send order: priority, then enqueue order; window', () => {
    const o = new Outbox({ maxInFlight: 3 });
    const a = o.enqueue(msg('watch'), { priority: Priority.presence, durable: false });
    const b = o.enqueue(msg('chat'), { priority: Priority.chat, durable: true });
    const c = o.enqueue(msg('receipt'), { priority: Priority.receipt, durable: true });
    const d = o.enqueue(msg('chat'), { priority: Priority.chat, durable: true });
    assert.deepEqual(o.nextToSend().map((e) => e.id), [b, d, c]);
    assert.deepEqual(o.nextToSend(new Set([Priority.chat])).map((e) => e.id), [c, a]);
    o.markSent(b, 10, 100);
    assert.deepEqual(o.nextToSend().map((e) => e.id), [d, c]);
    assert.equal(o.acknowledge(10).id, b);
    assert.equal(o.acknowledge(10), undefined);
  });
  test('an overdue ACK puts the entry back in its place with resend; too many: connection broken', () => {
    const o = new Outbox({ maxRetransmits: 1 });
    const a = o.enqueue(msg('chat'), { priority: Priority.chat, durable: true });
    const b = o.enqueue(msg('chat'), { priority: Priority.chat, durable: true });
    o.markSent(a, 1, 100);
    o.markSent(b, 2, 200);
    assert.deepEqual(o.expire(150), { retransmit: [a], connectionBroken: false });
    assert.equal(o.entry(a).resend, true);
    assert.equal(o.entry(b).resend, false);
    assert.deepEqual(o.nextToSend().map((e) => e.id), [a]);
    o.markSent(a, 3, 300);
    assert.equal(o.nextDeadline, 200);
    assert.equal(o.expire(300).connectionBroken, true);
    assert.equal(o.nextDeadline, undefined);
  });
  test('a lost connection keeps durable entries (resend) and drops the others', () => {
    const o = new Outbox();
    const a = o.enqueue(msg('chat'), { priority: Priority.chat, durable: true });
    const w = o.enqueue(msg('watch'), { priority: Priority.presence, durable: false });
    o.markSent(a, 1, 100);
    o.markSent(w, 2, 100);
    assert.deepEqual(o.connectionLost().map((e) => e.id), [w]);
    assert.deepEqual(o.nextToSend().map((e) => [e.id, e.resend]), [[a, true]]);
    assert.equal(o.inFlightCount, 0);
  });
});

describe('AdaptiveHeartbeat', () => {
  test('due after an idle interval, grows on answers, shrinks on failures, dead after three', () => {
    const h = new AdaptiveHeartbeat({ maxIntervalMs: 30000 }, 0);
    assert.equal(h.interval, 15000);
    assert.deepEqual(h.nextAction(14999), { type: 'wait', until: 15000 });
    assert.deepEqual(h.nextAction(15000), { type: 'send' });
    h.heartbeatSent(1, 15000);
    h.ackReceived(1, 15100);
    assert.equal(h.interval, 18000);
    assert.equal(h.smoothedRTT, 100);
    assert.equal(h.ackTimeout, 2000); // 4 × 100 ms, at least 2 s
    h.frameReceived(15100);
    const due = 15000 + 18000;
    assert.deepEqual(h.nextAction(due), { type: 'send' });
    h.heartbeatSent(2, due);
    assert.deepEqual(h.nextAction(due + 1999), { type: 'wait', until: due + 2000 });
    assert.deepEqual(h.nextAction(due + 2000), { type: 'send' }, 'a retry at once after a failure');
    assert.equal(h.interval, 9000);
    h.heartbeatSent(3, due + 2000);
    h.heartbeatSent(4, due + 4000);
    assert.deepEqual(h.nextAction(due + 6000), { type: 'dead' });
    h.connectionStarted(due + 7000);
    assert.equal(h.isDead, false);
    assert.equal(h.interval, 5000, 'the learned interval is kept across connections');
  });
});

describe('StreamCursor and DedupWindow', () => {
  test('offsets: in order, gaps, duplicates', () => {
    const c = new StreamCursor({ epoch: 7, offset: 40 });
    assert.equal(c.received(41), true);
    assert.equal(c.received(43), true);
    assert.equal(c.offset, 41);
    assert.equal(c.received(43), false);
    assert.equal(c.received(41), false);
    assert.equal(c.received(42), true);
    assert.equal(c.offset, 43);
    c.caughtUp(50, 7);
    assert.deepEqual(c.position, { epoch: 7, offset: 50 });
    c.loggedIn(8, 3, 2); // another epoch: start there
    assert.deepEqual(c.position, { epoch: 8, offset: 3 });
    c.loggedIn(8, 10, 5); // archive unavailable: unchanged
    assert.deepEqual(c.position, { epoch: 8, offset: 3 });
  });
  test('dedup window forgets the oldest first', () => {
    const d = new DedupWindow(2);
    assert.equal(d.firstSighting('a'), true);
    assert.equal(d.firstSighting('a'), false);
    d.firstSighting('b');
    d.firstSighting('c');
    assert.equal(d.firstSighting('a'), true);
  });
});

describe('TokenRefreshSchedule (PROTOCOL.md 6.1.1)', () => {
  test('80% of the lifetime or 60 s before the expiry, whichever comes first, from SERVER_TIME', () => {
    const hour = new TokenRefreshSchedule();
    hour.loggedIn(1_000_000, 1_000_000 + 3_600_000, 500);
    assert.deepEqual(hour.nextAction(500), { until: 500 + 48 * 60_000 });
    const short = new TokenRefreshSchedule();
    short.loggedIn(1_000_000, 1_000_000 + 120_000, 0);
    assert.deepEqual(short.nextAction(0), { until: 60_000 });
    assert.equal(short.nextAction(60_000), 'refresh');
    short.refreshStarted();
    assert.equal(short.nextAction(60_000), null);
    short.refreshFailed(60_000, () => 0); // retry after 1 s
    assert.deepEqual(short.nextAction(60_000), { until: 61_000 });
    const none = new TokenRefreshSchedule();
    none.loggedIn(1, undefined, 0);
    assert.equal(none.nextAction(1e9), null);
  });
});
