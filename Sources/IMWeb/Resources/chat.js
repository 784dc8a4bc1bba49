// The imgw web chat page (development mode): log in with a development token, list the
// conversations, open one (history), send and receive, presence, typing, groups.
// Plain ES module, no third-party code. Every text from the network goes into the page with
// textContent, never innerHTML.
//
// The pure helpers are exported (and tested with node, Tests/js/web-pages.test.mjs); the page
// itself starts only in a browser. imclient.js is loaded on the first login.

// ---------------------------------------------------------------------------------------------
// Pure helpers
// ---------------------------------------------------------------------------------------------

/** The key of a conversation: `user:bob` or `group:team`. */
export function conversationKey(kind, name) {
  return `${kind === 'group' ? 'group' : 'user'}:${name}`;
}

/** `user:bob` → {kind: 'user', name: 'bob'}; `group:team` → {kind: 'group', name: 'team'}. */
export function parseConversationKey(key) {
  const i = String(key).indexOf(':');
  if (i < 0) return { kind: 'user', name: String(key) };
  const kind = key.slice(0, i) === 'group' ? 'group' : 'user';
  return { kind, name: key.slice(i + 1) };
}

/** The selector imclient's history and markRead take: {with: 'bob'} or {group: 'team'}. */
export function conversationSelector(key) {
  const { kind, name } = parseConversationKey(key);
  return kind === 'group' ? { group: name } : { with: name };
}

/** The conversation a message belongs to, seen by `me`: its group, or the other user. */
export function conversationKeyOfMessage(message, me) {
  if (message.group) return conversationKey('group', message.group);
  const peer = message.from === me ? message.to : message.from;
  return conversationKey('user', peer ?? message.from);
}

/**
 * The key of a conversation as the client library may describe it: a key string, {with},
 * {user}, {peer}, {to}, {group}, or any of those under `conversation`.
 */
export function keyOfConversationDescriptor(c) {
  if (c == null) return null;
  if (typeof c === 'string') return c.includes(':') ? c : conversationKey('user', c);
  if (c.conversation != null && c.conversation !== c) {
    const inner = keyOfConversationDescriptor(c.conversation);
    if (inner) return inner;
  }
  if (c.group) return conversationKey('group', c.group);
  const user = c.with ?? c.user ?? c.peer ?? c.to;
  if (user) return conversationKey('user', user);
  return null;
}

/** A number from a number, a bigint or a numeric string (null otherwise). */
export function toNumber(value) {
  if (value == null) return null;
  if (typeof value === 'number') return Number.isFinite(value) ? value : null;
  if (typeof value === 'bigint') return Number(value);
  const n = Number(value);
  return Number.isFinite(n) ? n : null;
}

/** Compares two stream offsets (number, bigint or string) without losing u64 precision. */
export function compareOffsets(a, b) {
  const x = BigInt(a);
  const y = BigInt(b);
  return x < y ? -1 : x > y ? 1 : 0;
}

/**
 * One line of the conversation list from an item of client.conversations(): key, kind, name,
 * lastTs (ms), lastText, lastFrom, lastOffset, unread. Null for an item it cannot place.
 */
export function normalizeConversation(item) {
  const key = keyOfConversationDescriptor(item);
  if (!key) return null;
  const { kind, name } = parseConversationKey(key);
  const last = item.last ?? item.lastMessage ?? item.message ?? null;
  const lastTs = toNumber(item.lastTime ?? item.ts ?? item.time ?? last?.ts) ?? 0;
  const lastOffset = item.lastOffset ?? item.offset ?? last?.offset ?? null;
  return {
    key, kind, name, lastTs,
    lastText: last ? displayText(last) : '',
    lastFrom: last?.from ?? null,
    lastOffset,
    unread: toNumber(item.unread) ?? 0,
  };
}

/**
 * Whether a delivered message is news for the unread count: not when the conversation list
 * already counted it (its offset is not past the conversation's newest known offset), which
 * happens when the list was read while the gateway was still catching the device up.
 */
export function countsAsUnread(line, message, me) {
  if (message.from === me || message.isDeleted) return false;
  if (!line || message.offset == null || line.lastOffset == null) return true;
  return compareOffsets(message.offset, line.lastOffset) > 0;
}

/** The items of a conversations() or history() answer, whatever the library named them. */
export function itemsOf(page) {
  if (Array.isArray(page)) return page;
  if (page == null) return [];
  return page.items ?? page.conversations ?? page.lines ?? page.messages ?? [];
}

/** Conversations, the most recent first (ties: by name, so the order is stable). */
export function orderConversations(list) {
  return [...list].sort((a, b) => (b.lastTs - a.lastTs) || a.key.localeCompare(b.key));
}

