// graph.js: the service graph: who calls whom through a gateway, read
// from its admin API's /v1/calls/graph (its call log): services as nodes,
// calls as edges with requests/s, error rate, p99 and mutual TLS, over a
// window, redrawn every 2 s. No Prometheus involved.
import { html, useState } from '../vendor/lib.js';
import { gateways, gatewayAddr, gateway } from './api.js';
import { usePoll, ErrorBox, Empty, fmtMs, fmtNum, fmtPct } from './ui.js';
import { errorThreshold } from './calls.js';

const windows = [['1m', 60], ['5m', 300], ['15m', 900], ['1h', 3600]];

// layout puts each node in a column by its longest path from a caller no
// edge reaches (cycles are cut where they close), rows in name order.
export function layout(nodes, edges) {
  const out = new Map(nodes.map(n => [n.id, []]));
  for (const e of edges) if (e.source !== e.destination) out.get(e.source)?.push(e.destination);
  const depth = new Map();
  const visit = (id, d, path) => {
    if (path.has(id) || (depth.get(id) ?? -1) >= d) return;
    depth.set(id, d);
    path.add(id);
    for (const n of out.get(id) || []) visit(n, d + 1, path);
    path.delete(id);
  };
  const reached = new Set(edges.filter(e => e.source !== e.destination).map(e => e.destination));
  for (const n of nodes) if (!reached.has(n.id)) visit(n.id, 0, new Set());
  for (const n of nodes) if (!depth.has(n.id)) visit(n.id, 0, new Set());
  const cols = [];
  for (const n of nodes) (cols[depth.get(n.id)] ||= []).push(n.id);
  const pos = new Map();
  cols.forEach((ids, c) => ids.sort().forEach((id, r) => pos.set(id, { x: c, y: r })));
  return { pos, columns: cols.length, rows: Math.max(1, ...cols.map(c => c.length)) };
}

// health is an edge's color class: by its error rate, as the Calls page
// flags endpoints.
const health = e => e.error_rate >= errorThreshold ? 'bad' : e.errors > 0 ? 'warn' : 'ok';

export function GraphPage({ params }) {
  const gws = usePoll(gateways, 10000);
  const [gwID, setGw] = useState(params.get('gateway') || '');
  const [win, setWin] = useState(params.get('window') || '1m');
  const list = gws.data || [];
  const gw = list.find(g => g.id === gwID) || list[0];
  const base = gw ? gatewayAddr(gw) : '';
  if (gws.data && !list.length) {
    return html`<h1>Service graph</h1><${ErrorBox} error=${gws.error} />
      <${Empty}>No gateway is registered: the graph is drawn from a gateway's call log.</${Empty}>`;
  }
  return html`
    <h1>Service graph</h1>
    <${ErrorBox} error=${gws.error} />
    <div class="toolbar center">
      <a href="#/calls" id="graph-calls-link">Calls</a>
      <label>Gateway <select id="graph-gateway" value=${gw ? gw.id : ''} onChange=${e => setGw(e.currentTarget.value)}>
        ${list.map(g => html`<option value=${g.id}>${g.metadata['sextant.node'] || g.id} (${g.metadata['sextant.admin']})</option>`)}</select></label>
      <label>Window <select id="graph-window" value=${win} onChange=${e => setWin(e.currentTarget.value)}>
        ${windows.map(([w]) => html`<option value=${w}>last ${w}</option>`)}</select></label>
      <span class="muted">callers by their mutual TLS identity (namespace/service account); <code>unknown</code>: no client certificate</span>
    </div>
    ${base && html`<${Graph} key=${base + win} base=${base} win=${win} />`}`;
}

function Graph({ base, win }) {
  const g = usePoll(signal => gateway(base, '/v1/calls/graph', { window: win }, signal), 2000);
  if (!g.data) return html`<${ErrorBox} error=${g.error} />`;
  const { nodes, edges } = g.data;
  if (!edges.length) return html`<${ErrorBox} error=${g.error} /><${Empty}>No calls through this gateway in the last ${win}.</${Empty}>`;
  const { pos, columns, rows } = layout(nodes, edges);
  // Columns leave room between nodes for an edge's two lines of figures.
  const NW = 130, NH = 40, W = NW + 140, H = 100, PAD = 16;
  const width = columns * W + PAD * 2 - (W - NW), height = rows * H + PAD * 2 - (H - NH);
  const at = id => { const p = pos.get(id); return { x: PAD + p.x * W, y: PAD + p.y * H }; };
  const byID = new Map(nodes.map(n => [n.id, n]));
  return html`
    <${ErrorBox} error=${g.error} />
    <div class="graph-box">
    <svg id="service-graph" width="100%" style=${`max-width: ${width}px; height: auto`} viewBox=${`0 0 ${width} ${height}`} role="img" aria-label="service graph">
      <defs>${['ok', 'warn', 'bad'].map(k => html`<marker id=${'arrow-' + k} class=${'edge-' + k} viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" /></marker>`)}</defs>
      ${edges.map(e => {
        const a = at(e.source), b = at(e.destination), k = health(e);
        const x1 = a.x + NW, y1 = a.y + NH / 2, x2 = b.x, y2 = b.y + NH / 2;
        const mx = (x1 + x2) / 2, my = (y1 + y2) / 2;
        return html`<g class=${'edge edge-' + k} data-source=${e.source} data-destination=${e.destination} data-error-rate=${e.error_rate} data-mtls=${e.mtls}>
          <a href=${'#/calls?service=' + encodeURIComponent(e.destination)}>
          <path d=${`M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}`} class=${e.mtls >= 1 ? '' : 'plain'} marker-end=${`url(#arrow-${k})`} />
          <text x=${mx} y=${my - 7} class="edge-label">${fmtNum(e.requests_per_s)}/s · ${fmtPct(e.errors, e.requests)} err</text>
          <text x=${mx} y=${my + 15} class="edge-label">p99 ${fmtMs(e.p99_ms)}${e.mtls >= 1 ? ' · mTLS' : e.mtls > 0 ? ' · ' + fmtPct(e.mtls, 1) + ' mTLS' : ''}</text>
          </a></g>`;
      })}
      ${nodes.map(n => {
        const p = at(n.id), bad = n.requests >= 10 && n.errors / n.requests >= errorThreshold;
        return html`<g class=${'node' + (bad ? ' node-bad' : '') + (n.id === 'unknown' ? ' node-unknown' : '')} data-id=${n.id} transform=${`translate(${p.x} ${p.y})`}>
          <rect width=${NW} height=${NH} rx="6" /><text x=${NW / 2} y=${NH / 2 + 4}>${n.id}</text></g>`;
      })}
    </svg></div>
    <p class="muted">An edge is red from ${fmtPct(errorThreshold, 1)} errors, amber with any; dashed: calls without mutual TLS. Click an edge for its calls. Rates over the window; updated every 2 s (last at ${new Date(g.data.to).toLocaleTimeString('en-GB')}).</p>`;
}
