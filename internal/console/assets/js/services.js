// services.js: the service list, a service's live instances (blocking
// queries), the selector box, subsets, and the instance actions.
import { html, useState, useEffect, useMemo, useRef } from '../vendor/lib.js';
import { get, post, del, enc, allServices, ApiError } from './api.js';
import { usePoll, VirtualList, ErrorBox, Badge, instanceState, instanceSource, sourceCounts, KV, confirm, openModal, ago, when, count } from './ui.js';
import { serviceOfHost } from './hosts.js';

export function ServiceList({ params }) {
  const { data, error } = usePoll(allServices, 3000);
  const [q, setQ] = useState(params.get('q') || '');
  const items = useMemo(() => {
    if (!data) return [];
    const needle = q.trim().toLowerCase();
    return data.services.filter(s => !needle || (s.namespace + '/' + s.name).includes(needle));
  }, [data, q]);
  return html`
    <h1>Services ${data && html`<span class="rev">revision ${data.revision}</span>`}</h1>
    <${ErrorBox} error=${error} />
    <div class="toolbar center">
      <input id="service-search" type="search" placeholder="Search namespace/service" value=${q}
        onInput=${e => setQ(e.currentTarget.value)} />
      <span class="muted">${data ? `${items.length} of ${count(data.services.length, 'service')}` : 'Loading…'}</span>
      <span class="grow"></span>
      <button type="button" class="primary" id="register-open" onClick=${() => registerDialog({ namespace: 'default' })}>Register an instance</button>
    </div>
    <div class="thead svc-row"><span>namespace</span><span>service</span><span>instances</span><span>ready</span><span>revision</span></div>
    <${VirtualList} items=${items} rowHeight=${34} height=${560} cls="services" row=${s => html`
      <a class="svc-row" href=${`#/services/${enc(s.namespace)}/${enc(s.name)}`} data-service=${s.namespace + '/' + s.name}>
        <span>${s.namespace}</span><span class="strong">${s.name}</span><span>${s.instances}</span>
        <span class=${s.healthy < s.instances ? 'bad-text' : ''}>${s.healthy}</span><span class="muted">${s.revision}</span>
      </a>`} />`;
}

// useInstances follows one service's instances with blocking queries: the
// first query answers at once, each next one waits (index, wait) until the
// service changes, so a change shows within the network's round trip.
function useInstances(ns, name, selector, healthyOnly) {
  const [st, setSt] = useState({ instances: null, revision: 0, error: null, selectorError: null });
  useEffect(() => {
    const ctl = new AbortController();
    const url = `/v1/namespaces/${enc(ns)}/services/${enc(name)}/instances`;
    (async () => {
      let index = -1;
      let failures = 0;
      while (!ctl.signal.aborted) {
        const query = { selector, healthy_only: healthyOnly ? 'true' : '' };
        if (index >= 0) { query.index = index; query.wait = '30s'; }
        try {
          const a = await get(url, { query, signal: ctl.signal });
          index = a.revision;
          failures = 0;
          setSt({ instances: a.instances, revision: a.revision, error: null, selectorError: null });
        } catch (e) {
          if (ctl.signal.aborted) return;
          if (e instanceof ApiError && e.field === 'selector') {
            // The box shows the parser's error; the list keeps the last
            // good answer until the selector changes.
            setSt(s => ({ ...s, selectorError: e }));
            return;
          }
          setSt(s => ({ ...s, error: e }));
          failures++;
          await new Promise(r => setTimeout(r, Math.min(500 * failures, 5000)));
        }
      }
    })();
    return () => ctl.abort();
  }, [ns, name, selector, healthyOnly]);
  return st;
}

// useDebounced follows v, ms after it stops changing.
function useDebounced(v, ms) {
  const [d, setD] = useState(v);
  useEffect(() => { const t = setTimeout(() => setD(v), ms); return () => clearTimeout(t); }, [v]);
  return d;
}

function setHashParams(ns, name, p) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(p)) if (v) q.set(k, v);
  const s = q.toString();
  history.replaceState(null, '', `#/services/${enc(ns)}/${enc(name)}${s ? '?' + s : ''}`);
}

