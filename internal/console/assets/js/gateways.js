// gateways.js: the edge: Istio Gateway objects (their servers: ports,
// hosts, TLS and the certificate each names, with its expiry, and the
// VirtualServices bound to them), the gateways running now (registered
// with sextant.role=gateway: the TLS listeners and certificates each serves,
// read from its admin API), every TLS secret's expiry, and the control
// plane's warnings (docs/controlplane.md, "Gateways").
import { html } from '../vendor/lib.js';
import { get, gateways, gatewayAddr, gateway } from './api.js';
import { usePoll, ErrorBox, Badge, Empty, when, count, instanceState } from './ui.js';

const day = 86400 * 1000;

// certState is a served certificate's state: missing, expired, expiring
// within 14 days (renew it), or valid.
export function certState(notAfter, now = Date.now()) {
  if (!notAfter) return ['bad', 'missing'];
  const left = new Date(notAfter).getTime() - now;
  if (left <= 0) return ['bad', 'expired'];
  if (left < 14 * day) return ['warn', `expires in ${Math.ceil(left / day)} d`];
  return ['ok', 'valid'];
}

// boundTo tells whether a VirtualService (namespace ns) names the Gateway
// gwNs/gwName in its gateways: "name" (its own namespace) or "ns/name".
export function boundTo(vs, gwNs, gwName) {
  const ns = vs.metadata.namespace || 'default';
  return ((vs.spec && vs.spec.gateways) || []).some(ref => {
    const i = ref.indexOf('/');
    return i < 0 ? ns === gwNs && ref === gwName : ref.slice(0, i) === gwNs && ref.slice(i + 1) === gwName;
  });
}

const nsOf = o => o.metadata.namespace || 'default';

function CertCell({ secret }) {
  if (!secret) return html`<${Badge} kind="bad">no such secret</${Badge}>`;
  const [kind, label] = certState(secret.not_after);
  return html`<${Badge} kind=${kind}>${label}</${Badge}> <span class="muted">until ${when(secret.not_after)}</span>`;
}

