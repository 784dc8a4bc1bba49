// The imgw operator console: live figures from GET /v1/stats (every second, plotted by the
// page itself in SVG), the broker's and the archive's state, and the presence lookup,
// disconnect and system message forms of the server API. Plain ES module, no third-party
// code. Every text from the network goes into the page with textContent.
//
// The pure helpers are exported (and tested with node, Tests/js/web-pages.test.mjs); the page
// itself starts only in a browser.

export const MAX_POINTS = 120;
const KEY_STORAGE = 'imgw.console.apiKey';
const SVG_NS = 'http://www.w3.org/2000/svg';

// ---------------------------------------------------------------------------------------------
// Pure helpers
// ---------------------------------------------------------------------------------------------

/** Appends `value` to `series`, keeping the last `max` points (in place; returns it). */
export function pushPoint(series, value, max = MAX_POINTS) {
  series.push(value);
  if (series.length > max) series.splice(0, series.length - max);
  return series;
}

/** Every connection of the gateway: TCP and WebSocket. */
/**
 * A figure that /v1/stats gives either as a number or by transport ({tcp, websocket}): its total
 * (undefined if it is neither).
 */
export function total(value) {
  if (typeof value === 'number') return value;
  if (value && typeof value === 'object') {
    return Object.values(value).reduce((sum, part) => sum + (Number(part) || 0), 0);
  }
  return undefined;
}

export function connectionsTotal(stats) {
  const c = stats?.connections ?? {};
  return (Number(c.tcp) || 0) + (Number(c.websocket) || 0);
}

/**
 * The rate per second of a counter between two samples ({ts: ms, ...totals}): null for the
 * first sample, when time did not move on, or when the counter went back (a restarted
 * gateway, or another gateway behind a load balancer).
 */
export function ratePerSecond(previous, current, field) {
  if (!previous || !current) return null;
  const a = Number(previous[field]);
  const b = Number(current[field]);
  const dt = (Number(current.ts) - Number(previous.ts)) / 1000;
  if (!Number.isFinite(a) || !Number.isFinite(b) || !Number.isFinite(dt) || dt <= 0) return null;
  if (b < a) return null;
  if (previous.gateway != null && current.gateway != null && previous.gateway !== current.gateway) return null;
  return (b - a) / dt;
}

/**
 * Everything the page plots from one /v1/stats answer and the one before: connections (total,
 * tcp, websocket), logins/s, chats/s, p99 (null without a chat in the window).
 * `receivedAt` stands in for `ts` if the answer has none.
 */
export function sampleFromStats(stats, previous, receivedAt = Date.now()) {
  const current = {
    ts: Number.isFinite(Number(stats?.ts)) && stats?.ts != null ? Number(stats.ts) : receivedAt,
    gateway: stats?.gateway ?? null,
    logins_total: total(stats?.logins_total),
    chats_in_total: stats?.chats_in_total,
  };
  const p99 = stats?.chat_p99_ms;
  return {
    raw: current,
    connections: connectionsTotal(stats),
    tcp: Number(stats?.connections?.tcp) || 0,
    websocket: Number(stats?.connections?.websocket) || 0,
    logins: ratePerSecond(previous, current, 'logins_total'),
    chats: ratePerSecond(previous, current, 'chats_in_total'),
    p99: p99 == null || !Number.isFinite(Number(p99)) ? null : Number(p99),
  };
}

/** 1, 2 or 5 times a power of ten, at least `x` (x > 0). */
export function niceStep(x) {
  if (!(x > 0) || !Number.isFinite(x)) return 1;
  const exponent = Math.floor(Math.log10(x));
  const base = 10 ** exponent;
  const f = x / base;
  const nice = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
  return nice * base;
}

/**
 * The y axis for `values` (nulls ignored): from 0 (or below, for negative values) to a nice
 * maximum, with about `count` gridlines at round values (whole numbers with `integer`). An
 * empty or all-zero series gets 0..1.
 */
export function yAxis(values, count = 4, { integer = false } = {}) {
  const numbers = values.filter((v) => v != null && Number.isFinite(v));
  let max = numbers.length ? Math.max(...numbers) : 0;
  let min = numbers.length ? Math.min(0, ...numbers) : 0;
  if (max <= min) max = min + 1;
  const step = integer ? Math.max(1, niceStep((max - min) / count)) : niceStep((max - min) / count);
  const lo = Math.floor(min / step) * step;
  const hi = Math.ceil(max / step) * step;
  const ticks = [];
  for (let v = lo; v <= hi + step / 2; v += step) ticks.push(roundTo(v, step));
  return { min: lo, max: hi, step, ticks };
}