export function ServicePage({ ns, name, params }) {
  const [text, setText] = useState(params.get('selector') || '');
  const [healthyOnly, setHealthyOnly] = useState(params.get('healthy_only') === 'true');
  const [selected, setSelected] = useState(params.get('instance') || '');
  const selector = useDebounced(text.trim(), 120);
  const st = useInstances(ns, name, selector, healthyOnly);
  useEffect(() => setHashParams(ns, name, { selector, healthy_only: healthyOnly ? 'true' : '', instance: selected }), [selector, healthyOnly, selected]);
  const list = st.instances || [];
  const counts = useMemo(() => {
    const c = { healthy: 0, unhealthy: 0, isolated: 0 };
    for (const i of list) c[i.isolated ? 'isolated' : i.healthy ? 'healthy' : 'unhealthy']++;
    return c;
  }, [list]);
  const current = list.find(i => i.id === selected);
  return html`
    <p class="crumbs"><a href="#/services">Services</a> / ${ns}</p>
    <h1>${name} ${st.instances !== null && html`<span class="rev" id="service-revision">revision ${st.revision}</span> <span class="live" title="updates through blocking queries">live</span>`}</h1>
    <${ServiceLinks} ns=${ns} name=${name} />
    <${ErrorBox} error=${st.error} prefix="Watch failed, retrying: " />
    <div class="toolbar selector-bar">
      <label class="grow">Selector
        <input id="selector-input" class=${st.selectorError ? 'invalid' : ''} type="text" spellcheck="false"
          placeholder="version=v2,zone in (z1,z2),!canary" value=${text} onInput=${e => setText(e.currentTarget.value)} />
      </label>
      <label class="check"><input type="checkbox" checked=${healthyOnly} onChange=${e => setHealthyOnly(e.currentTarget.checked)} /> healthy only</label>
      <button type="button" class="primary" id="register-open" onClick=${() => registerDialog({ namespace: ns, service: name })}>Register</button>
    </div>
    <div id="selector-error" class="field-error" role="alert">${st.selectorError ? st.selectorError.message : ''}</div>
    <p class="muted" id="instance-count">${st.instances === null ? (st.selectorError ? 'Nothing listed: fix the selector.' : 'Loading…') :
      `${count(list.length, 'instance')}${selector ? (list.length === 1 ? ' matches' : ' match') : ''}: ${counts.healthy} healthy, ${counts.unhealthy} unhealthy, ${counts.isolated} isolated`}
      ${list.length > 0 && html`<span class="sep">·</span> <span id="instance-sources" title="where the instances come from">from ${sourceCounts(list)}</span>`}</p>
    <div class="split">
      <div class="split-main">
        <div class="thead inst-row"><span>state</span><span>id</span><span>address</span><span>version</span><span>weight</span><span>source</span><span>metadata</span></div>
        <${VirtualList} items=${list} rowHeight=${34} height=${520} cls=${'instances' + (st.selectorError ? ' stale' : '')} row=${i => {
          const [k, label] = instanceState(i);
          return html`<div class=${'inst-row' + (i.id === selected ? ' selected' : '')} data-id=${i.id} onClick=${() => setSelected(i.id)}>
            <span><${Badge} kind=${k}>${label}</${Badge}></span><span class="mono">${i.id}</span>
            <span class="mono">${i.host}:${i.port}</span><span>${i.version || ''}</span><span>${i.weight}</span>
            <span>${instanceSource(i)}</span><span class="meta"><${KV} map=${i.metadata} /></span></div>`;
        }} />
        <${Subsets} ns=${ns} name=${name} revision=${st.revision} onPick=${setText} />
      </div>
      <aside class="split-side">
        ${selected ? html`<${InstancePanel} id=${selected} live=${current} onClose=${() => setSelected('')} />`
          : html`<p class="muted">Select an instance to see its full record and act on it.</p>`}
      </aside>
    </div>`;
}

// hostsOf is the hosts a routing object names: a VirtualService's hosts
// and its routes' destinations, a DestinationRule's host.
function hostsOf(o) {
  if (o.kind === 'DestinationRule') return [o.spec.host || ''];
  const dests = ['http', 'tcp', 'tls'].flatMap(k => (o.spec[k] || []).flatMap(r => (r.route || []).map(d => (d.destination || {}).host || '')));
  return [...(o.spec.hosts || []), ...dests];
}