/**
 * Merges what the server says of a conversation (the list at login, or after a reconnect)
 * into what the page knows: the newer last message wins; the server's unread count wins
 * unless the conversation is open (then it is read).
 */
export function mergeConversation(known, incoming, { open = false } = {}) {
  if (!known) return { ...incoming, unread: open ? 0 : incoming.unread };
  const newer = incoming.lastTs >= known.lastTs;
  return {
    ...known,
    lastTs: Math.max(known.lastTs, incoming.lastTs),
    lastText: newer ? incoming.lastText : known.lastText,
    lastFrom: newer ? incoming.lastFrom : known.lastFrom,
    lastOffset: newer ? (incoming.lastOffset ?? known.lastOffset) : known.lastOffset,
    unread: open ? 0 : incoming.unread,
  };
}

/** Orders messages: by server time, then by stream offset, then by id. */
export function compareMessages(a, b) {
  const ta = toNumber(a.ts) ?? 0;
  const tb = toNumber(b.ts) ?? 0;
  if (ta !== tb) return ta - tb;
  if (a.offset != null && b.offset != null) {
    const c = compareOffsets(a.offset, b.offset);
    if (c !== 0) return c;
  }
  return String(a.id).localeCompare(String(b.id));
}

/** Merges message lists: one per id (the later copy wins), in order. */
export function mergeMessages(existing, incoming) {
  const byId = new Map();
  for (const m of existing) byId.set(m.id, m);
  for (const m of incoming) byId.set(m.id, { ...byId.get(m.id), ...m });
  return [...byId.values()].sort(compareMessages);
}

/** The index at which `message` goes into the ordered list `list`. */
export function insertionIndex(list, message) {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (compareMessages(list[mid], message) <= 0) lo = mid + 1; else hi = mid;
  }
  return lo;
}

/** The newest offset among messages (null without one). */
export function newestOffset(messages) {
  let best = null;
  for (const m of messages) {
    if (m.offset == null) continue;
    if (best == null || compareOffsets(m.offset, best) > 0) best = m.offset;
  }
  return best;
}

/** What #typing says for the users typing in the open conversation (a Map user → state). */
export function typingText(typers) {
  const typing = [];
  const recording = [];
  for (const [user, state] of typers) {
    if (state === 'typing') typing.push(user);
    else if (state === 'recording') recording.push(user);
  }
  const phrase = (users, verb) => {
    if (users.length === 0) return '';
    if (users.length === 1) return `${users[0]} is ${verb}`;
    if (users.length <= 3) return `${users.slice(0, -1).join(', ')} and ${users.at(-1)} are ${verb}`;
    return `${users.length} people are ${verb}`;
  };
  return [phrase(typing, 'typing'), phrase(recording, 'recording audio')].filter(Boolean).join('; ');
}

/** The word #status shows for a client state. */
export function statusWord(state) {
  switch (state) {
    case 'connected': return 'online';
    case 'connecting': return 'connecting';
    case 'reconnecting': return 'reconnecting';
    default: return 'offline';
  }
}

/** Whether a user's devices (a Map device → status) make them online. */
export function presenceOf(devices) {
  if (!devices || devices.size === 0) return null;
  for (const status of devices.values()) if (status === 'online') return 'online';
  return 'offline';
}

/** A short clock time for a message (today: 14:03; before: 3 Mar 14:03). */
export function formatTime(ts, now = Date.now()) {
  const t = toNumber(ts);
  if (t == null || t <= 0) return '';
  const d = new Date(t);
  const hm = `${String(d.getHours()).padStart(2, '0')}:${String(d.getMinutes()).padStart(2, '0')}`;
  const n = new Date(now);
  if (d.getFullYear() === n.getFullYear() && d.getMonth() === n.getMonth() && d.getDate() === n.getDate()) return hm;
  const months = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
  return `${d.getDate()} ${months[d.getMonth()]} ${hm}`;
}

/** The WebSocket URL of the page's own host: ws(s)://host/path. */
export function webSocketURL(location, path = '/im') {
  const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
  const p = path.startsWith('/') ? path : `/${path}`;
  return `${scheme}://${location.host}${p}`;
}

/**
 * Sends typing notifications for the compose box: `typing` at the first keystroke and again
 * at most once per `throttleMs` while the user keeps typing, `paused` after `idleMs` without
 * a keystroke. `sent()` (a message went out: it says typing stopped) and `switchTo()` reset it.
 */
export class TypingNotifier {
  constructor({ send, now = () => Date.now(), setTimer = (f, ms) => setTimeout(f, ms),
                clearTimer = (t) => clearTimeout(t), throttleMs = 3000, idleMs = 5000 }) {
    this.sendState = send;
    this.now = now;
    this.setTimer = setTimer;
    this.clearTimer = clearTimer;
    this.throttleMs = throttleMs;
    this.idleMs = idleMs;
    this.active = false;
    this.lastSent = null;
    this.timer = null;
  }