function GatewayObject({ gw, vss, secrets }) {
  const ns = nsOf(gw);
  const bound = vss.filter(v => boundTo(v, ns, gw.metadata.name));
  const servers = (gw.spec && gw.spec.servers) || [];
  return html`<section class="gateway-object" data-gateway=${ns + '/' + gw.metadata.name}>
    <h2><a href=${`#/config/Gateway/${ns}/${gw.metadata.name}`}>${ns}/${gw.metadata.name}</a>
      <span class="muted"> ${count(servers.length, 'server')}, ${count(bound.length, 'VirtualService')} bound</span></h2>
    <table class="gateway-servers"><thead><tr><th>port</th><th>protocol</th><th>hosts</th><th>TLS</th><th>certificate</th></tr></thead>
      <tbody>${servers.map(s => {
        const tls = s.tls || {};
        const cred = tls.credentialName;
        // PASSTHROUGH is the mode's zero value: JSON leaves it out.
        const secure = ['HTTPS', 'TLS'].includes((s.port.protocol || '').toUpperCase());
        const mode = tls.mode || (secure ? 'PASSTHROUGH' : '');
        const sec = cred ? secrets.get(ns + '/' + cred) : null;
        return html`<tr data-port=${s.port.number}>
          <td>${s.port.number} <span class="muted">${s.port.name}</span></td><td>${s.port.protocol}</td>
          <td>${(s.hosts || []).map(h => html`<code>${h}</code> `)}</td>
          <td>${mode || (tls.httpsRedirect ? 'redirect to HTTPS' : html`<span class="muted">plaintext</span>`)}</td>
          <td class="cert">${cred ? html`<code>${cred}</code> ${secrets.readable ? html`<${CertCell} secret=${sec} />` : ''}`
            : html`<span class="muted">${mode === 'PASSTHROUGH' || mode === 'AUTO_PASSTHROUGH' ? "the endpoint's" : '–'}</span>`}</td>
        </tr>`;
      })}</tbody></table>
    ${bound.length > 0 && html`<p class="muted">Bound: ${bound.map(v => html`<a href=${`#/config/VirtualService/${nsOf(v)}/${v.metadata.name}`}>${nsOf(v)}/${v.metadata.name}</a> `)}</p>`}
  </section>`;
}

// Running is one registered gateway: what its admin API says it serves.
function Running({ g }) {
  const base = gatewayAddr(g);
  const conf = usePoll(signal => gateway(base, '/v1/config', {}, signal), 5000, [base]);
  const c = conf.data;
  const [hk, hl] = instanceState(g);
  const node = g.metadata['sextant.node'] || g.id;
  return html`<section class="gateway-running" data-node=${node}>
    <h2>${node} <${Badge} kind=${hk}>${hl}</${Badge}>
      ${c && c.xds && html` <${Badge} kind=${c.xds.connected ? 'ok' : 'bad'}>${c.xds.connected ? 'connected' : 'control plane unreachable'}</${Badge}>`}
      <span class="muted"> admin ${base}</span></h2>
    <${ErrorBox} error=${conf.error} prefix=${`Gateway admin API ${base}: `} />
    ${c && html`<p class="muted">Listeners: <code>${c.listener || '–'}</code> (plaintext)${(c.tls || []).filter(p => p.listener).map(p => html`, <code>${p.listener}</code> (TLS, port ${p.port})`)}; config applied ${when(c.applied_at)}${c.xds && c.xds.nacks ? `; ${count(c.xds.nacks, 'NACK')} (last: ${c.xds.last_nack})` : ''}</p>`}
    ${c && (c.tls || []).length === 0 && html`<p class="muted">Serves no TLS port (start it with <code>--tls-listen</code>).</p>`}
    ${c && (c.tls || []).length > 0 && html`<table class="tls-chains"><thead><tr><th>port</th><th>server names</th><th>client certificates</th><th>certificate</th><th>valid until</th><th>state</th></tr></thead>
      <tbody>${c.tls.flatMap(p => !p.chains.length
        ? [html`<tr data-port=${p.port}><td>${p.port}</td><td colspan="5" class="muted">no TLS listener for this port yet</td></tr>`]
        : p.chains.map(ch => {
          const certs = ch.certificates.length ? ch.certificates : [null];
          return certs.map(crt => {
            const through = ch.passthrough_clusters;
            const [kind, label] = !ch.ready ? ['bad', 'not ready'] : through ? ['', 'passthrough'] : certState(crt && crt.not_after);
            return html`<tr data-port=${p.port} data-secret=${crt ? crt.secret : ''}>
              <td title=${'listener ' + p.listener}>${p.port}</td>
              <td>${ch.server_names.length ? ch.server_names.map(n => html`<code>${n}</code> `) : html`<span class="muted">${ch.default ? 'default' : 'any'}</span>`}</td>
              <td>${through ? '–' : ch.client_certificate}</td>
              <td>${crt ? html`<code title=${crt.subject}>${crt.secret || 'inline'}</code>`
                : through ? html`<span class="muted">the endpoint's, of</span> ${through.map(c => html`<code>${c}</code> `)}`
                : html`<span class="muted" title=${ch.not_ready}>no certificate</span>`}</td>
              <td>${crt ? when(crt.not_after) : '–'}</td>
              <td><${Badge} kind=${kind}>${label}</${Badge}></td></tr>`;
          });
        }))}</tbody></table>`}
  </section>`;
}

export function GatewaysPage() {
  const cfg = usePoll(signal => get('/v1/config', { signal }), 5000);
  const sec = usePoll(signal => get('/v1/secrets', { signal }), 10000);
  const push = usePoll(signal => get('/v1/push/status', { signal }), 5000);
  const gws = usePoll(gateways, 10000);
  const items = cfg.data ? cfg.data.items : [];
  const objects = items.filter(o => o.kind === 'Gateway');
  const vss = items.filter(o => o.kind === 'VirtualService');
  const secrets = new Map((sec.data ? sec.data.items : []).map(s => [s.namespace + '/' + s.name, s]));
  secrets.readable = !!sec.data;
  const warnings = push.data ? push.data.warnings || [] : [];
  const running = gws.data || [];
  return html`
    <h1>Gateways ${cfg.data && html`<span class="rev">revision ${cfg.data.revision}</span>`}</h1>
    <${ErrorBox} error=${cfg.error} />
    ${warnings.length > 0 && html`<div class="error" role="alert" id="gateway-warnings"><strong>The control plane warns:</strong>
      <ul>${warnings.map(w => html`<li>${w}</li>`)}</ul></div>`}
    <section><h2>Gateway objects</h2>
      ${cfg.data && !objects.length && html`<${Empty}>No Gateway. Apply one (Istio's <code>networking.istio.io/v1</code> Gateway) with <code>sextant config apply -f</code> or under <a href="#/config">Routing config</a>.</${Empty}>`}
      ${sec.error && objects.length > 0 && html`<${ErrorBox} error=${sec.error} prefix="Secrets (certificate expiry): " />`}
    </section>
    ${objects.map(gw => html`<${GatewayObject} key=${nsOf(gw) + '/' + gw.metadata.name} gw=${gw} vss=${vss} secrets=${secrets} />`)}
    <section><h2>Running gateways</h2>
      <${ErrorBox} error=${gws.error} />
      ${gws.data && !running.length && html`<${Empty}>No gateway is registered. Start one with <code>sextant gateway --registry http://${location.host}</code>.</${Empty}>`}
    </section>
    ${running.map(g => html`<${Running} key=${g.id} g=${g} />`)}
    ${sec.data && html`<section><h2>TLS secrets <span class="muted">(${count(sec.data.items.length, 'secret')})</span></h2>
      ${!sec.data.items.length && html`<${Empty}>No secret. Create one with <code>sextant secret create tls NAME --cert FILE --key FILE</code>.</${Empty}>`}
      ${sec.data.items.length > 0 && html`<table id="secret-list"><thead><tr><th>secret</th><th>subject</th><th>names</th><th>client CA</th><th>valid until</th><th>state</th></tr></thead>
        <tbody>${sec.data.items.map(s => {
          const [kind, label] = certState(s.not_after);
          return html`<tr data-secret=${s.namespace + '/' + s.name}><td><code>${s.namespace}/${s.name}</code></td><td>${s.subject}</td>
            <td>${(s.dns_names || []).map(n => html`<code>${n}</code> `)}</td><td>${s.ca_certificates ? count(s.ca_certificates, 'certificate') : '–'}</td>
            <td>${when(s.not_after)}</td><td><${Badge} kind=${kind}>${label}</${Badge}></td></tr>`;
        })}</tbody></table>`}
    </section>`}`;
}
