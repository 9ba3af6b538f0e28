// overview.js: the whole mesh on one page, and what needs attention first.
import { html, useMemo } from '../vendor/lib.js';
import { get, allServices, gateways, gatewayAddr, gateway, listAll, enc, ApiError } from './api.js';
import { usePoll, Stat, ErrorBox, Badge, Chart, instanceState, ago, count, fmtPct, fmtMs, fmtNum } from './ui.js';
import { pushState, useLatency, quantile, hists } from './push.js';
import { errorThreshold, minCalls, highErrors } from './calls.js';

// Services whose instances are not all ready are read in full to tell
// unhealthy from isolated; beyond this many, the rest are counted only.
const detailLimit = 20;

async function registry(signal) {
  const { revision, namespaces, services } = await allServices(signal);
  const out = { revision, namespaces: namespaces.length, services: services.length, instances: 0, ready: 0,
    unhealthy: 0, isolated: 0, notReady: 0, unhealthyList: [], undetailed: 0 };
  const degraded = [];
  out.byService = services.map(s => ({ name: s.namespace + '/' + s.name, ready: s.healthy, notReady: s.instances - s.healthy }));
  for (const s of services) {
    out.instances += s.instances;
    out.ready += s.healthy;
    if (s.healthy < s.instances) degraded.push(s);
  }
  degraded.sort((a, b) => (b.instances - b.healthy) - (a.instances - a.healthy));
  const detailed = degraded.slice(0, detailLimit);
  const answers = await Promise.all(detailed.map(s =>
    get(`/v1/namespaces/${enc(s.namespace)}/services/${enc(s.name)}/instances`, { signal })));
  answers.forEach(a => {
    for (const i of a.instances) {
      if (i.isolated) out.isolated++;
      else if (!i.healthy) { out.unhealthy++; out.unhealthyList.push(i); }
    }
  });
  for (const s of degraded.slice(detailLimit)) out.undetailed += s.instances - s.healthy;
  return out;
}

// optional answers null when this server has no such part (404), so the
// overview shows what exists.
async function optional(p) {
  try { return await p; } catch (e) {
    if (e instanceof ApiError && e.status === 404) return null;
    throw e;
  }
}

async function scheduler(signal) {
  const nodes = await optional(listAll('/v1/nodes', { limit: 1000 }, 'items', 10000, signal));
  if (!nodes) return null;
  const placements = await listAll('/v1/placements', { limit: 1000 }, 'items', 10000, signal);
  const cordoned = nodes.items.filter(n => n.node.spec && n.node.spec.unschedulable).map(n => n.node.metadata.name);
  // kube's unschedulable answers are not stored; a server that counts them
  // says so in /metrics.
  let unschedulable = null;
  try {
    const m = await get('/metrics', { text: true, signal });
    for (const line of m.text.split('\n')) {
      if (/^sextant_\w*unschedulable\w*_total(\{[^}]*\})? /.test(line)) unschedulable = (unschedulable || 0) + Number(line.split(' ').pop());
    }
  } catch { /* metrics are optional here */ }
  return { nodes: nodes.items.length, nodesMore: nodes.more, placements: placements.items.length,
    placementsMore: placements.more, cordoned, unschedulable };
}

// The mesh at a glance: every registered gateway's calls over the last
// 15 minutes in 15 s steps, per service, and its endpoints over the last
// 5 minutes (for the error flag). Several gateways' counts add up; their
// p99 is the largest of theirs (an upper bound: quantiles do not add).
const glance = { seconds: 900, step: 15, flagSeconds: 300, services: 20 };

