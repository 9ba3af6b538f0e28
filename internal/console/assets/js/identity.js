// identity.js: workload identity: the certificate authority's trust
// domain and roots (which signs, until when), the certificates this server
// signed lately, with their expiry, and the calls the gateways' RBAC
// filters denied in the last hour (docs/security.md).
import { html } from '../vendor/lib.js';
import { get, gateways, gatewayAddr, gateway } from './api.js';
import { usePoll, ErrorBox, Badge, Empty, when, ago, count } from './ui.js';

// expiry is a certificate's state as a person reads it: expired, expiring
// within a tenth of a day, or valid.
export function expiry(notAfter, now = Date.now()) {
  const left = new Date(notAfter).getTime() - now;
  if (left <= 0) return ['bad', 'expired'];
  if (left < 2.4 * 3600 * 1000) return ['warn', 'expiring'];
  return ['ok', 'valid'];
}

// deniedCalls reads the calls each registered gateway's RBAC filters
// denied in the last hour (reason rbac_denied), newest first: at most 20
// services a gateway, 50 calls a service, 100 in all.
async function deniedCalls(signal) {
  const gws = await gateways(signal);
  const calls = [];
  const failed = [];
  const from = Date.now() - 3600 * 1000;
  for (const g of gws.slice(0, 10)) {
    const base = gatewayAddr(g);
    if (!base) continue;
    const node = g.metadata['sextant.node'] || g.id;
    try {
      const { services } = await gateway(base, '/v1/calls/services', {}, signal);
      for (const svc of services.slice(0, 20)) {
        const r = await gateway(base, '/v1/calls', { service: svc, reason: 'rbac_denied', from, limit: 50 }, signal);
        for (const c of r.calls) calls.push({ ...c, gateway: node });
      }
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      failed.push(`${node}: ${e.message}`);
    }
  }
  calls.sort((a, b) => new Date(b.start) - new Date(a.start));
  return { calls: calls.slice(0, 100), gateways: gws.length, failed };
}

function DeniedCalls() {
  const { data, error } = usePoll(deniedCalls, 10000);
  return html`<section><h2>Calls denied by authorization policies <span class="muted">(last hour, the gateways' RBAC filters)</span></h2>
    <${ErrorBox} error=${error} />
    ${data && data.failed.map(f => html`<div class="error" role="alert">Gateway admin API ${f}</div>`)}
    ${data && !data.gateways && html`<${Empty}>No gateway is registered: denied calls are read from each gateway's call log.</${Empty}>`}
    ${data && data.gateways > 0 && !data.calls.length && html`<${Empty}>No call was denied in the last hour.</${Empty}>`}
    ${data && data.calls.length > 0 && html`<table id="denied-calls"><thead><tr><th>when</th><th>gateway</th><th>service</th><th>route</th><th>caller</th><th>request</th><th>status</th><th>policy</th></tr></thead>
      <tbody>${data.calls.map(c => html`<tr data-service=${c.service}>
        <td title=${when(c.start)}>${ago(c.start)}</td><td>${c.gateway}</td><td class="strong">${c.service}</td><td><code>${c.route || '–'}</code></td>
        <td><code>${c.principal || (c.peer_ip ? c.peer_ip : '–')}</code></td><td><code>${c.method ? `${c.method} ${c.path || ''}` : '–'}</code></td>
        <td><${Badge} kind="bad">${c.status}</${Badge}></td><td><code>${c.detail || '–'}</code></td></tr>`)}</tbody></table>`}
  </section>`;
}

export function IdentityPage() {
  const bundle = usePoll(signal => get('/v1/identity/bundle', { signal }), 10000);
  const certs = usePoll(signal => get('/v1/identity/certificates', { signal }), 5000);
  const b = bundle.data;
  const list = certs.data ? certs.data.certificates : [];
  return html`
    <h1>Identity ${b && html`<span class="rev">trust domain <code id="trust-domain">${b.trustDomain}</code></span>`}</h1>
    <${ErrorBox} error=${bundle.error} prefix="Trust bundle: " />
    <section><h2>Roots</h2>
      ${b && html`<table id="root-list"><thead><tr><th>subject</th><th>role</th><th>valid from</th><th>valid until</th><th>SHA-256</th></tr></thead>
        <tbody>${b.roots.map(r => html`<tr data-signing=${r.signing}>
          <td>${r.subject}</td>
          <td>${r.signing ? html`<${Badge} kind="ok">signing</${Badge}>` : html`<${Badge} kind="warn">trusted until its certificates expire</${Badge}>`}</td>
          <td>${when(r.notBefore)}</td><td>${when(r.notAfter)}</td>
          <td><code title=${r.sha256}>${r.sha256.slice(0, 16)}…</code></td></tr>`)}</tbody></table>`}
    </section>
    <section><h2>Certificates signed by this server ${certs.data && html`<span class="muted" id="cert-count">(${count(list.length, 'certificate')} since it started${certs.data.since ? ' at ' + when(certs.data.since) : ''}, newest first)</span>`}</h2>
      <${ErrorBox} error=${certs.error} />
      ${certs.data && !list.length && html`<${Empty}>No certificate signed since this server started${certs.data.since ? ' at ' + when(certs.data.since) : ''}: the list is kept in memory, so a restart empties it; certificates signed before stay valid until they expire. Workloads get theirs with <code>sextant identity agent</code>.</${Empty}>`}
      ${list.length > 0 && html`<table id="cert-list"><thead><tr><th>identity</th><th>state</th><th>signed</th><th>valid until</th><th>serial</th></tr></thead>
        <tbody>${list.map(c => {
          const [kind, label] = expiry(c.notAfter);
          return html`<tr data-identity=${c.identity}>
            <td><code>${c.identity}</code></td><td><${Badge} kind=${kind}>${label}</${Badge}></td>
            <td title=${when(c.issuedAt)}>${ago(c.issuedAt)}</td><td>${when(c.notAfter)}</td><td><code>${c.serial}</code></td></tr>`;
        })}</tbody></table>`}
    </section>
    <${DeniedCalls} />`;
}
