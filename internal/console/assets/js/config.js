// config.js: config (Istio's routing and security kinds) as YAML: list,
// edit with errors at their line, dry-run diff, apply, delete.
import { html, useState, useEffect, useRef, stringify, parseDocument } from '../vendor/lib.js';
import { get, request, del, enc, ApiError } from './api.js';
import { usePoll, ErrorBox, Badge, confirm, count } from './ui.js';
import { problems, splitDocs } from './yamlpath.js';
import { diffLines, hunks } from './diff.js';

const templates = {
  VirtualService: `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: orders
  namespace: default
spec:
  hosts: [orders]
  http:
  - match:
    - headers:
        x-canary: {exact: "yes"}
    route:
    - destination: {host: orders, subset: v2}
  - route:
    - destination: {host: orders, subset: v1}
      weight: 90
    - destination: {host: orders, subset: v2}
      weight: 10
`,
  DestinationRule: `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: orders
  namespace: default
spec:
  host: orders
  trafficPolicy:
    loadBalancer: {simple: ROUND_ROBIN}
  subsets:
  - name: v1
    labels: {version: v1}
  - name: v2
    labels: {version: v2}
`,
  Gateway: `apiVersion: networking.istio.io/v1
kind: Gateway
metadata:
  name: edge
  namespace: default
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 8443, name: https, protocol: HTTPS}
    hosts: [shop.example.com]
    tls: {mode: SIMPLE, credentialName: shop-cert}
  - port: {number: 8080, name: http, protocol: HTTP}
    hosts: [shop.example.com]
    tls: {httpsRedirect: true}
`,
  PeerAuthentication: `apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata:
  name: default
  namespace: default
spec:
  mtls: {mode: STRICT}
`,
  AuthorizationPolicy: `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: orders
  namespace: default
spec:
  selector:
    matchLabels: {app: orders}
  action: ALLOW
  rules:
  - from:
    - source:
        principals: [cluster.local/ns/web/sa/frontend]
    to:
    - operation:
        methods: [GET]
`,
  ServiceEntry: `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: httpbin-ext
  namespace: default
spec:
  hosts: [httpbin.org]
  location: MESH_EXTERNAL
  ports:
  - {number: 80, name: http, protocol: HTTP}
  resolution: DNS
`,
  Telemetry: `apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata:
  name: mesh-default
  namespace: istio-system
spec:
  tracing:
  - randomSamplingPercentage: 1
  accessLogging:
  - providers: [{name: envoy}]
    filter: {expression: response.code >= 400}
`,
};

// kinds are the kinds the server stores, each with its short name (the
// CLI's and the list's badge).
export const kinds = [
  ['VirtualService', 'VS'], ['DestinationRule', 'DR'], ['Gateway', 'GW'],
  ['PeerAuthentication', 'PA'], ['AuthorizationPolicy', 'AP'], ['Telemetry', 'TM'],
  ['ServiceEntry', 'SE'], ['RequestAuthentication', 'RA'],
];
export const shortKind = k => (kinds.find(([name]) => name === k) || [k, k])[1];

// shown is an object as the console shows it: an AuthorizationPolicy says
// its action when it was left out (or stored as the default, which the
// server's encoding leaves out): ALLOW, Istio's default.
export function shown(obj) {
  if (obj && obj.kind === 'AuthorizationPolicy' && obj.spec && !obj.spec.action) {
    const { selector, ...rest } = obj.spec;
    obj.spec = selector ? { selector, action: 'ALLOW', ...rest } : { action: 'ALLOW', ...rest };
  }
  return obj;
}

// toYAML shows a stored object as a user would write it: without the
// server's resourceVersion (ignored when applied again).
export function toYAML(obj, sorted = false) {
  const o = shown(JSON.parse(JSON.stringify(obj)));
  if (o.metadata) delete o.metadata.resourceVersion;
  // YAML 1.1, as the server reads it: "yes" stays a quoted string.
  return stringify(o, { sortMapEntries: sorted, lineWidth: 0, version: '1.1' });
}

const keyOf = o => `${o.kind}/${(o.metadata && o.metadata.namespace) || 'default'}/${o.metadata && o.metadata.name}`;
const objPath = (kind, ns, name) => `/v1/config/${enc(kind)}/${enc(ns)}/${enc(name)}`;

function apply(text, dryRun) {
  return request('POST', '/v1/config:apply', { body: text, query: { dry_run: dryRun ? 'true' : '' }, headers: { 'Content-Type': 'application/yaml' } });
}