async function traffic(signal) {
  const gws = await gateways(signal);
  const to = Date.now();
  const from = to - glance.seconds * 1000;
  const n = glance.seconds / glance.step;
  const xs = Array.from({ length: n }, (_, i) => (from + i * glance.step * 1000) / 1000);
  const by = new Map(); // service -> {count[], errors[], p99[]}
  const flagged = [];
  const failed = [];
  await Promise.all(gws.map(async g => {
    const base = gatewayAddr(g);
    if (!base) return;
    try {
      const { services } = await gateway(base, '/v1/calls/services', {}, signal);
      await Promise.all(services.slice(0, glance.services).map(async svc => {
        const [st, eps] = await Promise.all([
          gateway(base, '/v1/calls/stats', { service: svc, from, to, step: glance.step + 's' }, signal),
          gateway(base, '/v1/calls/endpoints', { service: svc, from: to - glance.flagSeconds * 1000, to }, signal)]);
        let s = by.get(svc);
        if (!s) { s = { count: new Array(n).fill(0), errors: new Array(n).fill(0), p99: new Array(n).fill(null) }; by.set(svc, s); }
        st.steps.slice(0, n).forEach((x, i) => {
          s.count[i] += x.count; s.errors[i] += x.errors;
          if (x.count) s.p99[i] = Math.max(s.p99[i] || 0, x.p99_ms);
        });
        for (const e of eps.endpoints) if (highErrors(e)) flagged.push({ service: svc, gateway: g, ...e });
      }));
    } catch (e) {
      if (signal.aborted) throw e;
      failed.push({ gateway: g, error: e });
    }
  }));
  const services = [...by.keys()].sort();
  const series = f => [xs, ...services.map(k => f(by.get(k)))];
  return {
    services, flagged, failed,
    rps: series(s => s.count.map(c => c / glance.step)),
    errors: series(s => s.count.map((c, i) => c ? 100 * s.errors[i] / c : null)),
    p99: series(s => s.p99),
  };
}

async function load(signal) {
  const [reg, push, gws, sched] = await Promise.all([
    registry(signal),
    optional(get('/v1/push/status', { signal })),
    gateways(signal),
    scheduler(signal),
  ]);
  return { reg, push, gws, sched };
}

