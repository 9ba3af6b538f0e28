// ui.js: the pieces every page uses: a virtualised list, dialogs, charts,
// polling, formatting.
import { html, useState, useEffect, useRef, useLayoutEffect, uPlot } from '../vendor/lib.js';

// ---- dialogs -------------------------------------------------------------

let setModals = () => {};

// ModalHost renders the open dialogs, the newest on top (a confirmation
// over the form it confirms); the app mounts it once.
export function ModalHost() {
  const [stack, setStack] = useState([]);
  setModals = setStack;
  return stack.map(m => html`<div class="modal-back" key=${m.key} onClick=${e => e.target === e.currentTarget && m.close(undefined)}>
    <div class="modal" role="dialog" aria-modal="true" aria-label=${m.title}>
      <h2>${m.title}</h2>
      ${m.render(m.close)}
    </div>
  </div>`);
}

let modalKey = 0;

// openModal shows render(close) and resolves with what close is given.
export function openModal(title, render) {
  return new Promise(resolve => {
    const m = { title, render, key: ++modalKey };
    m.close = v => { setModals(s => s.filter(x => x !== m)); resolve(v); };
    setModals(s => [...s, m]);
  });
}

// confirm asks before an action; resolves true to go ahead.
export function confirm(title, body, action = 'Confirm', danger = false) {
  return openModal(title, close => html`
    <div class="confirm-body">${body}</div>
    <div class="actions">
      <button type="button" onClick=${() => close(false)}>Cancel</button>
      <button type="button" class=${danger ? 'danger' : 'primary'} id="confirm-ok" onClick=${() => close(true)}>${action}</button>
    </div>`).then(v => v === true);
}

// ---- lists ---------------------------------------------------------------

// VirtualList renders only the rows in view (plus a margin), so a list of
// 10,000 or 1,000,000 rows costs the same DOM as one of 40.
export function VirtualList({ items, rowHeight = 32, height = 480, row, cls = '' }) {
  const box = useRef(null);
  const [top, setTop] = useState(0);
  useLayoutEffect(() => {
    // A shorter list (a filter) may leave the scroll past its end.
    const el = box.current;
    if (el && el.scrollTop > items.length * rowHeight) { el.scrollTop = 0; setTop(0); }
  }, [items.length]);
  const view = Math.min(height, Math.max(items.length * rowHeight, rowHeight));
  const first = Math.max(0, Math.floor(top / rowHeight) - 8);
  const last = Math.min(items.length, Math.ceil((top + view) / rowHeight) + 8);
  const rows = [];
  for (let i = first; i < last; i++) {
    rows.push(html`<div class="vrow" style=${`top:${i * rowHeight}px;height:${rowHeight}px`} key=${i}>${row(items[i], i)}</div>`);
  }
  let frame = 0;
  const onScroll = e => {
    const t = e.currentTarget.scrollTop;
    cancelAnimationFrame(frame);
    frame = requestAnimationFrame(() => setTop(t));
  };
  return html`<div class=${'vlist ' + cls} ref=${box} style=${`height:${view}px`} onScroll=${onScroll} data-rows=${items.length}>
    <div class="vspace" style=${`height:${items.length * rowHeight}px`}>${rows}</div>
  </div>`;
}

// ---- effects -------------------------------------------------------------

// usePoll runs fn(signal) now and every ms while the page is shown; fn's
// result lands in data, its failure in error.
export function usePoll(fn, ms, deps = []) {
  const [state, setState] = useState({ data: null, error: null, loading: true });
  useEffect(() => {
    const ctl = new AbortController();
    let timer = 0;
    const tick = async () => {
      try {
        const data = await fn(ctl.signal);
        if (!ctl.signal.aborted) setState({ data, error: null, loading: false });
      } catch (e) {
        if (!ctl.signal.aborted) setState(s => ({ data: s.data, error: e, loading: false }));
      }
      if (!ctl.signal.aborted && ms > 0) timer = setTimeout(tick, document.hidden ? ms * 5 : ms);
    };
    setState(s => ({ ...s, loading: true }));
    tick();
    return () => { ctl.abort(); clearTimeout(timer); };
  }, deps);
  return state;
}

// ---- charts --------------------------------------------------------------

const palette = ['#2563eb', '#d97706', '#dc2626', '#059669', '#7c3aed', '#0891b2', '#db2777', '#4b5563'];
export const color = i => palette[i % palette.length];