export function ConfigPage({ parts }) {
  const [kindFilter, setKindFilter] = useState('');
  const list = usePoll(signal => get('/v1/config', { signal }), 3000);
  const [kind, ns, name] = parts;
  const items = (list.data ? list.data.items : []).filter(o => !kindFilter || o.kind === kindFilter);
  return html`
    <h1>Routing config ${list.data && html`<span class="rev">revision ${list.data.revision}</span>`}</h1>
    <${ErrorBox} error=${list.error} />
    <div class="split config">
      <aside class="split-list">
        <div class="toolbar config-tools">
          <select id="config-kind" value=${kindFilter} onChange=${e => setKindFilter(e.currentTarget.value)} aria-label="kind">
            <option value="">all kinds</option>${kinds.map(([k]) => html`<option>${k}</option>`)}
          </select>
          <div class="new-kinds" id="config-new"><span class="muted">New</span>${kinds.map(([k, s]) =>
            html`<a class="button" href=${'#/config/new/' + k} id=${'config-new-' + s.toLowerCase()} title=${'New ' + k}>${s}</a>`)}</div>
        </div>
        <ul class="objects" id="config-list">${items.map(o => {
          const k = keyOf(o);
          const active = kind === o.kind && ns === o.metadata.namespace && name === o.metadata.name;
          return html`<li class=${active ? 'active' : ''}><a href=${`#/config/${enc(o.kind)}/${enc(o.metadata.namespace)}/${enc(o.metadata.name)}`} data-key=${k}>
            <span class=${'kind kind-' + shortKind(o.kind).toLowerCase()} title=${o.kind}>${shortKind(o.kind)}</span> ${o.metadata.namespace}/${o.metadata.name}
            <span class="muted rv">r${o.metadata.resourceVersion}</span></a></li>`;
        })}
        ${list.data && items.length === 0 && html`<li class="muted">No objects yet.</li>`}</ul>
        ${list.data && list.data.items.length > 0 && html`<a href="#/config/all" class="muted">Edit all as one YAML stream</a>`}
      </aside>
      <section class="split-main">
        ${kind === 'new' ? html`<${Editor} key=${'new/' + ns} initial=${templates[ns] || templates.VirtualService} />`
          : kind === 'all' ? html`<${Editor} key="all" initial=${list.data ? list.data.items.map(o => toYAML(o)).join('---\n') : ''} ready=${!!list.data} />`
          : kind ? html`<${ObjectEditor} key=${parts.join('/')} kind=${kind} ns=${ns} name=${name} />`
          : html`<p class="muted">Pick an object to see and edit its YAML, or start a new one.</p>`}
      </section>
    </div>`;
}

function ObjectEditor({ kind, ns, name }) {
  const [obj, setObj] = useState(null);
  const [err, setErr] = useState(null);
  useEffect(() => { get(objPath(kind, ns, name)).then(setObj, setErr); }, []);
  if (err) return html`<${ErrorBox} error=${err} />`;
  if (!obj) return html`<p class="muted">Loading…</p>`;
  return html`<${Editor} initial=${toYAML(obj)} origin=${{ kind, ns, name, revision: Number(obj.metadata.resourceVersion) }} />`;
}

