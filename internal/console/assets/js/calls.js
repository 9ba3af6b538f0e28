// calls.js: calls through the gateways, read from each gateway's admin API
// (found through the registry: instances with sextant.role=gateway and
// their sextant.admin address). Latency percentiles, error rate and
// requests per second over a window, and the slowest calls in it.
import { html, useState, useMemo } from '../vendor/lib.js';
import { gateways, gatewayAddr, gateway, enc } from './api.js';
import { usePoll, ErrorBox, Chart, Badge, Stat, fmtMs, fmtNum, fmtPct, instanceState, when, Empty, count } from './ui.js';

// An endpoint (or service) whose share of errors is at least this, over
// at least minCalls calls, is flagged here and on the Overview.
export const errorThreshold = 0.05;
export const minCalls = 10;

// highErrors tells whether {count, errors} is flagged.
export const highErrors = s => s.count >= minCalls && s.errors / s.count >= errorThreshold;

const windows = [['5m', 300], ['15m', 900], ['1h', 3600], ['6h', 21600], ['24h', 86400]];

function setParams(p) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(p)) if (v) q.set(k, v);
  history.replaceState(null, '', '#/calls?' + q.toString());
}

export function CallsPage({ params }) {
  const gws = usePoll(gateways, 10000);
  const [gwID, setGw] = useState(params.get('gateway') || '');
  const [win, setWin] = useState(params.get('window') || '15m');
  const [svc, setSvc] = useState(params.get('service') || '');
  const list = gws.data || [];
  const gw = list.find(g => g.id === gwID) || list[0];
  const base = gw ? gatewayAddr(gw) : '';
  const pick = p => { const n = { gateway: gw && gw.id, window: win, service: svc, ...p }; setParams(n); };
  if (gws.data && !list.length) {
    return html`<h1>Calls</h1><${ErrorBox} error=${gws.error} />
      <${Empty}>No gateway is registered. Start one with <code>sextant gateway --registry http://${location.host}</code>:
      it registers as service <code>sextant-gateway</code> with its admin address, and its calls show here.</${Empty}>`;
  }
  return html`
    <h1>Calls</h1>
    <${ErrorBox} error=${gws.error} />
    <div class="toolbar center">
      <label>Gateway <select id="calls-gateway" value=${gw ? gw.id : ''} onChange=${e => { setGw(e.currentTarget.value); setSvc(''); pick({ gateway: e.currentTarget.value, service: '' }); }}>
        ${list.map(g => html`<option value=${g.id}>${g.metadata['sextant.node'] || g.id} (${g.metadata['sextant.admin']})</option>`)}</select></label>
      ${gw && html`<${Badge} kind=${instanceState(gw)[0]}>${instanceState(gw)[1]}</${Badge}>`}
      <a href=${'#/graph' + (gw ? '?gateway=' + encodeURIComponent(gw.id) : '')} id="calls-graph-link">Service graph</a>
      <label>Window <select id="calls-window" value=${win} onChange=${e => { setWin(e.currentTarget.value); pick({ window: e.currentTarget.value }); }}>
        ${windows.map(([w]) => html`<option value=${w}>last ${w}</option>`)}</select></label>
    </div>
    ${base && html`<${GatewayCalls} key=${base + win} base=${base} seconds=${(windows.find(w => w[0] === win) || windows[1])[1]}
      svc=${svc} setSvc=${s => { setSvc(s); pick({ service: s }); }} traceURL=${gw.metadata['sextant.trace-url'] || ''} />`}`;
}

function GatewayCalls({ base, seconds, svc, setSvc, traceURL }) {
  // Every service's totals over the window: one step covering it.
  const summary = usePoll(async signal => {
    const { services } = await gateway(base, '/v1/calls/services', {}, signal);
    const to = Date.now();
    const from = to - seconds * 1000;
    return Promise.all(services.map(async s => {
      const st = await gateway(base, '/v1/calls/stats', { service: s, from, to, step: seconds + 's' }, signal);
      const step = st.steps.find(x => x.count) || { p50_ms: null, p90_ms: null, p99_ms: null };
      return { service: s, count: st.count, errors: st.errors, p50: step.p50_ms, p90: step.p90_ms, p99: step.p99_ms };
    }));
  }, 5000, [base, seconds]);
  const rows = summary.data || [];
  const current = svc && rows.some(r => r.service === svc) ? svc : (rows[0] && rows[0].service);
  return html`
    <${ErrorBox} error=${summary.error} prefix=${`Gateway admin API ${base}: `} />
    ${summary.data && rows.length === 0 && html`<${Empty}>This gateway has recorded no calls yet.</${Empty}>`}
    ${rows.length > 0 && html`<table id="calls-services"><thead><tr><th>service</th><th>calls</th><th>req/s</th><th>errors</th><th>p50</th><th>p90</th><th>p99</th></tr></thead>
      <tbody>${rows.map(r => html`<tr class=${'clickable' + (r.service === current ? ' selected' : '')} data-service=${r.service} onClick=${() => setSvc(r.service)}>
        <td class="strong">${r.service}</td><td>${r.count}</td><td>${fmtNum(r.count / seconds)}</td>
        <td class=${r.errors ? 'bad-text' : ''}>${fmtPct(r.errors, r.count)}</td>
        <td>${fmtMs(r.p50)}</td><td>${fmtMs(r.p90)}</td><td>${fmtMs(r.p99)}</td></tr>`)}</tbody></table>`}
    ${current && html`<${ServiceCalls} key=${current} base=${base} seconds=${seconds} service=${current} traceURL=${traceURL} />`}`;
}