// Chart draws data ([xs, ys1, ys2, ...]) with uPlot; series: [{label,
// unit}], x in unix seconds. The chart is rebuilt when its series change
// and given new data otherwise.
// percent: the y axis runs from 0 to at most 100, at least to 5, its
// ticks written with "%" (a rate of 0 everywhere drew 0..1, read as a
// ratio).
export function Chart({ title, series, data, height = 220, bars = false, xTime = true, xLabels = null, yLabel = '', percent = false, id }) {
  const box = useRef(null);
  const plot = useRef(null);
  // Few values (a window with calls in one step): draw them as points too.
  const sparse = !bars && data.slice(1).every(ys => ys.filter(v => v != null).length < 40);
  const shape = series.map(s => s.label).join('|') + (bars ? '|bars' : '') + (sparse ? '|sparse' : '');
  useEffect(() => {
    const el = box.current;
    const opts = {
      width: Math.max(el.clientWidth, 300), height,
      scales: { x: { time: xTime }, ...(percent ? { y: { range: (u, lo, hi) => [0, Math.min(100, Math.max(5, (hi || 0) * 1.1))] } } : {}) },
      legend: { live: true },
      hooks: { draw: [u => { el.dataset.yMax = u.scales.y.max; }] }, // for the browser tests
      cursor: { drag: { x: false, y: false } },
      axes: [{ stroke: '#4b5563', grid: { stroke: '#e5e7eb' }, ...(xTime ? { values: timeTicks, incrs: timeIncrs, space: 70 } : {}) },
             { stroke: '#4b5563', grid: { stroke: '#e5e7eb' }, label: yLabel, size: 60,
               ...(percent ? { values: (u, vals) => { const l = vals.map(v => fmtNum(v) + '%'); el.dataset.yTicks = l.join('|'); return l; } } : {}) }],
      series: [{ label: xTime ? 'time' : 'x', value: xTime ? (u, v) => v == null ? '–' : when(v * 1000) : undefined }, ...series.map((s, i) => ({
        label: s.label, stroke: s.color || color(i), width: 2,
        fill: bars ? (s.color || color(i)) + '99' : undefined,
        // Several bar series stand side by side in their category.
        paths: bars ? uPlot.paths.bars({ size: [0.8 / series.length, 40], align: series.length === 1 ? 0 : i === 0 ? -1 : 1 }) : undefined,
        points: { show: sparse, size: 6 },
        value: (u, v) => v == null ? '–' : fmtNum(v) + (s.unit || ''),
      }))],
    };
    if (xLabels) {
      // Categories (histogram buckets): x is their index.
      opts.scales.x = { time: false, range: () => [-0.5, xLabels.length - 0.5] };
      // Every step-th category is labelled, step chosen for the plot's
      // width, so that labels do not overlap.
      opts.axes[0].values = (u, vals) => vals.map(v => Number.isInteger(v) ? (xLabels[v] ?? '') : '');
      opts.axes[0].splits = u => {
        const widest = Math.max(...xLabels.map(l => l.length)) * 7 + 12; // px, at the axis' 12 px font
        const per = u.bbox.width / devicePixelRatio / xLabels.length;
        const step = per > 0 ? Math.max(1, Math.ceil(widest / per)) : 1;
        const out = xLabels.map((_, i) => i).filter(i => i % step === 0);
        u.root.parentElement.dataset.xTicks = out.map(i => xLabels[i]).join('|');
        return out;
      };
      opts.series[0].value = (u, v) => v == null ? '–' : xLabels[v];
    }
    plot.current = new uPlot(opts, data, el);
    const ro = new ResizeObserver(() => plot.current && plot.current.setSize({ width: Math.max(el.clientWidth, 300), height }));
    ro.observe(el);
    return () => { ro.disconnect(); plot.current.destroy(); plot.current = null; };
  }, [shape, height]);
  useEffect(() => { if (plot.current) plot.current.setData(data); }, [data]);
  return html`<figure class="chart" id=${id}>
    ${title && html`<figcaption>${title}</figcaption>`}
    <div ref=${box} class="chart-box" data-points=${data[0] ? data[0].length : 0}></div>
  </figure>`;
}

// ---- small pieces --------------------------------------------------------

export function ErrorBox({ error, prefix = '' }) {
  if (!error) return null;
  const where = error.field ? html` <code>${error.field}</code>` : '';
  return html`<div class="error" role="alert">${prefix}${error.message}${where}</div>`;
}

export function Badge({ kind, children }) {
  return html`<span class=${'badge ' + kind}>${children}</span>`;
}

// instanceState is what a person checks first: isolated, unhealthy, weight 0.
export function instanceState(i) {
  if (i.isolated) return ['isolated', 'isolated'];
  if (!i.healthy) return ['bad', 'unhealthy'];
  if (i.weight === 0) return ['warn', 'weight 0'];
  return ['ok', 'healthy'];
}

