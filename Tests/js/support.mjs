// Test support: hex helpers, a fake clock, and a fake WebSocket with a scripted gateway side.
import { FrameDecoder, readMessage, encodeFrame, FrameType, Tag, Op } from '../../Sources/IMWeb/Resources/imclient.js';

export function fromHex(hex) {
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

export function toHex(bytes) {
  return [...bytes].map((b) => b.toString(16).toUpperCase().padStart(2, '0')).join('');
}

/** Lets pending promise callbacks run (no time passes on the fake clock). */
export async function flush() {
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
}

/** A clock whose time moves only when the test says so; timers run in deadline order. */
export class FakeClock {
  constructor() {
    this.time = 1000;
    this.timers = [];
    this.ids = 0;
  }
  now() { return this.time; }
  setTimeout(fn, ms) {
    const handle = ++this.ids;
    this.timers.push({ handle, at: this.time + Math.max(0, ms), fn });
    return handle;
  }
  clearTimeout(handle) {
    this.timers = this.timers.filter((t) => t.handle !== handle);
  }
  /** Moves time on by `ms`, running each timer due on the way (and what it causes). */
  async advance(ms) {
    const end = this.time + ms;
    for (;;) {
      await flush();
      const due = this.timers.filter((t) => t.at <= end).sort((a, b) => a.at - b.at || a.handle - b.handle)[0];
      if (!due) break;
      this.timers = this.timers.filter((t) => t !== due);
      this.time = Math.max(this.time, due.at);
      due.fn();
    }
    this.time = end;
    await flush();
  }
}

/**
 * The gateway side of fake WebSockets: `WebSocket` is the constructor to give IMClient;
 * every socket the client opens appears in `sockets`; frames the client writes are decoded
 * and can be awaited with `next(socket)`.
 */
export class FakeGateway {
  constructor() {
    this.sockets = [];
    this.socketWaiters = [];
    /** ACK the client's heartbeats by itself (the heartbeat test turns it off). */
    this.autoHeartbeat = true;
    const gateway = this;
    this.WebSocket = class FakeWebSocket {
      constructor(url, protocol) {
        this.url = url;
        this.protocol = protocol;
        this.readyState = 0;
        this.binaryType = 'blob';
        this.closeCodes = [];
        this.decoder = new FrameDecoder();
        this.frames = [];
        this.frameWaiters = [];
        gateway.sockets.push(this);
        const waiters = gateway.socketWaiters;
        gateway.socketWaiters = [];
        waiters.forEach((w) => w(this));
      }
      send(bytes) {
        if (this.readyState !== 1) throw new Error('send on a socket that is not open');
        // Copy: what was sent must not change afterwards.
        for (const frame of this.decoder.push(new Uint8Array(bytes))) {
          const message = readMessage(frame);
          if (message.op === 'HEARTBEAT' && gateway.autoHeartbeat) {
            queueMicrotask(() => gateway.ack(this, message.sequence));
            continue;
          }
          const waiter = this.frameWaiters.shift();
          if (waiter) waiter(message);
          else this.frames.push(message);
        }
      }
      close(code = 1000) {
        this.closeCodes.push(code);
        if (this.readyState >= 2) return;
        this.readyState = 2;
        queueMicrotask(() => {
          this.readyState = 3;
          this.onclose?.({ code, reason: '' });
        });
      }
    };
  }

  /** The next socket the client opens (or the one it already opened and nobody took). */
  socket(index = this.sockets.length - 1) {
    if (this.sockets[index]) return Promise.resolve(this.sockets[index]);
    return new Promise((resolve) => this.socketWaiters.push(resolve));
  }

  /** Accepts the WebSocket handshake. */
  open(socket) {
    socket.readyState = 1;
    socket.onopen?.({});
  }

  /** The next frame (as readMessage reads it) the client writes on `socket`. */
  next(socket) {
    if (socket.frames.length) return Promise.resolve(socket.frames.shift());
    return new Promise((resolve, reject) => {
      // A guard, not a synchronisation: everything here happens without real time passing,
      // so a frame that has not come in 2 s of real time will never come.
      const guard = setTimeout(() => reject(new Error('the client wrote no frame (the test is stuck)')), 2000);
      socket.frameWaiters.push((message) => {
        clearTimeout(guard);
        resolve(message);
      });
    });
  }

  /** Frames written and not yet taken. */
  pending(socket) {
    const frames = socket.frames;
    socket.frames = [];
    return frames;
  }

  /** Sends bytes (one binary message) to the client. */
  sendBytes(socket, bytes) {
    const copy = new Uint8Array(bytes);
    socket.onmessage?.({ data: copy.buffer });
  }

  /** Sends one frame: `{type, sequence, items, session?}`. */
  send(socket, frame) {
    this.sendBytes(socket, encodeFrame({ session: 1, timestamp: 1735689600, ...frame }));
  }

  /** An ACK of `sequence` with optional items. */
  ack(socket, sequence, items = []) {
    this.send(socket, { type: FrameType.ACK, sequence, items });
  }

  /** The connection drops (the client did not ask for it). */
  drop(socket, code = 1006) {
    socket.readyState = 3;
    socket.onclose?.({ code, reason: '' });
  }

  /**
   * Opens `socket` and answers HELLO and LOGIN; returns the LOGIN message.
   * `loginOK`: extra LOGIN_OK items.
   */
  async handshake(socket, { user = 'alice', device = 'web', loginOK = [], interval = 30 } = {}) {
    this.open(socket);
    const hello = await this.next(socket);
    if (hello.op !== 'HELLO') throw new Error(`expected HELLO, got ${hello.op}`);
    this.send(socket, { type: FrameType.CONTROL, sequence: 1, items: [
      { tag: Tag.OP, value: Op.HELLO_OK }, { tag: Tag.VERSION_RESPONSE, value: { major: 1, minor: 0, features: 0x07fc } },
      { tag: Tag.REF_SEQUENCE, value: hello.sequence }] });
    const login = await this.next(socket);
    if (login.op !== 'LOGIN') throw new Error(`expected LOGIN, got ${login.op}`);
    this.send(socket, { type: FrameType.CONTROL, sequence: 2, items: [
      { tag: Tag.OP, value: Op.LOGIN_OK }, { tag: Tag.USER_ID, value: user }, { tag: Tag.DEVICE_ID, value: device },
      { tag: Tag.SERVER_TIME, value: 1735689600123 }, { tag: Tag.HEARTBEAT_INTERVAL, value: interval },
      { tag: Tag.REF_SEQUENCE, value: login.sequence }, ...loginOK] });
    return login;
  }
}

/** Collects a client's events of the names given, in order. */
export function record(client, names) {
  const events = [];
  for (const name of names) client.addEventListener(name, (e) => events.push({ name, ...e.detail }));
  return events;
}
