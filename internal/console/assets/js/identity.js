// identity.js: workload identity: the certificate authority's trust
// domain and roots (which signs, until when), and the certificates this
// server signed lately, with their expiry (docs/security.md).
import { html } from '../vendor/lib.js';
import { get } from './api.js';
import { usePoll, ErrorBox, Badge, Empty, when, ago, count } from './ui.js';

// expiry is a certificate's state as a person reads it: expired, expiring
// within a tenth of a day, or valid.
export function expiry(notAfter, now = Date.now()) {
  const left = new Date(notAfter).getTime() - now;
  if (left <= 0) return ['bad', 'expired'];
  if (left < 2.4 * 3600 * 1000) return ['warn', 'expiring'];
  return ['ok', 'valid'];
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
    <section><h2>Certificates signed by this server ${certs.data && html`<span class="muted">(${count(list.length, 'certificate')}, newest first)</span>`}</h2>
      <${ErrorBox} error=${certs.error} />
      ${certs.data && !list.length && html`<${Empty}>No certificate signed since this server started. Workloads get theirs with <code>sextant identity agent</code>.</${Empty}>`}
      ${list.length > 0 && html`<table id="cert-list"><thead><tr><th>identity</th><th>state</th><th>signed</th><th>valid until</th><th>serial</th></tr></thead>
        <tbody>${list.map(c => {
          const [kind, label] = expiry(c.notAfter);
          return html`<tr data-identity=${c.identity}>
            <td><code>${c.identity}</code></td><td><${Badge} kind=${kind}>${label}</${Badge}></td>
            <td title=${when(c.issuedAt)}>${ago(c.issuedAt)}</td><td>${when(c.notAfter)}</td><td><code>${c.serial}</code></td></tr>`;
        })}</tbody></table>`}
    </section>`;
}