function ServiceCalls({ base, seconds, service, traceURL }) {
  const { data, error } = usePoll(async signal => {
    const to = Date.now();
    const from = to - seconds * 1000;
    const stepS = Math.max(1, Math.round(seconds / 60));
    const st = await gateway(base, '/v1/calls/stats', { service, from, to, step: stepS + 's' }, signal);
    // The slowest calls: those above the window's p99, sorted.
    const whole = await gateway(base, '/v1/calls/stats', { service, from, to, step: seconds + 's' }, signal);
    const p99 = (whole.steps.find(x => x.count) || {}).p99_ms || 0;
    const [slow, eps] = await Promise.all([
      gateway(base, '/v1/calls', { service, from, to, min_latency: Math.floor(p99 * 1000), limit: 2000 }, signal),
      gateway(base, '/v1/calls/endpoints', { service, from, to }, signal)]);
    slow.calls.sort((a, b) => b.latency_us - a.latency_us);
    return { st, stepS, slow: slow.calls.slice(0, 20), truncated: slow.truncated, endpoints: eps.endpoints };
  }, 5000, [base, seconds, service]);
  const series = useMemo(() => {
    if (!data) return null;
    const s = data.st.steps;
    const xs = s.map(x => new Date(x.start).getTime() / 1000);
    const v = f => s.map(x => x.count ? f(x) : null);
    return {
      latency: [xs, v(x => x.p50_ms), v(x => x.p90_ms), v(x => x.p99_ms)],
      errors: [xs, v(x => 100 * x.errors / x.count)],
      rps: [xs, s.map(x => x.count / data.stepS)],
    };
  }, [data]);
  if (!data) return html`<${ErrorBox} error=${error} />`;
  const { st } = data;
  return html`<section class="service-calls" id="service-calls">
    <h2>${service}</h2>
    <${ErrorBox} error=${error} />
    <div class="stats">
      <${Stat} label="calls in the window" value=${st.count} />
      <${Stat} label="req/s (average)" value=${fmtNum(st.count / seconds)} />
      <${Stat} label="errors" value=${fmtPct(st.errors, st.count)} kind=${st.errors ? 'bad' : ''} />
    </div>
    <div class="charts">
      <${Chart} id="calls-latency" title=${`Latency per ${data.stepS} s`} yLabel="ms"
        series=${[{ label: 'p50', unit: ' ms' }, { label: 'p90', unit: ' ms' }, { label: 'p99', unit: ' ms' }]} data=${series.latency} />
      <${Chart} id="calls-rps" title="Requests per second" yLabel="req/s" series=${[{ label: 'req/s' }]} data=${series.rps} />
      <${Chart} id="calls-errors" title="Error rate (status ≥ 500, no answer, or a gateway reply)" yLabel="%" percent=${true}
        series=${[{ label: 'errors', unit: '%', color: '#dc2626' }]} data=${series.errors} />
    </div>
    <h3>Endpoints</h3>
    <p class="muted">Flagged: ${fmtPct(errorThreshold, 1)} errors or more, over ${count(minCalls, 'call')} at least.</p>
    <table id="calls-endpoints"><thead><tr><th>endpoint</th><th>calls</th><th>errors</th><th>error rate</th><th>p50</th><th>p99</th></tr></thead>
      <tbody>${data.endpoints.map(e => html`<tr data-endpoint=${e.endpoint} class=${highErrors(e) ? 'flagged' : ''}>
        <td class="mono">${e.endpoint || html`<span class="muted">none picked</span>`}</td><td>${fmtNum(e.count)}</td><td>${fmtNum(e.errors)}</td>
        <td class=${e.errors ? 'bad-text' : ''}>${fmtPct(e.errors, e.count)}${highErrors(e) ? html` <${Badge} kind="bad">high</${Badge}>` : ''}</td>
        <td>${fmtMs(e.p50_ms)}</td><td>${fmtMs(e.p99_ms)}</td></tr>`)}</tbody></table>
    <h3>Slowest calls in the window</h3>
    ${data.slow.length === 0 ? html`<p class="muted">No calls in the window.</p>` : html`
    <table id="calls-slowest"><thead><tr><th>latency</th><th>start</th><th>endpoint</th><th>status</th><th>route</th><th>subset</th><th>retries</th><th>reason</th><th>trace</th></tr></thead>
      <tbody>${data.slow.map(c => html`<tr><td class="strong">${fmtMs(c.latency_us / 1000)}</td><td>${when(c.start)}</td>
        <td class="mono">${c.endpoint || '–'}</td><td class=${c.status >= 500 ? 'bad-text' : ''}>${c.status}</td>
        <td>${c.route || html`<span class="muted" title="no route name: the VirtualService's http route has no name (or no route matched)">–</span>`}</td>
        <td class="mono">${c.subset || html`<span class="muted" title="no subset: the route's destination is the whole service">–</span>`}</td><td>${c.retries}</td><td>${c.reason || ''}</td>
        <td class="mono">${traceCell(c.trace_id, traceURL)}</td></tr>`)}</tbody></table>`}
  </section>`;
}

// traceCell is a call's trace: a link to the trace viewer the gateway names
// (its --tracing-ui-url, "{trace_id}" replaced), or the id alone; nothing
// for a call whose spans were not exported.
export function traceCell(id, url) {
  if (!id) return html`<span class="muted" title="no trace: the gateway exported no span of this call">–</span>`;
  const short = id.slice(0, 8);
  if (!url) return html`<span title=${id}>${short}</span>`;
  return html`<a class="trace-link" href=${url.split('{trace_id}').join(encodeURIComponent(id))} target="_blank" rel="noopener" title=${id}>${short}</a>`;
}
