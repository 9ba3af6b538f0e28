// placement.js: the scheduler's nodes (allocatable against requested),
// placements, and a "try a placement" form (shared/API.md, "Placement").
import { html, useState, parseDocument } from '../vendor/lib.js';
import { get, post, ApiError } from './api.js';
import { usePoll, ErrorBox, Badge, KV, Empty, fmtNum, count, nbsp } from './ui.js';

const suffixes = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60,
  n: 1e-9, u: 1e-6, m: 1e-3, '': 1, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18 };

// quantity reads a Kubernetes quantity ("500m", "1.5Gi", "2e3") as a number.
export function quantity(s) {
  if (s === undefined || s === null || s === '') return 0;
  const m = String(s).trim().match(/^([+-]?[0-9.]+)(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$/);
  if (!m) return NaN;
  return Number(m[1] + (m[2] || '')) * (m[3] ? suffixes[m[3]] : 1);
}

function fmtQty(v, res) {
  if (res === 'cpu') return count(v, 'core');
  if (/memory|storage/.test(res)) {
    for (const [u, f] of [['Ti', 2 ** 40], ['Gi', 2 ** 30], ['Mi', 2 ** 20], ['Ki', 2 ** 10]]) if (v >= f) return fmtNum(v / f) + nbsp + u;
    return fmtNum(v) + nbsp + 'B';
  }
  return fmtNum(v);
}

function Bar({ res, requested, allocatable }) {
  const pct = allocatable > 0 ? Math.min(100, (100 * requested) / allocatable) : 0;
  const kind = pct >= 90 ? 'bad' : pct >= 70 ? 'warn' : 'ok';
  return html`<div class="bar-line" data-res=${res} data-pct=${Math.round(pct)}>
    <span class="bar-label">${res}</span>
    <span class="bar"><span class=${'bar-fill ' + kind} style=${`width:${pct}%`}></span></span>
    <span class="bar-text">${fmtQty(requested, res)} / ${fmtQty(allocatable, res)}</span></div>`;
}

// usePaged reads one page of a listing at a time, following page tokens.
function usePaged(path, params, key) {
  const [tokens, setTokens] = useState(['']);
  const p = usePoll(signal => get(path, { query: { ...params, limit: 50, page_token: tokens[tokens.length - 1] }, signal }), 5000,
    [path, JSON.stringify(params), tokens.join(',')]);
  const reset = () => setTokens(['']);
  const pager = html`<div class="pager">
    <button type="button" disabled=${tokens.length < 2} onClick=${() => setTokens(tokens.slice(0, -1))}>← Previous</button>
    <span class="muted">page ${tokens.length}</span>
    <button type="button" disabled=${!p.data || !p.data.next_page_token} onClick=${() => setTokens([...tokens, p.data.next_page_token])}>Next →</button></div>`;
  return { ...p, items: p.data ? p.data[key] || [] : [], pager, reset };
}

export function PlacementPage() {
  const [selText, setSelText] = useState('');
  const [selector, setSelector] = useState('');
  const nodes = usePaged('/v1/nodes', { selector }, 'items');
  const placements = usePaged('/v1/placements', {}, 'items');
  if (nodes.error && nodes.error.status === 404 && nodes.error.field !== 'selector') {
    return html`<h1>Placement</h1><${Empty}>This server runs no scheduler (<code>GET /v1/nodes</code>: ${nodes.error.message}).</${Empty}>`;
  }
  const selErr = nodes.error && nodes.error.field === 'selector' ? nodes.error : null;
  return html`
    <h1>Placement ${nodes.data && html`<span class="rev">revision ${nodes.data.revision}</span>`}</h1>
    <section><h2>Nodes</h2>
      <form class="toolbar" onSubmit=${e => { e.preventDefault(); setSelector(selText.trim()); nodes.reset(); }}>
        <label class="grow">Label selector
          <input id="node-selector" class=${selErr ? 'invalid' : ''} value=${selText} spellcheck="false" placeholder="zone=z1,disktype in (ssd)"
            onInput=${e => setSelText(e.currentTarget.value)} onChange=${e => { setSelector(e.currentTarget.value.trim()); nodes.reset(); }} />
        </label>
      </form>
      <div class="field-error" id="node-selector-error">${selErr ? selErr.message : ''}</div>
      <${ErrorBox} error=${!selErr && nodes.error} />
      ${nodes.data && nodes.items.length === 0 && html`<${Empty}>No nodes${selector ? ' match' : ''}.</${Empty}>`}
      <div class="nodes" id="node-list">${nodes.items.map(it => {
        const n = it.node, alloc = (n.status && n.status.allocatable) || {}, req = it.requested || {};
        return html`<div class="node" data-node=${n.metadata.name}>
          <div class="node-head"><span class="strong">${n.metadata.name}</span>
            ${n.spec && n.spec.unschedulable && html` <${Badge} kind="warn">unschedulable</${Badge}>`}
            ${(n.spec && n.spec.taints || []).map(t => html` <${Badge} kind="">${t.key}${t.value ? '=' + t.value : ''}:${t.effect}</${Badge}>`)}
            <span class="muted placed-count"> ${count(it.placements, 'placement')}</span></div>
          <${Bar} res="cpu" requested=${quantity(req.cpu)} allocatable=${quantity(alloc.cpu)} />
          <${Bar} res="memory" requested=${quantity(req.memory)} allocatable=${quantity(alloc.memory)} />
          <${Bar} res="pods" requested=${it.placements} allocatable=${quantity(alloc.pods)} />
          <div class="meta"><${KV} map=${n.metadata.labels} /></div></div>`;
      })}</div>
      ${nodes.pager}
    </section>
    <${TryPlacement} />
    <section><h2>Placements</h2>
      <${ErrorBox} error=${placements.error} />
      ${placements.data && placements.items.length === 0 ? html`<p class="muted">No placements.</p>` : html`
      <table id="placement-list"><thead><tr><th>namespace/name</th><th>node</th><th>requests</th><th>labels</th></tr></thead>
        <tbody>${placements.items.map(p => html`<tr><td class="strong">${p.namespace}/${p.name}</td><td>${p.node}</td>
          <td><${KV} map=${p.requests} /></td><td><${KV} map=${p.labels} /></td></tr>`)}</tbody></table>`}
      ${placements.pager}
    </section>`;
}

const podTemplate = `apiVersion: v1
kind: Pod
metadata:
  namespace: default
  labels: {app: web}
spec:
  nodeSelector: {}
  containers:
  - name: app
    resources:
      requests: {cpu: 500m, memory: 256Mi}
`;

// TryPlacement asks the scheduler where a pod would go with a dry run
// (POST /v1/placements?dry_run=true): the scheduler answers as it would
// place it and reserves nothing, so nothing needs undoing.
function TryPlacement() {
  const [text, setText] = useState(podTemplate);
  const [out, setOut] = useState(null);
  const [err, setErr] = useState(null);
  const [busy, setBusy] = useState(false);
  const run = async e => {
    e.preventDefault();
    setErr(null); setOut(null);
    let pod;
    try {
      pod = parseDocument(text, { version: '1.1' }).toJS() || {};
    } catch (x) { setErr(new ApiError(400, 'invalid_argument', 'not YAML: ' + x.message)); return; }
    // A name is required; one already placed is a 409 even in a dry run.
    pod.metadata = { ...(pod.metadata || {}) };
    if (!pod.metadata.name) pod.metadata.name = 'console-try-' + Math.random().toString(16).slice(2, 10);
    setBusy(true);
    try {
      const a = await post('/v1/placements', pod, { query: { dry_run: 'true' } });
      setOut(a.results[0]);
    } catch (x) { setErr(x); }
    setBusy(false);
  };
  return html`<section class="try"><h2>Try a placement</h2>
    <form onSubmit=${run}>
      <p class="muted">A Pod in Kubernetes' shape: <code>nodeSelector</code>, <code>affinity</code>, <code>tolerations</code>, <code>topologySpreadConstraints</code>, container <code>resources.requests</code>. A dry run: nothing is
        placed or reserved.</p>
      <textarea id="try-pod" rows="12" spellcheck="false" value=${text} onInput=${e => setText(e.currentTarget.value)}></textarea>
      <div class="actions"><button type="submit" class="primary" id="try-run" disabled=${busy}>Where would it go?</button></div>
    </form>
    <${ErrorBox} error=${err} />
    ${out && (out.node
      ? html`<div class="note" id="try-result"><${Badge} kind="ok">fits</${Badge}> node <strong id="try-node">${out.node}</strong> would take it (dry run: nothing was placed)</div>`
      : html`<div class="error" id="try-result"><${Badge} kind="bad">unschedulable</${Badge}> <span id="try-reasons">${out.unschedulable}</span></div>`)}
  </section>`;
}
