// overview.js: the whole mesh on one page, and what needs attention first.
import { html } from '../vendor/lib.js';
import { get, allServices, gateways, listAll, enc, ApiError } from './api.js';
import { usePoll, Stat, ErrorBox, Badge, instanceState, ago } from './ui.js';
import { pushState } from './push.js';

// Services whose instances are not all ready are read in full to tell
// unhealthy from isolated; beyond this many, the rest are counted only.
const detailLimit = 20;

async function registry(signal) {
  const { revision, namespaces, services } = await allServices(signal);
  const out = { revision, namespaces: namespaces.length, services: services.length, instances: 0, ready: 0,
    unhealthy: 0, isolated: 0, notReady: 0, unhealthyList: [], undetailed: 0 };
  const degraded = [];
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
  if (reg.unhealthyList.length > 10) attention.push(html`<li>… and ${reg.unhealthyList.length - 10} more unhealthy instances</li>`);
  if (reg.undetailed) attention.push(html`<li>${reg.undetailed} more instances not ready in other services (<a href="#/services">services</a>)</li>`);
  for (const n of nacked) {
    attention.push(html`<li><${Badge} kind="bad">NACK</${Badge}> <a href="#/push">${n.node}</a> rejected ${n.type} version ${n.nack.version}: <span class="nack">${n.nack.message}</span></li>`);
  }
  if (sched && sched.unschedulable) attention.push(html`<li><${Badge} kind="bad">unschedulable</${Badge}> ${sched.unschedulable} placement requests found no node (<a href="#/placement">placement</a>)</li>`);
  if (sched && sched.cordoned.length) attention.push(html`<li><${Badge} kind="warn">cordoned</${Badge}> ${sched.cordoned.length} nodes are unschedulable: ${sched.cordoned.slice(0, 5).join(', ')}${sched.cordoned.length > 5 ? '…' : ''}</li>`);
  if (unhealthyGw) attention.push(html`<li><${Badge} kind="bad">gateway</${Badge}> ${unhealthyGw} gateways are unhealthy (<a href="#/calls">calls</a>)</li>`);
  const stale = push ? (push.subscribers || []).filter(s => (s.types || []).some(t => pushState(t) === 'STALE')).length : 0;

  return html`
    <h1>Overview <span class="rev">revision ${reg.revision}</span></h1>
    <${ErrorBox} error=${error} prefix="Refresh failed: " />
    <section class="attention" id="attention">
      <h2>Needs attention</h2>
      ${attention.length ? html`<ul>${attention}</ul>` : html`<p class="ok-line">Nothing: every instance is healthy, every subscriber accepted its config.</p>`}
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
    ${push && html`<section><h2>Control plane</h2>
      <p>Push engine at revision ${push.engine.revision}: ${push.engine.resources.clusters || 0} clusters,
      ${push.engine.resources.endpoints || 0} endpoint sets, ${push.engine.resources.routes || 0} route configurations;
      queues: endpoints ${push.engine.endpoint_queue}, config ${push.engine.config_queue}. <a href="#/push">Push status</a></p></section>`}
    ${gws.length > 0 && html`<section><h2>Gateways</h2><ul class="plain">${gws.map(g => {
      const [k, label] = instanceState(g);
      return html`<li><${Badge} kind=${k}>${label}</${Badge}> ${g.metadata['sextant.node'] || g.id} — proxy ${g.host}:${g.port}, admin ${g.metadata['sextant.admin']} <a href=${'#/calls?gateway=' + enc(g.id)}>calls</a></li>`;
    })}</ul></section>`}`;
}