// Editor edits YAML; Dry run shows problems at their lines or what would
// change; Apply writes what the dry run showed.
function Editor({ initial, origin, ready = true }) {
  const [text, setText] = useState(initial);
  const [probs, setProbs] = useState([]);
  const [dry, setDry] = useState(null); // {text, answer, diffs}
  const [err, setErr] = useState(null);
  const [done, setDone] = useState(null);
  const [busy, setBusy] = useState(false);
  const area = useRef(null);
  const gutter = useRef(null);
  useEffect(() => { if (ready && !text) setText(initial); }, [ready]);
  const lines = text.split('\n').length;
  const bad = new Map(probs.filter(p => p.line).map(p => [p.line, p.message]));

  const jump = line => {
    const el = area.current;
    const ls = text.split('\n');
    const start = ls.slice(0, line - 1).reduce((n, l) => n + l.length + 1, 0);
    el.focus();
    el.setSelectionRange(start, start + (ls[line - 1] || '').length);
    el.scrollTop = Math.max(0, (line - 5) * 18);
  };

  const runDry = async () => {
    setBusy(true); setErr(null); setDone(null); setDry(null); setProbs([]);
    try {
      const answer = await apply(text, true);
      setDry({ text, answer, diffs: await diffsOf(text, answer) });
    } catch (e) {
      if (e instanceof ApiError && e.status === 400) setProbs(problems(e, text));
      else setErr(e);
    }
    setBusy(false);
  };

  const runApply = async () => {
    const n = dry.answer.results.filter(r => r.action !== 'unchanged').length;
    if (!await confirm('Apply?', html`<p>${count(n, 'object')} to change; ${count(dry.answer.resources.length, 'xDS resource')} will be pushed to every subscriber.</p>`, 'Apply')) return;
    setBusy(true); setErr(null);
    try {
      let answer;
      const only = dry.answer.results.length === 1 && dry.answer.results[0];
      if (origin && only && only.kind === origin.kind && only.namespace === origin.ns && only.name === origin.name) {
        // One object, edited from what was read: refuse to overwrite a
        // change made meanwhile (409 conflict).
        answer = await request('PUT', objPath(origin.kind, origin.ns, origin.name), { body: dry.text,
          query: { revision: origin.revision }, headers: { 'Content-Type': 'application/yaml' } });
        origin.revision = answer.revision || origin.revision;
      } else {
        answer = await apply(dry.text, false);
      }
      setDone(answer); setDry(null);
    } catch (e) {
      if (e instanceof ApiError && e.status === 400) setProbs(problems(e, text));
      else setErr(e);
    }
    setBusy(false);
  };

  const remove = async () => {
    if (!await confirm('Delete ' + origin.name + '?', html`<p>${origin.kind} ${origin.ns}/${origin.name} is deleted; proxies fall back to the default routes.</p>`, 'Delete', true)) return;
    try {
      await del(objPath(origin.kind, origin.ns, origin.name), { query: { revision: origin.revision } });
      location.hash = '#/config';
    } catch (e) { setErr(e); }
  };

  return html`<div class="editor-wrap">
    ${origin && html`<h2>${origin.kind} ${origin.ns}/${origin.name} <span class="rev">revision ${origin.revision}</span></h2>`}
    <div class="editor">
      <pre class="gutter" ref=${gutter} aria-hidden="true">${Array.from({ length: lines }, (_, i) =>
        html`<span class=${bad.has(i + 1) ? 'bad-line' : ''} title=${bad.get(i + 1) || ''}>${i + 1}</span>`)}</pre>
      <textarea id="config-editor" ref=${area} spellcheck="false" wrap="off" value=${text}
        onInput=${e => { setText(e.currentTarget.value); setDry(null); }}
        onScroll=${e => { gutter.current.scrollTop = e.currentTarget.scrollTop; }}></textarea>
    </div>
    <div class="actions">
      <button type="button" id="config-dryrun" onClick=${runDry} disabled=${busy}>Validate and diff (dry run)</button>
      <button type="button" class="primary" id="config-apply" onClick=${runApply} disabled=${busy || !dry || dry.text !== text}>Apply</button>
      ${origin && html`<button type="button" class="danger" id="config-delete" onClick=${remove}>Delete</button>`}
    </div>
    <${ErrorBox} error=${err} />
    ${probs.length > 0 && html`<ul class="problems" id="config-errors">${probs.map(p => html`
      <li data-line=${p.line}><button type="button" class="link" onClick=${() => p.line && jump(p.line)}>${p.line ? 'line ' + p.line : 'input'}</button>
        ${p.path && html` <code>${p.path}</code>`}: ${p.message}</li>`)}</ul>`}
    ${dry && html`<${DryRun} answer=${dry.answer} diffs=${dry.diffs} />`}
    ${done && html`<div class="note" id="config-applied">Applied at revision ${done.revision}:
      ${done.results.map(r => html` <span>${r.kind} ${r.namespace}/${r.name} <${Badge} kind=${r.action === 'unchanged' ? '' : 'ok'}>${r.action}</${Badge}></span>`)}</div>`}
  </div>`;
}

// diffsOf compares each object of text with what is stored now.
async function diffsOf(text, answer) {
  const objs = [];
  for (const d of splitDocs(text)) {
    const o = parseDocument(d.text, { version: '1.1' }).toJS();
    if (o && o.kind === 'List') objs.push(...(o.items || []));
    else if (o) objs.push(o);
  }
  return Promise.all(answer.results.map(async (r, i) => {
    const sent = objs[i] ? JSON.parse(JSON.stringify(objs[i])) : {};
    sent.metadata = { ...(sent.metadata || {}), namespace: r.namespace };
    const after = toYAML(sent, true);
    let before = '';
    if (r.action !== 'created') {
      try { before = toYAML(await get(objPath(r.kind, r.namespace, r.name)), true); } catch { before = ''; }
    }
    return { result: r, lines: r.action === 'unchanged' ? [] : hunks(diffLines(before, after)) };
  }));
}

function DryRun({ answer, diffs }) {
  return html`<section class="dryrun" id="config-diff">
    <h3>Dry run: what would change</h3>
    ${diffs.map(({ result: r, lines }) => html`<div class="diff-obj">
      <p><${Badge} kind=${r.action === 'unchanged' ? '' : r.action === 'created' ? 'ok' : 'warn'}>${r.action}</${Badge}> ${r.kind} ${r.namespace}/${r.name}</p>
      ${(r.warnings || []).map(w => html`<p class="warning">warning: ${w}</p>`)}
      ${lines.length > 0 && html`<pre class="diff">${lines.map(l => html`<span class=${'d' + (l.op === ' ' ? 'ctx' : l.op === '+' ? 'add' : l.op === '-' ? 'del' : 'gap')}>${l.op === '@' ? l.text : l.op + ' ' + l.text}\n</span>`)}</pre>`}
    </div>`)}
    <p class="muted" id="config-would-push">xDS resources this would push (nothing is pushed until Apply): ${answer.resources.length ? answer.resources.map(r => `${r.type} ${r.name}`).join(', ') : 'none'}</p>
  </section>`;
}