export function Overview() {
  const { data, error } = usePoll(load, 3000);
  const calls = usePoll(traffic, 10000);
  if (!data) return html`<h1>Overview</h1><${ErrorBox} error=${error} />${!error && html`<p class="muted">Loading…</p>`}`;
  const { reg, push, gws, sched } = data;
  const nacked = [];
  if (push) {
    for (const s of push.subscribers || []) {
      for (const t of s.types || []) {
        if (pushState(t) === 'NACKED') nacked.push({ node: s.node_id, type: t.type, nack: t.nacks[t.nacks.length - 1] });
      }
    }
  }
  const unhealthyGw = gws.filter(g => !g.healthy).length;
  const attention = [];
  for (const i of reg.unhealthyList.slice(0, 10)) {
    attention.push(html`<li><${Badge} kind="bad">unhealthy</${Badge}> <a href=${`#/services/${enc(i.namespace)}/${enc(i.service)}?instance=${enc(i.id)}`}>${i.namespace}/${i.service}</a> <code>${i.id}</code> ${i.host}:${i.port}, last change ${ago(i.updated_at)}</li>`);
  }
  if (reg.unhealthyList.length > 10) attention.push(html`<li>… and ${count(reg.unhealthyList.length - 10, 'more unhealthy instance')}</li>`);
  if (reg.undetailed) attention.push(html`<li>${count(reg.undetailed, 'more instance')} not ready in other services (<a href="#/services">services</a>)</li>`);
  for (const n of nacked) {
    attention.push(html`<li><${Badge} kind="bad">NACK</${Badge}> <a href="#/push">${n.node}</a> rejected ${n.type} version ${n.nack.version}: <span class="nack">${n.nack.message}</span></li>`);
  }
  if (sched && sched.unschedulable) attention.push(html`<li><${Badge} kind="bad">unschedulable</${Badge}> ${count(sched.unschedulable, 'placement request')} found no node (<a href="#/placement">placement</a>)</li>`);
  if (sched && sched.cordoned.length) attention.push(html`<li><${Badge} kind="warn">cordoned</${Badge}> ${count(sched.cordoned.length, 'node')} cordoned (unschedulable): ${sched.cordoned.slice(0, 5).join(', ')}${sched.cordoned.length > 5 ? '…' : ''}</li>`);
  if (unhealthyGw) attention.push(html`<li><${Badge} kind="bad">gateway</${Badge}> ${count(unhealthyGw, 'gateway')} unhealthy (<a href="#/calls">calls</a>)</li>`);
  for (const f of (calls.data && calls.data.flagged) || []) {
    const where = f.endpoint ? html`endpoint <code>${f.endpoint}</code>` : 'calls with no endpoint picked';
    attention.push(html`<li class="high-errors"><${Badge} kind="bad">errors</${Badge}> <a href=${'#/calls?gateway=' + enc(f.gateway.id) + '&window=5m&service=' + enc(f.service)}>${f.service}</a> ${where}: ${fmtPct(f.errors, f.count)} errors (${f.errors} of ${count(f.count, 'call')}) in the last 5 minutes</li>`);
  }
  for (const f of (calls.data && calls.data.failed) || []) {
    attention.push(html`<li><${Badge} kind="warn">gateway</${Badge}> ${f.gateway.metadata['sextant.node'] || f.gateway.id}: its admin API did not answer (${f.error.message})</li>`);
  }
  const stale = push ? (push.subscribers || []).filter(s => (s.types || []).some(t => pushState(t) === 'STALE')).length : 0;

  return html`
    <h1>Overview <span class="rev">revision ${reg.revision}</span></h1>
    <${ErrorBox} error=${error} prefix="Refresh failed: " />
    <section class="attention" id="attention">
      <h2>Needs attention</h2>
      ${attention.length ? html`<ul>${attention}</ul>` : html`<p class="ok-line">Nothing: every instance is healthy, every subscriber accepted its config, no endpoint fails.</p>`}
      <p class="muted small" id="error-threshold">An endpoint is flagged at ${fmtPct(errorThreshold, 1)} errors or more over the last 5 minutes, from ${count(minCalls, 'call')} on (status ≥ 500, no answer, or a gateway reply).</p>
    </section>
    <section class="stats">
      <${Stat} label="namespaces" value=${reg.namespaces} />
      <${Stat} label="services" value=${reg.services} />
      <${Stat} label="instances" value=${reg.instances} sub=${`${reg.ready} ready`} />
      <${Stat} label="unhealthy" value=${reg.unhealthy + reg.undetailed} kind=${reg.unhealthy + reg.undetailed ? 'bad' : ''} />
      <${Stat} label="isolated" value=${reg.isolated} kind=${reg.isolated ? 'warn' : ''} />
      <${Stat} label="push subscribers" value=${push ? (push.subscribers || []).length : '–'} sub=${push ? (nacked.length ? `${nacked.length} NACKed` : stale ? `${stale} awaiting ACK` : 'all synced') : 'no control plane'} kind=${nacked.length ? 'bad' : ''} />
      <${Stat} label="gateways" value=${gws.length} sub=${gws.length ? `${gws.length - unhealthyGw} healthy` : 'none registered'} />
      <${Stat} label="nodes" value=${sched ? sched.nodes + (sched.nodesMore ? '+' : '') : '–'} sub=${sched ? '' : 'no scheduler'} />
      <${Stat} label="placements" value=${sched ? sched.placements + (sched.placementsMore ? '+' : '') : '–'} />
    </section>
    <${Glance} calls=${calls} reg=${reg} />
    ${push && html`<section><h2>Control plane</h2>
      <p id="engine-line">Push engine at revision ${push.engine.revision}: ${[count(push.engine.resources.clusters || 0, 'cluster'),
        count(push.engine.resources.endpoints || 0, 'endpoint set'), count(push.engine.resources.routes || 0, 'route configuration')].join(', ')};
      queues: endpoints ${push.engine.endpoint_queue}, config ${push.engine.config_queue}. <a href="#/push">Push status</a></p></section>`}
    ${gws.length > 0 && html`<section><h2>Gateways</h2><ul class="plain">${gws.map(g => {
      const [k, label] = instanceState(g);
      return html`<li><${Badge} kind=${k}>${label}</${Badge}> ${g.metadata['sextant.node'] || g.id} — proxy ${g.host}:${g.port}, admin ${g.metadata['sextant.admin']} <a href=${'#/calls?gateway=' + enc(g.id)}>calls</a></li>`;
    })}</ul></section>`}`;
}

// Glance: calls/s, error rate and p99 per service over the last 15
// minutes, push latency, and instances by health.
function Glance({ calls, reg }) {
  const lat = useLatency();
  const top = useMemo(() => [...reg.byService].sort((a, b) => (b.ready + b.notReady) - (a.ready + a.notReady)).slice(0, 12), [reg]);
  const t = calls.data;
  const svcSeries = unit => (t ? t.services : []).map(s => ({ label: s, unit }));
  const acked = lat.dist && lat.dist[hists[1]];
  return html`<section class="glance" id="glance">
    <h2>The mesh at a glance</h2>
    <${ErrorBox} error=${calls.error} prefix="Calls: " />
    ${t && t.services.length === 0 && html`<p class="muted">No gateway has recorded calls in the last 15 minutes.</p>`}
    <div class="charts">
      ${t && t.services.length > 0 && html`
        <${Chart} id="glance-rps" title="Calls per second, per service (last 15 minutes)" yLabel="calls/s" series=${svcSeries(' /s')} data=${t.rps} height=${200} />
        <${Chart} id="glance-errors" title="Error rate, per service" yLabel="%" percent=${true} series=${svcSeries('%')} data=${t.errors} height=${200} />
        <${Chart} id="glance-p99" title="p99 latency, per service" yLabel="ms" series=${svcSeries(' ms')} data=${t.p99} height=${200} />`}
      ${lat.series[0].length >= 2 ? html`<${Chart} id="glance-push" title="Push latency, commit → ACK, every 2 s since this page opened"
        yLabel="ms" series=${[{ label: 'p50', unit: ' ms' }, { label: 'p99', unit: ' ms' }]} data=${[lat.series[0], lat.series[1], lat.series[2]]} height=${200} />`
        : html`<figure class="chart" id="glance-push"><figcaption>Push latency, commit → ACK</figcaption><p class="muted">Sampled from <code>/metrics</code> every 2 s from now on.</p></figure>`}
      <figure class="chart" id="glance-health"><figcaption>Instances by health${reg.byService.length > top.length ? ` (the ${top.length} largest of ${count(reg.byService.length, 'service')})` : ''}</figcaption>
        ${top.map(s => html`<div class="health-line" data-service=${s.name}>
          <a class="health-name" href=${'#/services/' + s.name.split('/').map(enc).join('/')} title=${s.name}>${s.name}</a>
          <span class="bar">${s.ready > 0 && html`<span class="bar-fill ok" style=${`width:${100 * s.ready / (s.ready + s.notReady)}%`}></span>`}${s.notReady > 0 && html`<span class="bar-fill bad" style=${`width:${100 * s.notReady / (s.ready + s.notReady)}%`}></span>`}</span>
          <span class="bar-text">${fmtNum(s.ready)} ready${s.notReady ? html`, <span class="bad-text">${fmtNum(s.notReady)} not ready</span>` : ''}</span></div>`)}
        ${acked && acked.count > 0 && html`<p class="muted small">Push p99 commit → ACK since the server started: ${fmtMs(1000 * quantile(0.99, acked.buckets, acked.count))} (<a href="#/push">push status</a>).</p>`}
      </figure>
    </div>
  </section>`;
}