  /** A keystroke in the compose box. */
  input() {
    const t = this.now();
    if (!this.active || this.lastSent == null || t - this.lastSent >= this.throttleMs) {
      this.lastSent = t;
      this.active = true;
      this.sendState('typing');
    }
    if (this.timer != null) this.clearTimer(this.timer);
    this.timer = this.setTimer(() => this.pause(), this.idleMs);
  }

  /** No keystroke for a while (or leaving the conversation): `paused`, once. */
  pause() {
    if (this.timer != null) this.clearTimer(this.timer);
    this.timer = null;
    if (this.active) {
      this.active = false;
      this.lastSent = null;
      this.sendState('paused');
    }
  }

  /** A message was sent: typing is over without a notification. */
  sent() {
    if (this.timer != null) this.clearTimer(this.timer);
    this.timer = null;
    this.active = false;
    this.lastSent = null;
  }
}

/** A message id for optimistic rendering before the gateway answered. */
function localID() {
  if (globalThis.crypto?.randomUUID) return `local-${crypto.randomUUID()}`;
  return `local-${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
}

/** The text of an error, whatever threw it. */
export function errorText(error) {
  if (error == null) return 'unknown error';
  if (typeof error === 'string') return error;
  const name = typeof error.name === 'string' && !/^(Error|IMClientError)$/.test(error.name) ? error.name : null;
  const code = `${error.codeName ?? name ?? error.code ?? ''}`;
  const message = error.message ?? (code ? '' : String(error));
  if (!message) return code || 'unknown error';
  return code && !message.includes(code) ? `${code}: ${message}` : message;
}

/** What a message shows: its text, or its kind for other content. */
export function displayText(message) {
  if (message.isDeleted) return 'message deleted';
  if (message.text != null) return message.text;
  if (message.content?.kind) return `[${message.content.kind}]`;
  return '';
}

/** The localStorage key of a device's place in its stream. */
export function syncStorageKey(user, device) {
  return `imgw.chat.sync.${encodeURIComponent(user)}.${encodeURIComponent(device)}`;
}

// ---------------------------------------------------------------------------------------------
// The page
// ---------------------------------------------------------------------------------------------

const TYPING_DISPLAY_MS = 7000; // an indicator not refreshed (throttle 3 s) goes away

class ChatPage {
  constructor(doc) {
    this.doc = doc;
    const $ = (id) => doc.getElementById(id);
    this.el = {
      status: $('status'), statusDetail: $('status-detail'), me: $('me'), logout: $('logout-button'),
      banner: $('banner'), loginView: $('login-view'), chatView: $('chat-view'),
      loginForm: $('login-form'), loginUser: $('login-user'), loginDevice: $('login-device'),
      loginButton: $('login-button'), loginError: $('login-error'),
      peerForm: $('peer-form'), peer: $('peer'), groupForm: $('group-form'), group: $('group'),
      conversations: $('conversations'), conversationsEmpty: $('conversations-empty'),
      title: $('conversation-title'), presence: $('presence'), back: $('back-button'),
      messagesScroll: $('messages-scroll'), messages: $('messages'), loadOlder: $('load-older'),
      typing: $('typing'), composeForm: $('compose-form'), compose: $('compose'), send: $('send'),
    };
    this.client = null;
    this.me = null;
    this.device = null;
    this.conversations = new Map(); // key → line
    this.open = null; // {key, kind, name, messages: [], complete, loading}
    this.presence = new Map(); // user → Map(device → status)
    this.watched = null; // the user whose presence is watched
    this.typers = new Map(); // user → state, in the open conversation
    this.typerTimers = new Map();
    this.countdown = null;
    this.typingNotifier = new TypingNotifier({ send: (state) => this.sendTyping(state) });
    this.bind();
  }

  bind() {
    const el = this.el;
    el.loginForm.addEventListener('submit', (e) => { e.preventDefault(); this.login(); });
    el.logout.addEventListener('click', () => this.logout());
    el.peerForm.addEventListener('submit', (e) => {
      e.preventDefault();
      const name = el.peer.value.trim();
      if (name) { this.openConversation(conversationKey('user', name)); el.peer.value = ''; }
    });
    el.groupForm.addEventListener('submit', (e) => {
      e.preventDefault();
      const name = el.group.value.trim();
      if (name) { this.openConversation(conversationKey('group', name)); el.group.value = ''; }
    });
    el.conversations.addEventListener('click', (e) => {
      const li = e.target.closest('li[data-conversation]');
      if (li) this.openConversation(li.dataset.conversation);
    });
    el.conversations.addEventListener('keydown', (e) => {
      if (e.key !== 'Enter' && e.key !== ' ') return;
      const li = e.target.closest('li[data-conversation]');
      if (li) { e.preventDefault(); this.openConversation(li.dataset.conversation); }
    });
    el.composeForm.addEventListener('submit', (e) => { e.preventDefault(); this.sendCompose(); });
    el.compose.addEventListener('input', () => { if (el.compose.value !== '') this.typingNotifier.input(); });
    el.compose.addEventListener('blur', () => this.typingNotifier.pause());
    el.loadOlder.addEventListener('click', () => this.loadOlder());
    el.back.addEventListener('click', () => this.doc.body.classList.remove('conversation-open'));
    this.doc.addEventListener('visibilitychange', () => {
      if (this.doc.visibilityState === 'visible' && this.open) this.markOpenRead();
      if (this.doc.visibilityState === 'hidden') this.saveSyncPosition();
    });
    globalThis.addEventListener?.('pagehide', () => this.saveSyncPosition());
  }

  // --- connection -----------------------------------------------------------------------------

  setStatus(state, detail = '') {
    const word = statusWord(state);
    this.el.status.textContent = word;
    this.el.status.dataset.state = word;
    this.el.statusDetail.textContent = detail;
  }

  showBanner(text, kind = 'error') {
    this.el.banner.textContent = text;
    this.el.banner.dataset.kind = kind;
    this.el.banner.hidden = !text;
  }

  async fetchToken(user, device) {
    const url = `/dev/token?user=${encodeURIComponent(user)}&device=${encodeURIComponent(device)}`;
    const response = await fetch(url, { cache: 'no-store' });
    let body = null;
    try { body = await response.json(); } catch { /* not JSON */ }
    if (!response.ok || !body?.token) {
      const message = body?.message ?? body?.error ?? `HTTP ${response.status}`;
      throw new Error(`no development token: ${message}`);
    }
    return body.token;
  }

  loadSyncPosition(user, device) {
    try {
      const saved = JSON.parse(globalThis.localStorage?.getItem(syncStorageKey(user, device)) ?? 'null');
      return saved && typeof saved === 'object' ? saved : null;
    } catch { return null; }
  }

  saveSyncPosition() {
    const client = this.client;
    if (!client || !this.me) return;
    try {
      const position = client.syncPosition;
      if (position != null) {
        globalThis.localStorage?.setItem(syncStorageKey(this.me, this.device),
          JSON.stringify(position, (_k, v) => (typeof v === 'bigint' ? Number(v) : v)));
      }
    } catch { /* storage off */ }
  }

  async login() {
    const el = this.el;
    const user = el.loginUser.value.trim();
    const device = el.loginDevice.value.trim() || 'web';
    if (!user) { el.loginError.textContent = 'Enter a user id.'; return; }
    el.loginError.textContent = '';
    el.loginButton.disabled = true;
    this.setStatus('connecting');
    try {
      const { IMClient } = await import('./imclient.js');
      const token = await this.fetchToken(user, device);
      const meta = this.doc.querySelector('meta[name="imgw-ws-path"]');
      const url = webSocketURL(this.doc.location ?? globalThis.location, meta?.content || '/im');
      const client = new IMClient({
        url, token, deviceID: device,
        tokenProvider: () => this.fetchToken(user, device),
        syncPosition: this.loadSyncPosition(user, device),
      });
      this.client = client;
      this.me = user;
      this.device = device;
      this.attach(client);
      await client.connect();
      if (this.client !== client) return;
      this.enterChat();
      await this.loadConversations();
    } catch (error) {
      const client = this.client;
      this.client = null;
      try { await client?.close(); } catch { /* already closed */ }
      this.setStatus('disconnected');
      el.loginError.textContent = `Login failed: ${errorText(error)}`;
    } finally {
      el.loginButton.disabled = false;
    }
  }

  attach(client) {
    const on = (name, f) => client.addEventListener(name, (e) => {
      if (this.client !== client) return;
      try { f(e.detail ?? {}); } catch (error) { console.error(`chat: ${name} handler`, error); }
    });
    on('state', (d) => this.onState(d));
    on('message', (d) => this.onMessage(d));
    on('presence', (d) => this.onPresence(d));
    on('typing', (d) => this.onTyping(d));
    on('kicked', (d) => this.onKicked(d));
    on('synced', () => { this.saveSyncPosition(); this.loadConversations(); });
    on('readMarker', (d) => this.onReadMarker(d));
    on('deleted', (d) => this.onDeleted(d));
    on('receipt', (d) => this.onReceipt(d));
    on('error', (d) => this.showBanner(`Error: ${errorText(d)}`));
  }

  onState(d) {
    clearInterval(this.countdown);
    this.countdown = null;
    if (d.state === 'reconnecting') {
      const attempt = d.attempt != null ? ` (attempt ${d.attempt})` : '';
      if (d.delayMs != null) {
        const until = Date.now() + d.delayMs;
        const tick = () => {
          const left = Math.max(0, until - Date.now());
          this.setStatus('reconnecting', `retrying in ${(left / 1000).toFixed(1)} s${attempt}`);
          if (left === 0) { clearInterval(this.countdown); this.countdown = null; }
        };
        tick();
        this.countdown = setInterval(tick, 200);
      } else {
        this.setStatus('reconnecting', `retrying${attempt}`);
      }
      this.showBanner(`${this.lastKick ? `Disconnected by the gateway (${this.lastKick})` : 'Connection lost'}: reconnecting…`, 'warning');
    } else if (d.state === 'connected') {
      this.setStatus('connected', this.device ? `as ${this.me} on ${this.device}` : '');
      this.showBanner('');
      this.lastKick = null;
      if (this.watched) this.setPresence(this.watched);
    } else {
      this.setStatus(d.state);
    }
  }

  onKicked(d) {
    const reason = [d.reason, d.message].filter(Boolean).join(': ') || 'the gateway ended the session';
    this.lastKick = reason;
    this.showBanner(`Disconnected by the gateway (${reason})`);
    this.setStatus('disconnected');
  }

  enterChat() {
    const el = this.el;
    el.loginView.hidden = true;
    el.chatView.hidden = false;
    el.logout.hidden = false;
    el.me.hidden = false;
    el.me.textContent = this.me;
    this.setStatus(this.client?.state === 'connected' || !this.client?.state ? 'connected' : this.client.state,
      `as ${this.me} on ${this.device}`);
    this.renderConversations();
    el.peer.focus();
  }

  async logout() {
    const client = this.client;
    this.typingNotifier.sent();
    this.saveSyncPosition();
    this.client = null;
    const bounded = (promise) => Promise.race([promise, new Promise((resolve) => setTimeout(resolve, 3000))]);
    try {
      if (client?.logout) await bounded(client.logout()); else await bounded(client?.close());
    } catch { try { await bounded(client?.close()); } catch { /* gone */ } }
    clearInterval(this.countdown);
    this.conversations.clear();
    this.presence.clear();
    this.open = null;
    this.watched = null;
    this.clearTypers();
    this.el.messages.replaceChildren();
    this.el.conversations.replaceChildren();
    this.conversationNodes?.clear();
    this.el.title.textContent = 'No conversation open';
    this.setPresence(null);
    this.setComposeEnabled(false);
    this.el.chatView.hidden = true;
    this.el.loginView.hidden = false;
    this.el.logout.hidden = true;
    this.el.me.hidden = true;
    this.showBanner('');
    this.setStatus('disconnected');
    this.el.loginUser.focus();
  }

  // --- conversations --------------------------------------------------------------------------

  async loadConversations() {
    const client = this.client;
    if (!client) return;
    let page;
    try {
      page = await client.conversations({ limit: 100 });
    } catch (error) {
      // No archive (UNKNOWN_OPERATION) or the store is down: the list fills as messages come.
      console.warn('chat: conversations', error);
      return;
    }
    if (this.client !== client) return;
    for (const item of itemsOf(page)) {
      const line = normalizeConversation(item);
      if (!line) continue;
      const open = this.open?.key === line.key;
      this.conversations.set(line.key, mergeConversation(this.conversations.get(line.key), line, { open }));
    }
    this.renderConversations();
  }

  touchConversation(key, message, { unread = false } = {}) {
    const { kind, name } = parseConversationKey(key);
    const line = this.conversations.get(key) ?? { key, kind, name, lastTs: 0, lastText: '', lastFrom: null, lastOffset: null, unread: 0 };
    if (message) {
      const ts = toNumber(message.ts) ?? Date.now();
      if (ts >= line.lastTs) {
        line.lastTs = ts;
        line.lastText = displayText(message);
        line.lastFrom = message.from ?? null;
      }
      if (message.offset != null && (line.lastOffset == null || compareOffsets(message.offset, line.lastOffset) > 0)) {
        line.lastOffset = message.offset;
      }
    }
    if (unread) line.unread += 1;
    this.conversations.set(key, line);
    this.renderConversations();
  }

  renderConversations() {
    const list = this.el.conversations;
    const items = orderConversations([...this.conversations.values()]);
    // One li per conversation for the page's life (a test or a screen reader holding one keeps
    // it), updated in place and moved only when the order changed.
    this.conversationNodes ??= new Map();
    const keep = new Set(items.map((c) => c.key));
    for (const [key, li] of this.conversationNodes) {
      if (!keep.has(key)) { li.remove(); this.conversationNodes.delete(key); }
    }
    items.forEach((c, index) => {
      let li = this.conversationNodes.get(c.key);
      if (!li) {
        li = this.doc.createElement('li');
        li.dataset.conversation = c.key;
        li.tabIndex = 0;
        li.setAttribute('role', 'button');
        this.conversationNodes.set(c.key, li);
      }
      this.fillConversation(li, c);
      if (list.children[index] !== li) list.insertBefore(li, list.children[index] ?? null);
    });
    this.el.conversationsEmpty.hidden = items.length > 0;
  }

  fillConversation(li, c) {
    const active = this.open?.key === c.key;
    li.classList.toggle('active', active);
    if (active) li.setAttribute('aria-current', 'true'); else li.removeAttribute('aria-current');
    const avatar = this.doc.createElement('span');
    avatar.className = `avatar ${c.kind}`;
    avatar.textContent = c.kind === 'group' ? '#' : (c.name[0] ?? '?').toUpperCase();
    avatar.setAttribute('aria-hidden', 'true');
    const body = this.doc.createElement('span');
    body.className = 'conv-body';
    const top = this.doc.createElement('span');
    top.className = 'conv-top';
    const name = this.doc.createElement('span');
    name.className = 'conv-name';
    name.textContent = c.kind === 'group' ? `#${c.name}` : c.name;
    const time = this.doc.createElement('span');
    time.className = 'conv-time';
    time.textContent = formatTime(c.lastTs);
    top.append(name, time);
    const preview = this.doc.createElement('span');
    preview.className = 'conv-preview';
    const who = c.lastFrom && c.lastFrom === this.me ? 'You: ' : (c.kind === 'group' && c.lastFrom ? `${c.lastFrom}: ` : '');
    preview.textContent = c.lastText ? `${who}${c.lastText}` : '';
    body.append(top, preview);
    const children = [avatar, body];
    if (c.unread > 0) {
      const badge = this.doc.createElement('span');
      badge.className = 'unread';
      badge.textContent = c.unread > 99 ? '99+' : String(c.unread);
      badge.setAttribute('aria-label', `${c.unread} unread`);
      children.push(badge);
      li.setAttribute('aria-label', `${name.textContent}, ${c.unread} unread`);
    } else {
      li.setAttribute('aria-label', name.textContent);
    }
    li.replaceChildren(...children);
  }

  async openConversation(key) {
    if (!this.client) return;
    const { kind, name } = parseConversationKey(key);
    if (this.open?.key === key) { this.doc.body.classList.add('conversation-open'); this.el.compose.focus(); return; }
    this.typingNotifier.pause();
    this.clearTypers();
    const previous = this.watched;
    this.open = { key, kind, name, messages: [], complete: true, loading: true };
    this.doc.body.classList.add('conversation-open');
    if (!this.conversations.has(key)) {
      this.conversations.set(key, { key, kind, name, lastTs: 0, lastText: '', lastFrom: null, lastOffset: null, unread: 0 });
    }
    this.conversations.get(key).unread = 0;
    this.renderConversations();
    this.el.title.textContent = kind === 'group' ? `#${name}` : name;
    this.el.messages.replaceChildren();
    this.el.loadOlder.hidden = true;
    this.setComposeEnabled(true);
    this.el.compose.placeholder = kind === 'group' ? `Message #${name}` : `Message ${name}`;
    this.el.compose.focus();

    // Presence: watch the open peer only.
    if (previous && previous !== (kind === 'user' ? name : null)) {
      this.watched = null;
      this.client.unwatchPresence([previous]).catch((e) => console.warn('chat: unwatchPresence', e));
    }
    if (kind === 'user') {
      this.watched = name;
      this.setPresence(name);
      if (previous !== name) {
        this.client.watchPresence([name]).then(() => {
          // A user never seen has no retained presence: offline, once the broker had its say.
          setTimeout(() => {
            if (this.watched === name && !this.presence.has(name)) {
              this.presence.set(name, new Map([['', 'offline']]));
              this.setPresence(name);
            }
          }, 1500);
        }, (e) => {
          if (this.watched === name) this.el.presence.textContent = `presence unavailable: ${errorText(e)}`;
        });
      }
    } else {
      this.setPresence(null);
    }

    await this.loadHistory();
  }

  async loadHistory(before) {
    const open = this.open;
    const client = this.client;
    if (!open || !client) return;
    open.loading = true;
    let page;
    try {
      const options = { limit: 50 };
      if (before != null) options.before = before;
      page = await client.history(conversationSelector(open.key), options);
    } catch (error) {
      if (this.open === open) {
        open.loading = false;
        if (before == null) this.appendNotice(`History unavailable: ${errorText(error)}`);
      }
      return;
    }
    if (this.open !== open || this.client !== client) return;
    open.loading = false;
    const items = itemsOf(page);
    open.complete = page?.complete !== false || items.length === 0;
    const scroll = this.el.messagesScroll;
    const fromBottom = scroll.scrollHeight - scroll.scrollTop;
    open.messages = mergeMessages(open.messages, items);
    this.renderMessages();
    if (before != null) scroll.scrollTop = scroll.scrollHeight - fromBottom; else this.scrollToEnd();
    this.el.loadOlder.hidden = open.complete;
    if (before == null) this.markOpenRead();
  }

  loadOlder() {
    const open = this.open;
    if (!open || open.loading) return;
    const oldest = open.messages.find((m) => m.offset != null);
    if (!oldest) { this.el.loadOlder.hidden = true; return; }
    this.loadHistory(oldest.offset);
  }

  markOpenRead() {
    const open = this.open;
    if (!open || !this.client || this.doc.visibilityState === 'hidden') return;
    const line = this.conversations.get(open.key);
    if (line && line.unread) { line.unread = 0; this.renderConversations(); }
    const through = newestOffset(open.messages.filter((m) => m.from !== this.me)) ?? null;
    if (through == null || typeof this.client.markRead !== 'function') return;
    if (open.readThrough != null && compareOffsets(through, open.readThrough) <= 0) return;
    open.readThrough = through;
    this.client.markRead(conversationSelector(open.key), through).catch((e) => console.warn('chat: markRead', e));
  }

  // --- messages -------------------------------------------------------------------------------

  renderMessages() {
    const nodes = this.open.messages.map((m) => this.messageNode(m));
    this.el.messages.replaceChildren(...nodes);
  }

  messageNode(m) {
    const li = this.doc.createElement('li');
    li.className = 'message';
    const mine = m.from === this.me;
    li.classList.toggle('mine', mine);
    li.classList.toggle('theirs', !mine);
    if (m.pending) li.classList.add('pending');
    if (m.failed) li.classList.add('failed');
    if (m.isDeleted) li.classList.add('deleted');
    li.dataset.id = m.id;
    li.dataset.from = m.from ?? '';
    if (m.offset != null) li.dataset.offset = String(m.offset);
    if (!mine && this.open?.kind === 'group') {
      const from = this.doc.createElement('span');
      from.className = 'from';
      from.textContent = m.from ?? '';
      li.append(from);
    }
    const text = this.doc.createElement('span');
    text.className = 'text';
    text.textContent = displayText(m);
    const meta = this.doc.createElement('span');
    meta.className = 'meta';
    const time = this.doc.createElement('time');
    const ts = toNumber(m.ts);
    if (ts) time.dateTime = new Date(ts).toISOString();
    time.textContent = formatTime(ts);
    meta.append(time);
    if (mine) {
      const tick = this.doc.createElement('span');
      tick.className = 'tick';
      tick.textContent = m.failed ? ' not sent' : m.pending ? ' sending…' : m.receipt === 'read' ? ' read' : m.receipt ? ' delivered' : ' sent';
      if (m.failed && m.error) tick.title = m.error;
      meta.append(tick);
    }
    li.append(text, meta);
    return li;
  }

  appendNotice(text) {
    const li = this.doc.createElement('li');
    li.className = 'notice';
    li.textContent = text;
    this.el.messages.append(li);
  }

  isNearEnd() {
    const s = this.el.messagesScroll;
    return s.scrollHeight - s.scrollTop - s.clientHeight < 80;
  }

  scrollToEnd() {
    const s = this.el.messagesScroll;
    s.scrollTop = s.scrollHeight;
  }

  /** Puts a message into the open conversation (replacing the copy with the same id). */
  showMessage(m, { replaceID } = {}) {
    const open = this.open;
    if (!open) return;
    const stick = this.isNearEnd() || m.from === this.me;
    const oldID = replaceID ?? m.id;
    const at = open.messages.findIndex((x) => x.id === oldID || x.id === m.id);
    if (at >= 0) {
      const merged = { ...open.messages[at], ...m };
      open.messages.splice(at, 1);
      const node = this.el.messages.querySelector(`li.message[data-id="${CSS.escape(oldID)}"]`);
      node?.remove();
      m = merged;
    }
    const index = insertionIndex(open.messages, m);
    open.messages.splice(index, 0, m);
    const node = this.messageNode(m);
    const next = open.messages[index + 1];
    const nextNode = next ? this.el.messages.querySelector(`li.message[data-id="${CSS.escape(next.id)}"]`) : null;
    if (nextNode) this.el.messages.insertBefore(node, nextNode); else this.el.messages.append(node);
    if (stick) this.scrollToEnd();
  }

  onMessage(m) {
    if (!m || m.id == null) return;
    const key = conversationKeyOfMessage(m, this.me);
    const isOpen = this.open?.key === key;
    const fromOther = m.from !== this.me;
    this.touchConversation(key, m, { unread: !isOpen && countsAsUnread(this.conversations.get(key), m, this.me) });
    if (isOpen) {
      if (fromOther) this.stopTyper(m.from);
      this.showMessage(m);
      if (fromOther) this.markOpenRead();
    }
  }

  onReadMarker(d) {
    const key = keyOfConversationDescriptor(d.conversation ?? d);
    const line = key ? this.conversations.get(key) : null;
    if (!line) return;
    line.unread = toNumber(d.unread) ?? 0;
    this.renderConversations();
  }

  onDeleted(d) {
    const open = this.open;
    if (!open) return;
    const m = open.messages.find((x) => x.id === d.id);
    if (m) this.showMessage({ ...m, isDeleted: true, text: '' });
  }

  onReceipt(d) {
    const open = this.open;
    if (!open) return;
    const m = open.messages.find((x) => x.id === d.id);
    if (m && m.from === this.me && m.receipt !== 'read') this.showMessage({ ...m, receipt: d.status });
  }

  setComposeEnabled(enabled) {
    this.el.compose.disabled = !enabled;
    this.el.send.disabled = !enabled;
    if (!enabled) this.el.compose.placeholder = 'Open a conversation to write';
  }

  async sendCompose() {
    const open = this.open;
    const client = this.client;
    const text = this.el.compose.value;
    if (!open || !client || text.trim() === '') return;
    this.el.compose.value = '';
    this.typingNotifier.sent();
    const temp = { id: localID(), from: this.me, to: open.kind === 'user' ? open.name : null,
                   group: open.kind === 'group' ? open.name : null, text, ts: Date.now(), offset: null, pending: true };
    this.showMessage(temp);
    this.touchConversation(open.key, temp);
    try {
      const result = open.kind === 'group' ? await client.sendToGroup(open.name, text) : await client.send(open.name, text);
      const sent = { ...temp, id: result?.id ?? temp.id, offset: result?.offset ?? null, pending: false };
      if (result?.ts != null) sent.ts = result.ts;
      if (this.open === open) this.showMessage(sent, { replaceID: temp.id });
      if (sent.offset != null) {
        const line = this.conversations.get(open.key);
        if (line) line.lastOffset = sent.offset;
      }
    } catch (error) {
      if (this.open === open) this.showMessage({ ...temp, pending: false, failed: true, error: errorText(error) });
      this.showBanner(`Not sent: ${errorText(error)}`);
    }
  }

  // --- typing ---------------------------------------------------------------------------------

  sendTyping(state) {
    const open = this.open;
    const client = this.client;
    if (!open || !client) return;
    try {
      if (open.kind === 'group') client.typingInGroup(open.name, state); else client.typing(open.name, state);
    } catch (error) {
      console.warn('chat: typing', error);
    }
  }

  onTyping(d) {
    const open = this.open;
    if (!open || !d.from || d.from === this.me) return;
    const relevant = open.kind === 'group' ? d.group === open.name : (!d.group && d.from === open.name);
    if (!relevant) return;
    if (d.state === 'typing' || d.state === 'recording') {
      this.typers.set(d.from, d.state);
      clearTimeout(this.typerTimers.get(d.from));
      this.typerTimers.set(d.from, setTimeout(() => this.stopTyper(d.from), TYPING_DISPLAY_MS));
      this.renderTyping();
    } else {
      this.stopTyper(d.from);
    }
  }

  stopTyper(user) {
    clearTimeout(this.typerTimers.get(user));
    this.typerTimers.delete(user);
    if (this.typers.delete(user)) this.renderTyping();
  }

  clearTypers() {
    for (const t of this.typerTimers.values()) clearTimeout(t);
    this.typerTimers.clear();
    this.typers.clear();
    this.renderTyping();
  }

  renderTyping() {
    this.el.typing.textContent = typingText(this.typers);
  }

  // --- presence -------------------------------------------------------------------------------

  onPresence(d) {
    if (!d.user) return;
    const devices = this.presence.get(d.user) ?? new Map();
    devices.set(d.device ?? '', d.status);
    this.presence.set(d.user, devices);
    if (this.watched === d.user) this.setPresence(d.user);
  }

  setPresence(user) {
    const el = this.el.presence;
    if (!user) { el.textContent = ''; el.dataset.status = ''; return; }
    const status = presenceOf(this.presence.get(user));
    el.dataset.status = status ?? '';
    el.textContent = status ?? '';
    el.setAttribute('aria-label', status ? `${user} is ${status}` : '');
  }
}

if (typeof document !== 'undefined' && document.getElementById('login-form')) {
  const page = new ChatPage(document);
  globalThis.imgwChat = page; // for debugging in the console
}