function roundTo(v, step) {
  const decimals = Math.max(0, -Math.floor(Math.log10(step)));
  return Number(v.toFixed(Math.min(decimals + 1, 12)));
}

/** A tick label: 1200 → "1.2k", 0.5 → "0.5", 2 → "2". */
export function formatTick(v) {
  const a = Math.abs(v);
  if (a >= 1e9) return `${trim(v / 1e9)}G`;
  if (a >= 1e6) return `${trim(v / 1e6)}M`;
  if (a >= 1e3) return `${trim(v / 1e3)}k`;
  return trim(v);
}

function trim(v) {
  return String(Number(v.toFixed(2)));
}

/** A current value for #value-*: integers as they are, rates with one or two decimals. */
export function formatValue(v, { integer = false } = {}) {
  if (v == null || !Number.isFinite(v)) return '—';
  if (integer) return String(Math.round(v));
  if (Math.abs(v) >= 100) return v.toFixed(0);
  if (Math.abs(v) >= 10) return v.toFixed(1);
  return v.toFixed(2);
}

/**
 * The SVG path of `values` in a plot area: slot i of `slots` (the newest at the right edge),
 * y scaled from [yMin, yMax] to [bottom, top]. A null breaks the line (a new "M").
 */
export function linePath(values, { left, top, width, height, yMin, yMax, slots = MAX_POINTS }) {
  const n = values.length;
  const offset = slots - n;
  const dx = slots > 1 ? width / (slots - 1) : 0;
  const span = yMax - yMin || 1;
  let d = '';
  let pen = false;
  for (let i = 0; i < n; i++) {
    const v = values[i];
    if (v == null || !Number.isFinite(v)) { pen = false; continue; }
    const x = left + (offset + i) * dx;
    const y = top + height - ((v - yMin) / span) * height;
    d += `${pen ? 'L' : 'M'}${x.toFixed(1)},${y.toFixed(1)}`;
    pen = true;
  }
  return d;
}

/**
 * The time axis' labels: "now" at the right edge, then every minute back (every 15 s for a
 * plot of a minute or less) while it fits; `slot` is the point's index (0: the oldest).
 */
export function timeTicks(slots = MAX_POINTS, intervalS = 1) {
  const span = (slots - 1) * intervalS;
  const every = span > 60 ? 60 : 15;
  const ticks = [];
  for (let ago = 0; ago <= span + every / 2 && ticks.length < 8; ago += every) {
    const slot = Math.max(0, Math.round(slots - 1 - ago / intervalS));
    const text = ago === 0 ? 'now' : ago % 60 === 0 ? `-${ago / 60} min` : `-${ago} s`;
    ticks.push({ slot, text });
  }
  return ticks;
}

/** The plotted numbers of a series, for `data-values` (nulls are gaps, not plotted). */
export function plottedValues(values) {
  return values.filter((v) => v != null && Number.isFinite(v)).map((v) => Number(v.toFixed(4)));
}

/** Seconds as "3 d 4 h", "4 h 5 min", "5 min 6 s", "6 s". */
export function formatDuration(seconds) {
  const s = Math.max(0, Math.floor(Number(seconds) || 0));
  const d = Math.floor(s / 86400);
  const h = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  if (d) return `${d} d ${h} h`;
  if (h) return `${h} h ${m} min`;
  if (m) return `${m} min ${s % 60} s`;
  return `${s} s`;
}

/** The message of an API error answer ({error, message}), or of a failed request. */
export function apiErrorText(status, body) {
  if (body && typeof body === 'object' && (body.message || body.error)) {
    return `${status} ${body.error ?? ''}${body.error && body.message ? ': ' : ''}${body.message ?? ''}`.trim();
  }
  if (typeof body === 'string' && body.trim()) return `${status} ${body.trim().slice(0, 200)}`;
  return `HTTP ${status}`;
}

/** A message id for a system message (the API is idempotent on it). */
export function newMessageID() {
  if (globalThis.crypto?.randomUUID) return `console-${crypto.randomUUID()}`;
  return `console-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 10)}`;
}

// ---------------------------------------------------------------------------------------------
// The line plot (SVG)
// ---------------------------------------------------------------------------------------------

/**
 * Draws a line plot into `svg`: axes, gridlines with labels, one line per series, the newest
 * point at the right edge, and a time axis of the last `slots` seconds. `series` is
 * [{values, className?, label?}]; the first one's plotted numbers go into `data-values`.
 */
