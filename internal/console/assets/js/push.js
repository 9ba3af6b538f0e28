// push.js: push status (subscribers, versions sent and ACKed per type, NACK
// texts) and push latency from the server's sextant_push_* histograms.
import { html, useRef, useState, useEffect } from '../vendor/lib.js';
import { get } from './api.js';
import { usePoll, ErrorBox, Badge, Chart, ago, fmtMs, Stat, count, when, nbsp } from './ui.js';

// pushState is `sextant push status`'s column: NACKED, NOT SENT, SYNCED or
// STALE (sent, awaiting the ACK).
export function pushState(t) {
  const n = t.nacks || [];
  if (n.length && n[n.length - 1].version === t.version_sent) return 'NACKED';
  if (!t.responses) return 'NOT SENT';
  if (t.version_acked === t.version_sent) return 'SYNCED';
  return 'STALE';
}

// shortVersion keeps a version readable in a cell: the push engine's
// revision and the start of the content hash ("11-1sb0…"); the cell's
// title has it whole.
export function shortVersion(v) {
  if (!v) return '–';
  return v.length > 9 ? v.slice(0, 8) + '…' : v;
}

const stateKind = { NACKED: 'bad', 'NOT SENT': '', SYNCED: 'ok', STALE: 'warn' };
const types = ['clusters', 'endpoints', 'listeners', 'routes'];

// parseHistograms reads Prometheus text: name -> {buckets: [[le, n]],
// count, sum}, summed over every other label (the xDS type).
export function parseHistograms(text, names) {
  const out = {};
  for (const name of names) out[name] = { buckets: new Map(), count: 0, sum: 0 };
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const m = line.match(/^([a-zA-Z_:][\w:]*)(\{([^}]*)\})?\s+(\S+)/);
    if (!m) continue;
    const v = Number(m[4]);
    for (const name of names) {
      if (m[1] === name + '_bucket') {
        const le = (m[3].match(/le="([^"]*)"/) || [])[1];
        const h = out[name].buckets;
        h.set(le, (h.get(le) || 0) + v);
      } else if (m[1] === name + '_count') out[name].count += v;
      else if (m[1] === name + '_sum') out[name].sum += v;
    }
  }
  for (const name of names) {
    out[name].buckets = [...out[name].buckets.entries()]
      .map(([le, n]) => [le === '+Inf' ? Infinity : Number(le), n]).sort((a, b) => a[0] - b[0]);
  }
  return out;
}

// quantile of a cumulative histogram, interpolated inside its bucket as
// Prometheus' histogram_quantile does; seconds.
export function quantile(q, buckets, count) {
  if (!count) return null;
  const rank = q * count;
  let prevLe = 0, prevN = 0;
  for (const [le, n] of buckets) {
    if (n >= rank) {
      if (le === Infinity) return prevLe;
      return prevLe + (le - prevLe) * ((rank - prevN) / Math.max(n - prevN, 1e-9));
    }
    prevLe = le; prevN = n;
  }
  return prevLe;
}

export const hists = ['sextant_push_sent_seconds', 'sextant_push_acked_seconds'];

// useLatency scrapes /metrics every 2 s: the distribution since the server
// started, and p50/p99 of the pushes in each interval since the page opened.
export function useLatency() {
  const [state, setState] = useState({ dist: null, series: [[], [], [], []], error: null });
  const prev = useRef(null);
  useEffect(() => {
    const ctl = new AbortController();
    let timer = 0;
    const tick = async () => {
      try {
        const { text } = await get('/metrics', { text: true, signal: ctl.signal });
        const h = parseHistograms(text, hists);
        const now = Date.now() / 1000;
        setState(s => {
          const series = s.series.map(a => a.slice(-300));
          const p = prev.current;
          if (p) {
            series[0].push(now);
            for (const [i, name, q] of [[1, hists[1], 0.5], [2, hists[1], 0.99], [3, hists[0], 0.99]]) {
              const cur = h[name], old = p[name];
              const delta = cur.buckets.map(([le, n], k) => [le, n - (old.buckets[k] ? old.buckets[k][1] : 0)]);
              const v = quantile(q, delta, cur.count - old.count);
              series[i].push(v == null ? null : v * 1000);
            }
          }
          return { dist: h, series, error: null };
        });
        prev.current = h;
      } catch (e) {
        if (!ctl.signal.aborted) setState(s => ({ ...s, error: e }));
      }
      if (!ctl.signal.aborted) timer = setTimeout(tick, 2000);
    };
    tick();
    return () => { ctl.abort(); clearTimeout(timer); };
  }, []);
  return state;
}

function leLabel(le) {
  if (le === Infinity) return '+Inf';
  return fmtMs(le * 1000).replace(nbsp, '');
}