// instanceSource is where an instance comes from: the system that syncs
// it (metadata sextant.io/owner, set by the server: "kubernetes"), a
// Consul API client (the reserved consul-node label), else Sextant's own
// API (the SDK, the CLI, curl: one door, not told apart).
export function instanceSource(i) {
  const m = i.metadata || {};
  const owner = m['sextant.io/owner'];
  if (owner) return owner === 'kubernetes' ? 'Kubernetes' : owner;
  if (m['consul-node'] !== undefined) return 'Consul API';
  return 'Sextant API';
}

// sourceCounts is "Kubernetes 200, Sextant API 1": instances per source,
// most first.
export function sourceCounts(list) {
  const c = new Map();
  for (const i of list) { const s = instanceSource(i); c.set(s, (c.get(s) || 0) + 1); }
  return [...c].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).map(([s, n]) => s + ' ' + n).join(', ');
}

export function Stat({ label, value, sub, kind = '' }) {
  return html`<div class=${'stat ' + kind}><div class="stat-value">${value}</div><div class="stat-label">${label}</div>${sub && html`<div class="stat-sub">${sub}</div>`}</div>`;
}

export function Empty({ children }) { return html`<p class="empty">${children}</p>`; }

// count is "1 node", "2 nodes": every count the console shows goes
// through it (many defaults to one + 's').
export function count(n, one, many = one + 's') {
  return `${fmtNum(n)} ${n === 1 ? one : many}`;
}

export function fmtNum(v) {
  if (v == null || Number.isNaN(v)) return '–';
  const a = Math.abs(v);
  if (Number.isInteger(v)) return v.toLocaleString('en');
  if (a >= 100) return Math.round(v).toLocaleString('en');
  if (a >= 10) return v.toFixed(1);
  if (a >= 1) return v.toFixed(2);
  if (a === 0) return '0';
  return v.toPrecision(2);
}

// fmtPct is part/whole as a percentage ("33.3%"), "–" with no whole.
export function fmtPct(part, whole) {
  return whole ? fmtNum(100 * part / whole) + '%' : '–';
}

// nbsp joins a figure to its unit: "12.5 ms" never wraps between them.
export const nbsp = '\u00a0';

export function fmtMs(ms) {
  if (ms == null) return '–';
  if (ms >= 1000) return (ms / 1000).toFixed(ms >= 10000 ? 0 : 1) + nbsp + 's';
  if (ms >= 1) return ms.toFixed(ms >= 100 ? 0 : 1) + nbsp + 'ms';
  return Math.round(ms * 1000) + nbsp + 'µs';
}

export function ago(t) {
  if (!t) return '–';
  const s = (Date.now() - new Date(t).getTime()) / 1000;
  // One unbreakable piece: "12 s ago" never wraps inside.
  if (s < 1) return 'just' + nbsp + 'now';
  if (s < 60) return Math.floor(s) + nbsp + 's' + nbsp + 'ago';
  if (s < 3600) return Math.floor(s / 60) + nbsp + 'min' + nbsp + 'ago';
  if (s < 86400) return Math.floor(s / 3600) + nbsp + 'h' + nbsp + 'ago';
  return count(Math.floor(s / 86400), 'day').replace(' ', nbsp) + nbsp + 'ago';
}

const pad = n => String(n).padStart(2, '0');

// when is the one date format of the console: "2026-11-26 19:40:05",
// local time, 24 hours (tables, records, chart legends; chart axes show
// its time part).
export function when(t) {
  if (t == null || t === '') return '–';
  const d = new Date(t);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${clock(d, true)}`;
}

function clock(d, seconds) {
  return `${pad(d.getHours())}:${pad(d.getMinutes())}` + (seconds ? ':' + pad(d.getSeconds()) : '');
}

// timeTicks labels a time axis in when's format: the time of day, with
// seconds when ticks are less than a minute apart, and the date at a
// tick that starts a new day.
function timeTicks(u, splits, axis, space, incr) {
  let day = '';
  const out = splits.map(s => {
    const d = new Date(s * 1000);
    const date = when(d).slice(0, 10);
    const t = clock(d, incr < 60);
    if (date === day) return t;
    const first = day === '';
    day = date;
    return first && incr < 86400 ? t : date.slice(5) + ' ' + t;
  });
  u.root.parentElement.dataset.xTicks = out.join('|'); // for the browser tests
  return out;
}

// Time ticks are whole seconds at least, far enough apart for HH:MM:SS.
const timeIncrs = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800];

// kv renders metadata or labels as k=v chips.
export function KV({ map }) {
  const keys = Object.keys(map || {}).sort();
  if (!keys.length) return html`<span class="muted">none</span>`;
  return keys.map(k => html`<span class="kv" title=${k + '=' + map[k]}>${k}=${map[k]}</span>`);
}

export function link(hash) { return '#' + hash; }