export function drawLinePlot(svg, series, { slots = MAX_POINTS, height = 180, intervalS = 1, integer = false } = {}) {
  const doc = svg.ownerDocument;
  const width = Math.max(240, Math.round(svg.getBoundingClientRect?.().width || svg.clientWidth || 480));
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.setAttribute('width', '100%');
  svg.setAttribute('height', String(height));
  svg.setAttribute('data-values', JSON.stringify(plottedValues(series[0]?.values ?? [])));

  const all = series.flatMap((s) => s.values);
  const axis = yAxis(all, 4, { integer });
  const labelWidth = Math.max(...axis.ticks.map((t) => formatTick(t).length)) * 7 + 10;
  const area = { left: labelWidth, top: 10, width: width - labelWidth - 10, height: height - 32 };

  const el = (name, attrs, text) => {
    const node = doc.createElementNS(SVG_NS, name);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (text != null) node.textContent = text;
    return node;
  };
  const nodes = [];
  const yOf = (v) => area.top + area.height - ((v - axis.min) / (axis.max - axis.min || 1)) * area.height;

  for (const t of axis.ticks) {
    const y = yOf(t).toFixed(1);
    nodes.push(el('line', { x1: area.left, x2: area.left + area.width, y1: y, y2: y, class: t === axis.min ? 'axis' : 'grid' }));
    nodes.push(el('text', { x: area.left - 6, y, class: 'tick-label y', 'text-anchor': 'end', 'dominant-baseline': 'middle' }, formatTick(t)));
  }
  for (const label of timeTicks(slots, intervalS)) {
    const x = (area.left + (slots > 1 ? (label.slot / (slots - 1)) * area.width : 0)).toFixed(1);
    nodes.push(el('line', { x1: x, x2: x, y1: area.top + area.height, y2: area.top + area.height + 4, class: 'axis' }));
    nodes.push(el('text', {
      x, y: height - 6, class: 'tick-label x',
      'text-anchor': label.slot === 0 ? 'start' : label.slot === slots - 1 ? 'end' : 'middle',
    }, label.text));
  }
  nodes.push(el('line', { x1: area.left, x2: area.left, y1: area.top, y2: area.top + area.height, class: 'axis' }));

  series.forEach((s, i) => {
    const d = linePath(s.values, { ...area, yMin: axis.min, yMax: axis.max, slots });
    if (!d) return;
    const path = el('path', { d, class: `line line-${i}${s.className ? ` ${s.className}` : ''}`, fill: 'none' });
    if (s.label) path.append(el('title', {}, s.label));
    nodes.push(path);
    // The newest point, as a dot.
    const lastIndex = s.values.length - 1;
    const last = s.values[lastIndex];
    if (last != null && Number.isFinite(last)) {
      const x = area.left + (slots - s.values.length + lastIndex) * (slots > 1 ? area.width / (slots - 1) : 0);
      nodes.push(el('circle', { cx: x.toFixed(1), cy: yOf(last).toFixed(1), r: 3, class: `dot line-${i}` }));
    }
  });
  svg.replaceChildren(...nodes);
}

// ---------------------------------------------------------------------------------------------
// The page
// ---------------------------------------------------------------------------------------------

class ConsolePage {
  constructor(doc) {
    this.doc = doc;
    const $ = (id) => doc.getElementById(id);
    this.$ = $;
    this.key = null;
    this.previous = null;
    this.series = { connections: [], tcp: [], websocket: [], logins: [], chats: [], p99: [] };
    this.timer = null;
    this.polling = false;
    this.generation = 0;

    $('key-form').addEventListener('submit', (e) => { e.preventDefault(); this.saveKey(); });
    $('presence-form').addEventListener('submit', (e) => { e.preventDefault(); this.lookupPresence(); });
    $('kick-form').addEventListener('submit', (e) => { e.preventDefault(); this.kick(); });
    $('system-form').addEventListener('submit', (e) => { e.preventDefault(); this.sendSystemMessage(); });
    let resize = null;
    globalThis.addEventListener?.('resize', () => { clearTimeout(resize); resize = setTimeout(() => this.drawAll(), 100); });

    let stored = null;
    try { stored = sessionStorage.getItem(KEY_STORAGE); } catch { /* storage off */ }
    this.drawAll();
    if (stored) {
      $('api-key').value = stored;
      this.useKey(stored);
    } else {
      $('api-key').focus();
    }
  }

  setStatus(state, text = state) {
    const el = this.$('console-status');
    el.textContent = text;
    el.dataset.state = state;
  }