function Latency() {
  const { dist, series, error } = useLatency();
  if (!dist) return html`<${ErrorBox} error=${error} />`;
  const sent = dist[hists[0]], acked = dist[hists[1]];
  const labels = acked.buckets.map(([le]) => leLabel(le));
  // Per-bucket counts from the cumulative ones.
  const per = h => h.buckets.map(([, n], i) => n - (i ? h.buckets[i - 1][1] : 0));
  const xs = labels.map((_, i) => i);
  return html`<section><h2>Push latency</h2>
    <${ErrorBox} error=${error} />
    <div class="stats">
      <${Stat} label="pushes ACKed" value=${acked.count} />
      <${Stat} label="p50 commit → ACK" value=${fmtMs(1000 * quantile(0.5, acked.buckets, acked.count))} />
      <${Stat} label="p99 commit → ACK" value=${fmtMs(1000 * quantile(0.99, acked.buckets, acked.count))} />
      <${Stat} label="p99 commit → sent" value=${fmtMs(1000 * quantile(0.99, sent.buckets, sent.count))} />
    </div>
    <div class="charts">
      <${Chart} id="push-latency-dist" title="Pushes by latency since the server started (sextant_push_*_seconds)" bars=${true} xLabels=${labels}
        yLabel="pushes" series=${[{ label: 'commit → ACK' }, { label: 'commit → sent' }]} data=${[xs, per(acked), per(sent)]} />
      <${Chart} id="push-latency-time" title="Latency of the pushes of each 2 s since this page opened" yLabel="ms"
        series=${[{ label: 'p50 commit → ACK', unit: ' ms' }, { label: 'p99 commit → ACK', unit: ' ms' }, { label: 'p99 commit → sent', unit: ' ms' }]} data=${series} />
    </div>
  </section>`;
}

export function PushPage() {
  const { data, error } = usePoll(signal => get('/v1/push/status', { signal }), 1000);
  const [open, setOpen] = useState({});
  return html`
    <h1>Push status ${data && html`<span class="rev">revision ${data.revision}</span>`}</h1>
    <${ErrorBox} error=${error} />
    ${data && html`<p class="muted" id="push-engine">Engine at revision ${data.engine.revision}: ${[count(data.engine.changes, 'change'),
      count(data.engine.endpoint_recomputes, 'endpoint recompute'), count(data.engine.config_rounds, 'config round')].join(', ')} (last ${fmtMs(data.engine.last_config_round_ms)});
      queues: endpoints ${data.engine.endpoint_queue}, config ${data.engine.config_queue};
      resources: ${Object.entries(data.engine.resources || {}).map(([k, v]) => count(v, k.replace(/s$/, ''), k)).join(', ')}.</p>`}
    ${data && html`<section><h2>Subscribers (${(data.subscribers || []).length})</h2>
      ${(data.subscribers || []).length === 0 ? html`<p class="muted">No xDS subscriber is connected.</p>` : html`
      <table class="push" id="push-table"><thead><tr><th>node, address, protocol, connected</th>
        ${types.map(t => html`<th>${t}</th>`)}<th>pending</th></tr></thead>
      <tbody>${data.subscribers.map(s => {
        const by = Object.fromEntries((s.types || []).map(t => [t.type, t]));
        const nacks = (s.types || []).flatMap(t => (t.nacks || []).map(n => ({ ...n, type: t.type })));
        const pending = (s.types || []).reduce((a, t) => a + t.pending, 0);
        return html`<tr data-node=${s.node_id}><td><span class="strong">${s.node_id}</span><br/>
          <span class="mono small">${s.address}</span> <span class="muted small nowrap">${s.protocol}, <span title=${when(s.connected_since)}>${ago(s.connected_since)}</span></span></td>
          ${types.map(ty => {
            const t = by[ty];
            if (!t) return html`<td class="muted">–</td>`;
            const st = pushState(t);
            return html`<td data-type=${ty} data-sent=${t.version_sent} data-acked=${t.version_acked}>
              <${Badge} kind=${stateKind[st]}>${st}</${Badge}> <span class="muted nowrap">${t.resources} res</span><br/>
              <span class="mono small nowrap" title=${`sent ${t.version_sent || '–'}, acked ${t.version_acked || '–'}`}>${t.version_sent && t.version_sent === t.version_acked
                ? `version ${shortVersion(t.version_sent)} acked` : `sent ${shortVersion(t.version_sent)} · acked ${shortVersion(t.version_acked)}`}</span></td>`;
          })}
          <td>${pending}${nacks.length > 0 && html` <button type="button" class="link" onClick=${() => setOpen({ ...open, [s.id]: !open[s.id] })}>${count(nacks.length, 'NACK')}</button>`}</td></tr>
          ${(open[s.id] || nacks.some(n => by[n.type] && pushState(by[n.type]) === 'NACKED')) && nacks.length > 0 && html`<tr class="nacks"><td colspan="6">
            ${nacks.map(n => html`<div class="nack"><${Badge} kind="bad">NACK</${Badge}> ${n.type} version ${n.version} (${ago(n.at)}): <code>${n.message}</code></div>`)}</td></tr>`}`;
      })}</tbody></table>`}
    </section>`}
    <${Latency} />`;
}
