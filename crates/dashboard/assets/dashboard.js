// raidkit dashboard: polls /api/dashboard once a second and draws every array. No build step:
// plain JavaScript; charts by uPlot (vendor/, MIT). Everything the server sends is shown with
// textContent (member names are paths a user chose), never as HTML.
'use strict';

(() => {
  const POLL_MS = 1000;
  const WINDOW_SECS = 600;
  const TOKEN_KEY = 'raidkit-dashboard-token';
  const TOKEN_HEADER = 'X-Raidkit-Token';

  const $ = (id) => document.getElementById(id);
  const cards = new Map(); // array name -> card
  let token = sessionStorage.getItem(TOKEN_KEY) || '';
  let actionsOffered = false;

  // ---- formatting ----
  const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  function bytes(n) {
    if (!isFinite(n) || n <= 0) return '0 B';
    let i = 0;
    while (n >= 1000 && i < UNITS.length - 1) { n /= 1024; i++; }
    return (i === 0 ? n.toFixed(0) : n < 10 ? n.toFixed(2) : n < 100 ? n.toFixed(1) : n.toFixed(0)) + ' ' + UNITS[i];
  }
  // 19660800 -> "18.8M": a member cell's narrow figures.
  function short(n) {
    const text = bytes(n);
    return text === '0 B' ? '0' : text.replace(/ (.)iB$/, '$1').replace(/ B$/, '');
  }
  const perSec = (n) => bytes(n) + '/s';
  function count(n) {
    if (!isFinite(n)) return '0';
    if (n >= 1e6) return (n / 1e6).toFixed(n >= 1e7 ? 0 : 1) + 'M';
    if (n >= 1e3) return (n / 1e3).toFixed(n >= 1e4 ? 0 : 1) + 'k';
    return n >= 10 || Number.isInteger(n) ? n.toFixed(0) : n.toFixed(1);
  }
  function ms(n) {
    if (!isFinite(n) || n <= 0) return '0 ms';
    return n < 1 ? (n * 1000).toFixed(0) + ' µs' : n < 10 ? n.toFixed(2) + ' ms' : n.toFixed(0) + ' ms';
  }
  function duration(secs) {
    secs = Math.round(secs);
    const h = Math.floor(secs / 3600), m = Math.floor((secs % 3600) / 60), s = secs % 60;
    if (h) return `${h}h ${String(m).padStart(2, '0')}m`;
    if (m) return `${m}m ${String(s).padStart(2, '0')}s`;
    return `${s}s`;
  }
  const clock = (unixMs) => new Date(unixMs).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
  const hhmm = (secs) => new Date(secs * 1000).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  const words = (s) => String(s).replace(/_/g, ' ');
  const baseName = (path) => {
    if (/^[a-z+]+:\/\//.test(path)) return path.replace(/^[a-z+]+:\/\//, '');
    const parts = path.split('/');
    return parts[parts.length - 1] || path;
  };

  function el(tag, className, text) {
    const e = document.createElement(tag);
    if (className) e.className = className;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // ---- the member grid ----
  const GLYPH = { active: 'U', replacing: 'U', spare: 'S', faulty: 'F', missing: '_', rebuilding: 'R', replacement_target: 'R' };

  function memberIo(rates) {
    const io = el('div', 'cell-io');
    io.append(el('div', '', `r ${short(rates.read.bytes_per_sec)}/s · w ${short(rates.write.bytes_per_sec)}/s`),
      el('div', '', `${count(rates.read.ops_per_sec + rates.write.ops_per_sec)} IOPS · ${rates.util_percent.toFixed(0)}% busy`));
    return io;
  }

  function renderGrid(card, array) {
    const grid = card.grid;
    const members = array.status.members;
    grid.replaceChildren();
    for (const m of members) {
      const cell = el('div', 'cell');
      cell.setAttribute('role', 'listitem');
      cell.dataset.state = m.state;
      cell.dataset.role = m.role === null ? 'spare' : String(m.role);
      if (m.name) cell.dataset.member = m.name;
      const top = el('div', 'cell-top');
      top.append(el('span', 'cell-role', m.role !== null ? `role ${m.role}` : m.state === 'spare' ? 'spare' : 'no role'), el('span', 'cell-glyph', GLYPH[m.state] || '?'));
      const name = el('div', 'cell-name', m.name ? baseName(m.name) : '(missing)');
      name.title = m.name || 'no member in this role';
      const state = el('div', 'cell-state', words(m.state));
      if (m.state === 'rebuilding' && m.rebuild_offset_bytes !== null && array.status.task) {
        const t = array.status.task;
        state.textContent = `rebuilding ${pct(t.done_bytes, t.total_bytes)}`;
      }
      cell.append(top, name, state);
      const errors = m.read_errors + m.write_errors + m.timeouts;
      if (errors > 0) {
        cell.append(el('div', 'cell-errors', `${m.read_errors} read · ${m.write_errors} write errors · ${m.timeouts} timeouts`));
      }
      if (m.role !== null && array.members[m.role] && m.state !== 'replacement_target') {
        cell.append(memberIo(array.members[m.role]));
      }
      if (actionsOn()) {
        const can = m.role !== null && ['active', 'rebuilding', 'replacing'].includes(m.state) ? 'fail'
          : (m.state === 'faulty' || m.state === 'spare') && m.name ? 'remove' : null;
        if (can) {
          const b = el('button', 'cell-action', can === 'fail' ? 'Fail' : 'Remove');
          b.type = 'button';
          b.addEventListener('click', () => {
            const verb = can === 'fail' ? 'Mark faulty' : 'Remove';
            if (confirm(`${verb} member ${m.name} of array ${array.name}?`)) act(array.name, can, { member: m.name });
          });
          cell.append(b);
        }
      }
      grid.append(cell);
    }
    card.mdstat.textContent = array.sync;
  }

  function pct(done, total) {
    return total > 0 ? `${Math.min(100, (done * 100) / total).toFixed(1)}%` : '0%';
  }

  // ---- the background task ----
  const TASK = { rebuild: 'Rebuilding', replace: 'Replacing', scrub: 'Scrub', repair: 'Scrub with repair', resync: 'Resync', initial_sync: 'Initial sync' };

  function renderTask(card, status) {
    const t = status.task;
    const box = card.task;
    if (!t) {
      box.dataset.kind = 'none';
      card.taskTitle.textContent = 'No background work';
      const s = status.last_scrub;
      card.taskFigures.textContent = s && s.finished
        ? `last scrub: ${count(s.stripes_checked)} stripes, ${s.mismatches} mismatches${s.repaired ? `, ${s.repaired} repaired` : ''}`
        : '';
      card.bar.hidden = true;
      return;
    }
    box.dataset.kind = t.kind;
    let title = TASK[t.kind] || words(t.kind);
    if (t.role !== null && (t.kind === 'rebuild' || t.kind === 'replace')) title += ` role ${t.role}`;
    card.taskTitle.textContent = title;
    const figures = [pct(t.done_bytes, t.total_bytes), `${bytes(t.done_bytes)} of ${bytes(t.total_bytes)}`];
    if (t.paused) figures.push(`paused: ${t.paused}`);
    else {
      if (t.bytes_per_sec) figures.push(perSec(t.bytes_per_sec));
      if (t.eta_secs !== null) figures.push(`ETA ${duration(t.eta_secs)}`);
    }
    card.taskFigures.textContent = figures.join(' · ');
    const p = t.total_bytes > 0 ? Math.min(100, (t.done_bytes * 100) / t.total_bytes) : 0;
    card.bar.hidden = false;
    card.bar.dataset.percent = p.toFixed(1);
    card.bar.setAttribute('role', 'progressbar');
    card.bar.setAttribute('aria-valuenow', p.toFixed(1));
    card.bar.setAttribute('aria-valuemin', '0');
    card.bar.setAttribute('aria-valuemax', '100');
    card.barFill.style.width = `${p}%`;
    card.bar.classList.toggle('paused', !!t.paused);
  }

  // ---- figures ----
  function renderFigures(card, array) {
    const s = array.status;
    const rows = [];
    const c = array.client;
    if (c) rows.push(['Now', `${count(c.read.ops_per_sec + c.write.ops_per_sec)} IOPS · ${c.util_percent.toFixed(0)}% busy · queue ${c.queue_size.toFixed(1)}`]);
    if (s.cache) {
      const k = s.cache;
      if (k.capacity_bytes > 0) {
        const looks = k.hits + k.misses;
        rows.push(['Read cache', `${looks ? ((k.hits * 100) / looks).toFixed(1) : '0'}% hits · ${bytes(k.allocated_bytes)} of ${bytes(k.capacity_bytes)}`]);
      } else rows.push(['Read cache', 'off']);
    }
    if (s.journal) {
      const j = s.journal;
      let text = `${words(j.mode)} · ${bytes(j.used_bytes)} of ${bytes(j.ring_bytes)} used`;
      if (j.unapplied_bytes !== null) text += ` · ${bytes(j.unapplied_bytes)} to apply`;
      if (j.pressure_applies) text += ` · ring full ${j.pressure_applies}×`;
      if (j.volatile) text += ' · volatile!';
      rows.push(['Journal', text]);
    } else rows.push(['Journal', 'none']);
    if (s.bitmap) rows.push(['Bitmap', `${s.bitmap.dirty_regions} of ${count(s.bitmap.regions)} regions dirty`]);
    rows.push(['Background speed', `${perSec(s.speed_limits.min_bytes_per_sec)} – ${perSec(s.speed_limits.max_bytes_per_sec)} per member`]);
    if (s.unsynced_bytes) rows.push(['Unsynced', bytes(s.unsynced_bytes)]);
    rows.push(['Events', String(s.events)]);
    const dl = card.figures;
    dl.replaceChildren();
    for (const [k, v] of rows) {
      const div = el('div', 'figure');
      div.append(el('dt', '', k), el('dd', '', v));
      dl.append(div);
    }
  }

  // ---- charts ----
  const CHARTS = {
    throughput: { read: 'read_bytes_per_sec', write: 'write_bytes_per_sec', fmt: perSec, axis: (v) => bytes(v) },
    iops: { read: 'read_ops_per_sec', write: 'write_ops_per_sec', fmt: count, axis: count },
    latency: { read: 'read_await_ms', write: 'write_await_ms', fmt: ms, axis: ms },
  };

  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }

  function makeChart(figure, kind, data) {
    const spec = CHARTS[kind];
    const plot = figure.querySelector('.plot');
    const axis = cssVar('--muted'), grid = cssVar('--line');
    const opts = {
      width: Math.max(200, plot.clientWidth),
      height: 150,
      legend: { show: false },
      cursor: { drag: { x: false, y: false }, points: { size: 6 } },
      scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(max * 1.1, kind === 'latency' ? 1 : kind === 'iops' ? 10 : 1024 * 1024)] } },
      axes: [
        { stroke: axis, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 }, font: '11px system-ui, sans-serif', size: 32, space: 48, incrs: [15, 30, 60, 120, 300, 600, 1800, 3600], values: (u, vals) => vals.map(hhmm) },
        { stroke: axis, grid: { stroke: grid, width: 1 }, ticks: { show: false }, size: 64, font: '11px system-ui, sans-serif', values: (u, vals) => vals.map(spec.axis) },
      ],
      series: [
        {},
        { label: 'read', stroke: cssVar('--read'), fill: cssVar('--read-fill'), width: 1.5, points: { show: false }, value: (u, v) => (v === null ? '–' : spec.fmt(v)) },
        { label: 'write', stroke: cssVar('--write'), fill: cssVar('--write-fill'), width: 1.5, points: { show: false }, value: (u, v) => (v === null ? '–' : spec.fmt(v)) },
      ],
    };
    plot.replaceChildren();
    return new uPlot(opts, data, plot);
  }

  function chartData(history, spec) {
    return [history.t, history[spec.read], history[spec.write]];
  }

  function appendHistory(card, h) {
    const mine = card.history;
    const last = mine.t.length ? mine.t[mine.t.length - 1] : 0;
    for (let i = 0; i < h.t.length; i++) {
      if (h.t[i] <= last) continue;
      for (const key of Object.keys(mine)) mine[key].push(h[key][i]);
    }
    if (!mine.t.length) return;
    const cutoff = mine.t[mine.t.length - 1] - WINDOW_SECS;
    let drop = 0;
    while (drop < mine.t.length && mine.t[drop] < cutoff) drop++;
    if (drop) for (const key of Object.keys(mine)) mine[key].splice(0, drop);
  }

  function renderCharts(card) {
    const h = card.history;
    const lastIndex = h.t.length - 1;
    for (const [kind, spec] of Object.entries(CHARTS)) {
      const figure = card.charts[kind].figure;
      const data = chartData(h, spec);
      if (!card.charts[kind].plot) card.charts[kind].plot = makeChart(figure, kind, data);
      else card.charts[kind].plot.setData(data);
      const now = figure.querySelector('.now');
      now.replaceChildren();
      if (lastIndex >= 0) {
        now.append(el('span', 'r', spec.fmt(h[spec.read][lastIndex])), el('span', 'w', spec.fmt(h[spec.write][lastIndex])));
      }
    }
  }

  function redrawCharts() {
    for (const card of cards.values()) {
      for (const c of Object.values(card.charts)) {
        if (c.plot) { c.plot.destroy(); c.plot = null; }
      }
      renderCharts(card);
    }
  }

  const resized = new ResizeObserver((entries) => {
    for (const e of entries) {
      const plot = e.target.__plot;
      if (plot && plot.width !== Math.floor(e.contentRect.width)) {
        plot.setSize({ width: Math.max(200, Math.floor(e.contentRect.width)), height: 150 });
      }
    }
  });
  window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change', redrawCharts);

  // ---- one array's card ----
  function makeCard(name) {
    const root = $('array-template').content.firstElementChild.cloneNode(true);
    root.dataset.array = name;
    const card = {
      root,
      grid: root.querySelector('.grid'),
      mdstat: root.querySelector('.mdstat'),
      task: root.querySelector('.task'),
      taskTitle: root.querySelector('.task-title'),
      taskFigures: root.querySelector('.task-figures'),
      bar: root.querySelector('.bar'),
      barFill: root.querySelector('.bar-fill'),
      figures: root.querySelector('.figures'),
      actions: root.querySelector('.actions'),
      charts: {},
      history: { t: [], read_bytes_per_sec: [], write_bytes_per_sec: [], read_ops_per_sec: [], write_ops_per_sec: [], read_await_ms: [], write_await_ms: [], util_percent: [] },
    };
    root.querySelector('.array-name').textContent = name;
    for (const figure of root.querySelectorAll('.chart')) {
      card.charts[figure.dataset.chart] = { figure, plot: null };
    }
    root.querySelector('.add-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const input = root.querySelector('.add-input');
      const member = input.value.trim();
      if (member) act(name, 'add', { member }).then((ok) => { if (ok) input.value = ''; });
    });
    root.querySelector('.scrub-button').addEventListener('click', () => {
      if (confirm(`Start a scrub (check) of array ${name}?`)) act(name, 'scrub', { repair: false });
    });
    $('arrays').append(root);
    return card;
  }

  function renderArray(array) {
    let card = cards.get(array.name);
    if (!card) { card = makeCard(array.name); cards.set(array.name, card); }
    const s = array.status;
    const health = card.root.querySelector('.health');
    health.dataset.health = s.health;
    health.textContent = words(s.health);
    card.root.dataset.health = s.health;
    const roles = s.members.filter((m) => m.role !== null && m.state !== 'replacement_target').length;
    const spares = s.members.filter((m) => m.role === null).length;
    card.root.querySelector('.array-meta').textContent = [
      words(s.level).toUpperCase(),
      bytes(s.size_bytes),
      s.chunk_bytes ? `${bytes(s.chunk_bytes)} chunk` : null,
      `${roles} member${roles === 1 ? '' : 's'}${spares ? ` + ${spares} spare${spares === 1 ? '' : 's'}` : ''}`,
    ].filter(Boolean).join(' · ');
    card.actions.hidden = !actionsOn();
    renderGrid(card, array);
    renderTask(card, s);
    renderFigures(card, array);
    appendHistory(card, array.history);
    renderCharts(card);
    for (const c of Object.values(card.charts)) {
      const plotDiv = c.figure.querySelector('.plot');
      if (c.plot && plotDiv.__plot !== c.plot) { plotDiv.__plot = c.plot; resized.observe(plotDiv); }
    }
  }

  // ---- events ----
  const SEVERITY_LABEL = { critical: 'critical', warning: 'warning', info: 'info' };
  function renderEvents(events) {
    const list = $('events');
    list.replaceChildren();
    if (!events.length) { list.append(el('li', 'muted', 'None yet.')); return; }
    for (const e of events) {
      const li = el('li', 'event');
      li.dataset.severity = e.severity;
      li.dataset.event = e.event;
      const when = el('time', 'event-time', clock(Date.parse(e.time)));
      when.dateTime = e.time;
      const what = el('span', 'event-name', e.event);
      what.title = SEVERITY_LABEL[e.severity] || '';
      const text = el('span', 'event-text', `${e.array}${e.member ? ` · ${baseName(e.member)}` : ''}: ${e.message}`);
      li.append(when, what, text);
      list.append(li);
    }
  }

  // ---- actions ----
  function actionsOn() { return actionsOffered && !!token; }

  function renderMode() {
    const badge = $('mode-badge');
    $('token-form').hidden = !actionsOffered || !!token;
    $('lock-button').hidden = !actionsOn();
    badge.textContent = actionsOn() ? 'actions on' : actionsOffered ? 'locked' : 'read-only';
    badge.dataset.mode = actionsOn() ? 'actions' : 'read-only';
    badge.title = actionsOffered ? '' : 'actions are enabled with raidkit serve --dashboard-token-file';
  }

  function toast(text, bad) {
    const t = $('toast');
    t.textContent = text;
    t.dataset.bad = bad ? 'yes' : 'no';
    t.hidden = false;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => { t.hidden = true; }, 5000);
  }

  async function post(path, body) {
    const r = await fetch(path, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', [TOKEN_HEADER]: token },
      body: JSON.stringify(body),
    });
    let answer = {};
    try { answer = await r.json(); } catch (_) { /* an empty or non-JSON body */ }
    return { ok: r.ok, status: r.status, answer };
  }

  async function act(array, action, body) {
    try {
      const r = await post(`/api/arrays/${encodeURIComponent(array)}/${action}`, body);
      if (r.status === 401) { forgetToken(); toast('The token was refused: unlock again.', true); return false; }
      toast(r.ok ? r.answer.message || 'done' : r.answer.error || `HTTP ${r.status}`, !r.ok);
      poll.now();
      return r.ok;
    } catch (e) {
      toast(`${action} failed: ${e.message}`, true);
      return false;
    }
  }

  function forgetToken() {
    token = '';
    sessionStorage.removeItem(TOKEN_KEY);
    renderMode();
  }

  $('token-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const given = $('token-input').value.trim();
    if (!given) return;
    token = given;
    const r = await post('/api/unlock', {}).catch((e) => ({ ok: false, answer: { error: e.message } }));
    if (!r.ok) { token = ''; toast(r.answer.error || 'The token was refused.', true); return; }
    sessionStorage.setItem(TOKEN_KEY, token);
    $('token-input').value = '';
    renderMode();
    poll.now();
  });
  $('lock-button').addEventListener('click', () => { forgetToken(); poll.now(); });

  // ---- polling ----
  function setLive(ok, text) {
    $('live').dataset.live = ok ? 'live' : 'down';
    $('live-text').textContent = text;
  }

  function sinceMs() {
    let since = Infinity;
    for (const card of cards.values()) {
      const t = card.history.t;
      since = Math.min(since, t.length ? Math.floor(t[t.length - 1] * 1000) : 0);
    }
    return since === Infinity ? 0 : since;
  }

  function render(d) {
    actionsOffered = d.actions;
    renderMode();
    const names = new Set(d.arrays.map((a) => a.name));
    for (const [name, card] of cards) {
      if (!names.has(name)) { card.root.remove(); cards.delete(name); }
    }
    for (const array of d.arrays) renderArray(array);
    $('no-arrays').hidden = d.arrays.length > 0;
    renderEvents(d.events);
    document.title = d.arrays.length === 1 ? `${d.arrays[0].name} · ${words(d.arrays[0].status.health)} · raidkit` : 'raidkit';
  }

  let timer = null, inFlight = false;
  async function poll() {
    clearTimeout(timer);
    if (inFlight) return;
    inFlight = true;
    try {
      const r = await fetch(`/api/dashboard?since=${sinceMs()}`, { cache: 'no-store' });
      if (!r.ok) throw new Error(`HTTP ${r.status}`);
      const d = await r.json();
      render(d);
      setLive(true, `live · ${clock(d.unix_ms)}`);
    } catch (e) {
      setLive(false, `no answer (${e.message}); retrying`);
    } finally {
      inFlight = false;
      timer = setTimeout(poll, POLL_MS);
    }
  }
  poll.now = () => setTimeout(poll, 150);
  document.addEventListener('visibilitychange', () => { if (!document.hidden) poll(); });
  poll();
})();