// ServiceLinks: the routing config that names this service, and its calls.
function ServiceLinks({ ns, name }) {
  const { data } = usePoll(async signal => {
    const cfg = await get('/v1/config', { signal });
    return cfg.items.filter(o => hostsOf(o).some(h => {
      const k = serviceOfHost(h, o.metadata.namespace || 'default');
      return k && k.namespace === ns && k.name === name;
    }));
  }, 10000, [ns, name]);
  return html`<p class="links" id="service-links">Routing config:
    ${data === null ? ' …' : data.length === 0 ? html` <span class="muted">none names it</span> (<a href="#/config/new/VirtualService">new VirtualService</a>)`
      : data.map((o, i) => html`${i ? ', ' : ' '}<a href=${`#/config/${enc(o.kind)}/${enc(o.metadata.namespace || 'default')}/${enc(o.metadata.name)}`}>${o.kind} ${o.metadata.namespace || 'default'}/${o.metadata.name}</a>`)}
    <span class="sep">·</span> <a id="service-calls-link" href=${'#/calls?window=15m&service=' + enc(ns + '/' + name)}>Calls through the gateways</a></p>`;
}

// Subsets: the DestinationRules naming this service, each subset with the
// instances its labels select.
function Subsets({ ns, name, revision, onPick }) {
  const { data, error } = usePoll(async signal => {
    const cfg = await get('/v1/config', { query: { kind: 'DestinationRule' }, signal });
    const rules = cfg.items.filter(dr => {
      const k = serviceOfHost(dr.spec.host || '', dr.metadata.namespace || 'default');
      return k && k.namespace === ns && k.name === name;
    });
    const url = `/v1/namespaces/${enc(ns)}/services/${enc(name)}/instances`;
    const out = [];
    for (const dr of rules) {
      for (const s of dr.spec.subsets || []) {
        const sel = Object.entries(s.labels || {}).map(([k, v]) => `${k}=${v}`).join(',');
        const a = await get(url, { query: { selector: sel }, signal });
        out.push({ rule: dr.metadata.namespace + '/' + dr.metadata.name, name: s.name, selector: sel,
          count: a.instances.length, healthy: a.instances.filter(i => i.healthy && !i.isolated).length });
      }
    }
    return out;
  }, 10000, [ns, name, revision]);
  return html`<section class="subsets" id="subsets"><h2>Subsets</h2>
    <${ErrorBox} error=${error} />
    ${data && (data.length === 0 ? html`<p class="muted">No DestinationRule defines subsets for this service.</p>` : html`
    <table><thead><tr><th>DestinationRule</th><th>subset</th><th>labels</th><th>instances</th><th>ready</th></tr></thead>
      <tbody>${data.map(s => html`<tr data-subset=${s.name}><td>${s.rule}</td><td class="strong">${s.name}</td>
        <td><button type="button" class="link mono" title="filter by these labels" onClick=${() => onPick(s.selector)}>${s.selector || '(all)'}</button></td>
        <td>${s.count}</td><td>${s.healthy}</td></tr>`)}</tbody></table>`)}
  </section>`;
}

// registration is the instance as POST /v1/instances takes it back.
function registration(i) {
  const r = { id: i.id, namespace: i.namespace, service: i.service, host: i.host, port: i.port, weight: i.weight,
    isolated: !!i.isolated, metadata: { ...(i.metadata || {}) } };
  if (i.protocol) r.protocol = i.protocol;
  if (i.version) r.version = i.version;
  if (i.ttl_seconds) r.ttl_seconds = i.ttl_seconds;
  if (i.deregister_after_seconds) r.deregister_after_seconds = i.deregister_after_seconds;
  // Checks go back as they are: unchanged definitions keep their state.
  if (i.checks) r.checks = i.checks;
  return r;
}

const checkBadge = { passing: 'ok', warning: 'warn', critical: 'bad' };

// Checks lists an instance's health checks: status, what is probed, since
// when, and the output of the result that set the status.
function Checks({ checks }) {
  if (!checks || !checks.length) return html`<span class="muted">none</span>`;
  return html`<ul class="checks">${checks.map(c => html`<li data-check=${c.id}>
    <${Badge} kind=${checkBadge[c.status] || ''}>${c.status}</${Badge}> <span class="mono">${c.id}</span>
    <span class="muted">${c.type}${c.target ? ' ' + c.target : ''}${c.grpc_service ? '/' + c.grpc_service : ''}${c.interval ? ' every ' + c.interval : ''}${c.ttl ? ' ttl ' + c.ttl : ''}, since ${ago(c.changed_at)}</span>
    ${c.output ? html`<pre class="check-output">${c.output}</pre>` : ''}</li>`)}</ul>`;
}

async function reRegister(next, what) {
  const a = await post('/v1/instances', next);
  return `${what} at revision ${a.revision}`;
}