  saveKey() {
    const key = this.$('api-key').value.trim();
    if (!key) { this.setStatus('idle', 'no key'); return; }
    try { sessionStorage.setItem(KEY_STORAGE, key); } catch { /* storage off: the page keeps it */ }
    this.useKey(key);
  }

  useKey(key) {
    this.key = key;
    this.generation += 1;
    clearTimeout(this.timer);
    this.setStatus('pending', 'connecting…');
    this.poll(this.generation);
  }

  /** A request to the server API with the key: {ok, status, body}. */
  async api(method, path, body) {
    if (!this.key) return { ok: false, status: 0, body: { message: 'enter the API key first' } };
    const headers = { Authorization: `Bearer ${this.key}`, Accept: 'application/json' };
    const init = { method, headers, cache: 'no-store' };
    if (body !== undefined) { headers['Content-Type'] = 'application/json'; init.body = JSON.stringify(body); }
    const controller = typeof AbortController === 'function' ? new AbortController() : null;
    const abort = controller ? setTimeout(() => controller.abort(), 5000) : null;
    if (controller) init.signal = controller.signal;
    try {
      const response = await fetch(path, init);
      const text = await response.text();
      let parsed = text;
      try { parsed = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
      return { ok: response.ok, status: response.status, body: parsed };
    } catch (error) {
      const message = error?.name === 'AbortError' ? 'no answer within 5 s' : `unreachable (${error?.message ?? error})`;
      return { ok: false, status: 0, body: { message } };
    } finally {
      clearTimeout(abort);
    }
  }

  async poll(generation) {
    if (generation !== this.generation) return;
    const started = Date.now();
    const answer = await this.api('GET', '/v1/stats');
    if (generation !== this.generation) return;
    let next = 1000;
    if (answer.ok && answer.body && typeof answer.body === 'object') {
      this.setStatus('ok');
      this.addSample(answer.body, Date.now());
    } else if (answer.status === 401) {
      this.setStatus('unauthorized');
      this.previous = null;
      next = 3000;
    } else {
      this.setStatus('error', answer.status ? apiErrorText(answer.status, answer.body) : (answer.body?.message ?? 'unreachable'));
      this.previous = null;
      next = 2000;
    }
    this.timer = setTimeout(() => this.poll(generation), Math.max(100, next - (Date.now() - started)));
  }

  addSample(stats, receivedAt) {
    const sample = sampleFromStats(stats, this.previous, receivedAt);
    this.previous = sample.raw;
    const s = this.series;
    pushPoint(s.connections, sample.connections);
    pushPoint(s.tcp, sample.tcp);
    pushPoint(s.websocket, sample.websocket);
    pushPoint(s.logins, sample.logins);
    pushPoint(s.chats, sample.chats);
    pushPoint(s.p99, sample.p99);

    const $ = this.$;
    $('value-connections').textContent = String(sample.connections);
    $('value-connections').title = `TCP ${sample.tcp}, WebSocket ${sample.websocket}`;
    $('value-logins').textContent = formatValue(sample.logins);
    $('value-chats').textContent = formatValue(sample.chats);
    $('value-p99').textContent = formatValue(sample.p99);
    this.drawAll();

    $('gateway-name').textContent = stats.gateway ?? '—';
    $('gateway-uptime').textContent = stats.uptime_s != null ? formatDuration(stats.uptime_s) : '—';
    $('logged-in').textContent = total(stats.logged_in) != null ? String(total(stats.logged_in)) : '—';

    const broker = stats.broker ?? {};
    const connected = broker.connected === true;
    $('broker-state').textContent = connected ? 'connected' : 'disconnected';
    $('broker-state').dataset.connected = String(connected);
    $('broker-url').textContent = broker.url ?? '';

    const archive = stats.archive;
    const archiveState = $('archive-state');
    if (archive == null) {
      archiveState.textContent = 'none';
      archiveState.dataset.available = '';
      $('archive-detail').textContent = 'no message archive';
    } else {
      const available = archive.available === true;
      archiveState.textContent = available ? 'available' : 'unavailable';
      archiveState.dataset.available = String(available);
      $('archive-detail').textContent = archive.queued != null ? `${archive.queued} queued` : '';
    }
  }

  drawAll() {
    const s = this.series;
    const $ = this.$;
    drawLinePlot($('plot-connections'), [
      { values: s.connections, label: 'total' },
      { values: s.tcp, label: 'TCP' },
      { values: s.websocket, label: 'WebSocket' },
    ], { integer: true });
    drawLinePlot($('plot-logins'), [{ values: s.logins, label: 'logins/s' }]);
    drawLinePlot($('plot-chats'), [{ values: s.chats, label: 'chats/s' }]);
    drawLinePlot($('plot-p99'), [{ values: s.p99, label: 'p99 ms' }]);
  }

  showResult(id, ok, text) {
    const el = this.$(id);
    el.textContent = text;
    el.dataset.ok = String(ok);
  }

  async lookupPresence() {
    const $ = this.$;
    const user = $('presence-user').value.trim();
    const list = $('presence-result');
    if (!user) return;
    $('presence-lookup').disabled = true;
    $('presence-summary').textContent = 'looking up…';
    $('presence-summary').dataset.ok = '';
    list.replaceChildren();
    const answer = await this.api('GET', `/v1/users/${encodeURIComponent(user)}/presence`);
    $('presence-lookup').disabled = false;
    if (!answer.ok) {
      this.showResult('presence-summary', false, answer.status ? apiErrorText(answer.status, answer.body) : answer.body.message);
      return;
    }
    const p = answer.body ?? {};
    const devices = Array.isArray(p.devices) ? p.devices : [];
    const online = p.online ?? devices.some((d) => d.status === 'online');
    this.showResult('presence-summary', true,
      devices.length === 0 ? `${p.user ?? user}: no device has logged in`
        : `${p.user ?? user} is ${online ? 'online' : 'offline'}${p.last_seen ? `, last change ${formatClock(p.last_seen)}` : ''}`);
    for (const d of devices) {
      const li = this.doc.createElement('li');
      li.dataset.device = d.device ?? '';
      li.dataset.status = d.status ?? '';
      const name = this.doc.createElement('span');
      name.className = 'device';
      name.textContent = d.device ?? '';
      const status = this.doc.createElement('span');
      status.className = 'device-status';
      status.textContent = d.status ?? '';
      const detail = this.doc.createElement('span');
      detail.className = 'device-detail';
      detail.textContent = [d.since ? `since ${formatClock(d.since)}` : '', d.gateway ? `on ${d.gateway}` : ''].filter(Boolean).join(' ');
      li.append(name, status, detail);
      list.append(li);
    }
  }

  async kick() {
    const $ = this.$;
    const user = $('kick-user').value.trim();
    if (!user) return;
    const body = {};
    const device = $('kick-device').value.trim();
    const reason = $('kick-reason').value.trim();
    if (device) body.device = device;
    if (reason) body.reason = reason;
    if ($('kick-revoke').checked) body.revoke_tokens = true;
    $('kick-button').disabled = true;
    this.showResult('kick-result', true, 'sending…');
    const answer = await this.api('POST', `/v1/users/${encodeURIComponent(user)}/disconnect`, body);
    $('kick-button').disabled = false;
    if (!answer.ok) {
      this.showResult('kick-result', false, answer.status ? apiErrorText(answer.status, answer.body) : answer.body.message);
      return;
    }
    const r = answer.body ?? {};
    const who = r.device ? `${r.user ?? user}/${r.device}` : `every device of ${r.user ?? user}`;
    const revoked = r.revoked_before != null ? `; tokens issued before ${formatClock(r.revoked_before * 1000)} refused` : '';
    this.showResult('kick-result', true, `Disconnected ${who} (${answer.status}): ${r.reason ?? ''}${revoked}`);
  }

  async sendSystemMessage() {
    const $ = this.$;
    const to = $('system-to').value.trim();
    const text = $('system-text').value;
    if (!to || !text) return;
    $('system-send').disabled = true;
    this.showResult('system-result', true, 'sending…');
    const answer = await this.api('POST', `/v1/users/${encodeURIComponent(to)}/messages`, { id: newMessageID(), text });
    $('system-send').disabled = false;
    if (!answer.ok) {
      this.showResult('system-result', false, answer.status ? apiErrorText(answer.status, answer.body) : answer.body.message);
      return;
    }
    const r = answer.body ?? {};
    this.showResult('system-result', true,
      `Accepted (${answer.status}): message ${r.id ?? ''} from ${r.from ?? 'system'} to ${r.to ?? to}${r.server_time ? ` at ${formatClock(r.server_time)}` : ''}`);
    $('system-text').value = '';
  }
}

/** A local clock time of a Unix millisecond time. */
function formatClock(ms) {
  const d = new Date(Number(ms));
  if (Number.isNaN(d.getTime())) return '';
  return d.toLocaleString();
}

if (typeof document !== 'undefined' && document.getElementById('plot-connections')) {
  globalThis.imgwConsole = new ConsolePage(document);
}
