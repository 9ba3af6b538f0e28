// app.js: the console's shell: routes (the URL's #fragment), navigation,
// the ACL token prompt, and the pages.
import { html, render, useState, useEffect } from '../vendor/lib.js';
import { get, setToken, setTokenPrompt, token, ApiError } from './api.js';
import { ModalHost, openModal } from './ui.js';
import { Overview } from './overview.js';
import { ServiceList, ServicePage } from './services.js';
import { ConfigPage } from './config.js';
import { PushPage } from './push.js';
import { CallsPage } from './calls.js';
import { PlacementPage } from './placement.js';
import { IdentityPage } from './identity.js';
import { GatewaysPage } from './gateways.js';
import { GraphPage } from './graph.js';
import { KVPage } from './kv.js';

// parseRoute reads "#/services/default/orders?selector=a%3Db" into
// {parts: ['services', 'default', 'orders'], params: URLSearchParams}.
export function parseRoute(hash) {
  const h = (hash || '').replace(/^#\/?/, '');
  const [p, q] = h.split('?');
  return { parts: p.split('/').filter(Boolean).map(decodeURIComponent), params: new URLSearchParams(q || '') };
}

function useRoute() {
  const [route, setRoute] = useState(parseRoute(location.hash));
  useEffect(() => {
    const on = () => setRoute(parseRoute(location.hash));
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return route;
}

const pages = [
  ['', 'Overview'], ['services', 'Services'], ['config', 'Routing config'], ['gateways', 'Gateways'],
  ['push', 'Push status'], ['calls', 'Calls'], ['placement', 'Placement'], ['identity', 'Identity'], ['kv', 'KV'],
];

function TokenForm({ message, close }) {
  const [t, setT] = useState('');
  return html`<form onSubmit=${e => { e.preventDefault(); if (t.trim()) close(t.trim()); }}>
    <p>${message}</p>
    <p class="muted">Paste an ACL token (<code>sxt_…</code>, from <code>sextant acl bootstrap</code> or <code>sextant acl token create</code>). It is kept in this tab's session storage only, and sent
      to this server as <code>Authorization: Bearer</code>.</p>
    <input id="token-input" type="password" autocomplete="off" placeholder="sxt_…" value=${t}
      onInput=${e => setT(e.currentTarget.value)} autofocus />
    <div class="actions">
      <button type="button" onClick=${() => close(null)}>Cancel</button>
      <button type="submit" class="primary" id="token-ok">Use token</button>
    </div>
  </form>`;
}

setTokenPrompt(message => openModal('This server needs a token', close => html`<${TokenForm} message=${message} close=${close} />`)
  .then(t => t || Promise.reject(new ApiError(401, 'unauthenticated', 'no token given: ' + message))));

function Identity() {
  const [self, setSelf] = useState(null);
  const [err, setErr] = useState(null);
  useEffect(() => {
    // A server still loading its catalog answers 503 (to every route but
    // /healthz and /readyz): ask again until it has loaded, as the pages'
    // polls do, rather than say "not signed in" until a reload.
    let timer = 0;
    let live = true;
    const load = () => get('/v1/acl/self').then(s => { if (live) { setSelf(s); setErr(null); } }, e => {
      if (!live) return;
      setErr(e);
      if (e.status === 503) timer = setTimeout(load, 2000);
    });
    load();
    return () => { live = false; clearTimeout(timer); };
  }, []);
  if (err && err.status === 503) return html`<span class="who muted" title=${err.message}>server loading…</span>`;
  if (err) return html`<span class="who muted" title=${err.message}>not signed in</span>`;
  if (!self) return null;
  if (!self.acl_enabled) return html`<span class="who muted">ACLs off</span>`;
  const name = self.anonymous ? 'anonymous' : (self.description || (self.accessor_id || '').slice(0, 8));
  return html`<span class="who">${name}
    ${token() && html` <button type="button" class="link" onClick=${() => { setToken(''); location.reload(); }}>sign out</button>`}</span>`;
}

function Page({ route }) {
  const [p, ...rest] = route.parts;
  switch (p || '') {
    case '': return html`<${Overview} />`;
    case 'services':
      return rest.length >= 2 ? html`<${ServicePage} ns=${rest[0]} name=${rest[1]} params=${route.params} />`
        : html`<${ServiceList} params=${route.params} />`;
    case 'config': return html`<${ConfigPage} parts=${rest} params=${route.params} />`;
    case 'push': return html`<${PushPage} />`;
    case 'calls': return html`<${CallsPage} params=${route.params} />`;
    case 'graph': return html`<${GraphPage} params=${route.params} />`;
    case 'placement': return html`<${PlacementPage} />`;
    case 'identity': return html`<${IdentityPage} />`;
    case 'gateways': return html`<${GatewaysPage} />`;
    case 'kv': return html`<${KVPage} ns=${rest[0] || 'default'} params=${route.params} />`;
  }
  return html`<p class="empty">No page here. <a href="#/">Overview</a></p>`;
}

function App() {
  const route = useRoute();
  const current = route.parts[0] || '';
  useEffect(() => {
    const title = (pages.find(([k]) => k === current) || [, 'Sextant'])[1];
    document.title = title + ' · Sextant';
  }, [current]);
  return html`
    <header class="top">
      <a class="brand" href="#/"><img src="favicon.svg" alt="" width="20" height="20" /> Sextant</a>
      <nav>${pages.map(([k, label]) => html`<a href=${'#/' + k} class=${k === current ? 'active' : ''} id=${'nav-' + (k || 'overview')}>${label}</a>`)}</nav>
      <${Identity} />
    </header>
    <main key=${route.parts.slice(0, 3).join('/')}><${Page} route=${route} /></main>
    <${ModalHost} />`;
}

const root = document.getElementById('app');
root.textContent = ''; // the "Loading" line: render does not replace what is there
render(html`<${App} />`, root);