function InstancePanel({ id, live, onClose }) {
  const [rec, setRec] = useState(live || null);
  const [err, setErr] = useState(null);
  const [note, setNote] = useState('');
  // Set while this panel deregisters the instance: the live list may drop
  // it before the DELETE's answer arrives, and reading it then is a 404.
  const leaving = useRef(false);
  useEffect(() => {
    if (live) { setRec(live); return; }
    if (leaving.current) return;
    // Filtered out, or gone: read it directly.
    get('/v1/instances/' + enc(id)).then(r => { setRec(r); setErr(null); }, e => { setRec(null); setErr(e); });
  }, [id, live]);
  if (err) return html`<div class="panel"><${ErrorBox} error=${err} /><button type="button" onClick=${onClose}>Close</button></div>`;
  if (!rec) return html`<p class="muted">Loading…</p>`;
  const act = async (title, body, label, danger, run) => {
    if (!await confirm(title, body, label, danger)) return;
    try { setNote(await run()); setErr(null); } catch (e) { setErr(e); setNote(''); }
  };
  const [k, label] = instanceState(rec);
  return html`<div class="panel" id="instance-panel">
    <h2><${Badge} kind=${k}>${label}</${Badge}> <span class="mono">${rec.id}</span></h2>
    <dl class="record">
      <dt>service</dt><dd>${rec.namespace}/${rec.service}</dd>
      <dt>address</dt><dd class="mono">${rec.host}:${rec.port}</dd>
      <dt>protocol, version</dt><dd>${rec.protocol || '–'}, ${rec.version || '–'}</dd>
      <dt>weight</dt><dd>${rec.weight}</dd>
      <dt>healthy, isolated</dt><dd>${String(rec.healthy)}, ${String(rec.isolated)}</dd>
      <dt>ttl</dt><dd>${rec.ttl_seconds ? rec.ttl_seconds + ' s' : 'none (always healthy)'}</dd>
      <dt>revision</dt><dd>${rec.revision}</dd>
      <dt>created</dt><dd>${when(rec.created_at)}</dd>
      <dt>updated</dt><dd>${when(rec.updated_at)} <span class="ago">(${ago(rec.updated_at)})</span></dd>
      <dt>metadata</dt><dd><${KV} map=${rec.metadata} /></dd>
      <dt>checks</dt><dd id="instance-checks"><${Checks} checks=${rec.checks} /></dd>
    </dl>
    <details><summary>JSON</summary><pre class="json">${JSON.stringify(rec, null, 2)}</pre></details>
    <div class="actions wrap">
      <button type="button" id="act-metadata" onClick=${() => editMetadata(rec).then(m => m && act('Replace the metadata?',
        html`<p>${rec.id} will carry exactly:</p><pre>${Object.entries(m).map(([a, b]) => a + '=' + b).join('\n') || '(none)'}</pre>`, 'Replace', false,
        () => reRegister({ ...registration(rec), metadata: m }, 'Metadata replaced')))}>Edit metadata</button>
      <button type="button" id="act-isolate" onClick=${() => act(rec.isolated ? 'Return to service?' : 'Isolate this instance?',
        html`<p>${rec.isolated ? 'It will be returned by healthy_only queries and pushed to proxies again.' : 'It is kept, but never returned by healthy_only queries nor pushed to proxies.'}</p>`,
        rec.isolated ? 'Un-isolate' : 'Isolate', !rec.isolated,
        () => reRegister({ ...registration(rec), isolated: !rec.isolated }, rec.isolated ? 'Returned to service' : 'Isolated'))}>${rec.isolated ? 'Un-isolate' : 'Isolate'}</button>
      <button type="button" id="act-weight" onClick=${() => act(rec.weight ? 'Set weight 0?' : 'Restore weight 100?',
        html`<p>${rec.weight ? 'Weighted balancers will stop picking it; calls in flight finish.' : 'Weighted balancers will pick it again.'}</p>`,
        rec.weight ? 'Set weight 0' : 'Set weight 100', !!rec.weight,
        () => reRegister({ ...registration(rec), weight: rec.weight ? 0 : 100 }, 'Weight set'))}>${rec.weight ? 'Weight 0' : 'Weight 100'}</button>
      <button type="button" class="danger" id="act-deregister" onClick=${() => act('Deregister this instance?',
        html`<p>${rec.namespace}/${rec.service} <code>${rec.id}</code> at ${rec.host}:${rec.port} is removed from the registry and from every proxy. A process that heartbeats or registers it will bring it back.</p>`,
        'Deregister', true, async () => {
          leaving.current = true;
          try { await del('/v1/instances/' + enc(rec.id)); } catch (e) { leaving.current = false; throw e; }
          onClose(); return '';
        })}>Deregister</button>
      <button type="button" onClick=${onClose}>Close</button>
    </div>
    ${note && html`<p class="note" id="action-note">${note}</p>`}
  </div>`;
}

// parseKV reads "key=value" lines (blank lines and # comments skipped).
export function parseKV(text) {
  const out = {};
  text.split('\n').forEach((line, n) => {
    const l = line.trim();
    if (!l || l.startsWith('#')) return;
    const i = l.indexOf('=');
    if (i <= 0) throw new Error(`line ${n + 1}: "${l}" is not key=value`);
    out[l.slice(0, i).trim()] = l.slice(i + 1).trim();
  });
  return out;
}

function editMetadata(rec) {
  return openModal('Edit metadata of ' + rec.id, close => html`<${KVForm} initial=${rec.metadata} close=${close} />`);
}

function KVForm({ initial, close }) {
  const [text, setText] = useState(Object.entries(initial || {}).map(([k, v]) => `${k}=${v}`).join('\n'));
  const [err, setErr] = useState('');
  return html`<form onSubmit=${e => { e.preventDefault(); try { close(parseKV(text)); } catch (x) { setErr(x.message); } }}>
    <p class="muted">One <code>key=value</code> per line. The instance's metadata is replaced whole.</p>
    <textarea id="metadata-input" rows="8" spellcheck="false" value=${text} onInput=${e => setText(e.currentTarget.value)}></textarea>
    <div class="field-error">${err}</div>
    <div class="actions"><button type="button" onClick=${() => close(null)}>Cancel</button><button type="submit" class="primary" id="metadata-ok">Next</button></div>
  </form>`;
}

export function registerDialog(initial) {
  return openModal('Register an instance', close => html`<${RegisterForm} initial=${initial} close=${close} />`);
}

function RegisterForm({ initial, close }) {
  const [f, setF] = useState({ namespace: 'default', service: '', host: '', port: '', protocol: 'http', version: '', weight: '100', ttl: '0', metadata: '', ...initial });
  const [err, setErr] = useState(null);
  const [busy, setBusy] = useState(false);
  const field = (k, label, attrs = {}) => html`<label>${label}<input name=${k} id=${'reg-' + k} value=${f[k]} onInput=${e => setF({ ...f, [k]: e.currentTarget.value })} ...${attrs} /></label>`;
  const submit = async e => {
    e.preventDefault();
    let body;
    try {
      body = { namespace: f.namespace, service: f.service, host: f.host, port: Number(f.port), weight: Number(f.weight),
        metadata: parseKV(f.metadata) };
      if (f.protocol) body.protocol = f.protocol;
      if (f.version) body.version = f.version;
      if (Number(f.ttl)) body.ttl_seconds = Number(f.ttl);
    } catch (x) { setErr(new ApiError(400, 'invalid_argument', x.message, 'metadata')); return; }
    if (!await confirm('Register?', html`<pre>${JSON.stringify(body, null, 2)}</pre>`, 'Register')) return;
    setBusy(true);
    try {
      const a = await post('/v1/instances', body);
      close(a);
      if (location.hash.startsWith('#/services') && !location.hash.includes('/' + enc(f.service))) location.hash = `#/services/${enc(f.namespace)}/${enc(f.service)}`;
    } catch (x) { setErr(x); setBusy(false); }
  };
  return html`<form class="grid-form" onSubmit=${submit}>
    ${field('namespace', 'Namespace')}${field('service', 'Service', { required: true })}
    ${field('host', 'Host', { required: true, placeholder: '10.0.0.1' })}${field('port', 'Port', { required: true, type: 'number', min: 1, max: 65535 })}
    ${field('protocol', 'Protocol')}${field('version', 'Version')}
    ${field('weight', 'Weight', { type: 'number', min: 0, max: 65535 })}${field('ttl', 'TTL seconds (0: no heartbeat)', { type: 'number', min: 0, max: 3600 })}
    <label class="wide">Metadata (key=value per line)<textarea name="metadata" id="reg-metadata" rows="4" value=${f.metadata} onInput=${e => setF({ ...f, metadata: e.currentTarget.value })}></textarea></label>
    <div class="wide"><${ErrorBox} error=${err} /></div>
    <div class="actions wide"><button type="button" onClick=${() => close(null)}>Cancel</button><button type="submit" class="primary" id="reg-ok" disabled=${busy}>Register…</button></div>
  </form>`;
}
