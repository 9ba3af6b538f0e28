// api.js: every call the console makes. The registry API is same-origin and
// gets the user's ACL token (kept in sessionStorage, sent as a Bearer token);
// a gateway's admin API is another origin, read without credentials (CORS).
// There is no other channel to the server: whatever the console does, a
// script with the same token could do through the same routes.

const TOKEN_KEY = 'sextant.token';

// ApiError carries the API's error body: {"error":{"code","message","field"}}.
export class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field || '';
  }
}

export function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }

export function setToken(t) {
  if (t) sessionStorage.setItem(TOKEN_KEY, t);
  else sessionStorage.removeItem(TOKEN_KEY);
}

// The app installs the prompt: (message) => Promise<token>, rejecting when
// the user gives up. Concurrent 401s share one prompt.
let prompt = null;
let pending = null;
export function setTokenPrompt(fn) { prompt = fn; }

function askToken(message) {
  if (!prompt) return Promise.reject(new ApiError(401, 'unauthenticated', message));
  if (!pending) {
    pending = prompt(message).then(t => { setToken(t); return t; }).finally(() => { pending = null; });
  }
  return pending;
}

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? '?' + s : '';
}

// request calls the registry API and returns the decoded JSON answer (or,
// with text: true, {text, revision}). A 401 asks the user for a token and
// tries again with it, up to three times. A 401 to a token that is no
// longer the one stored (another request's prompt was answered while this
// one was on its way) is retried with the stored one, without asking: it
// says nothing about that token, and asking again would leave this request
// waiting on a prompt for a token the user has already given.
export async function request(method, path, opts = {}) {
  for (let asked = 0; ;) {
    const headers = { ...(opts.headers || {}) };
    const t = token();
    if (t) headers['Authorization'] = 'Bearer ' + t;
    let body = opts.body;
    if (body !== undefined && typeof body !== 'string') {
      body = JSON.stringify(body);
      headers['Content-Type'] = 'application/json';
    }
    const res = await fetch(path + query(opts.query), { method, headers, body, signal: opts.signal, cache: 'no-store' });
    const text = await res.text();
    let data = null;
    if (!opts.text) {
      try { data = text ? JSON.parse(text) : null; } catch { data = null; }
    }
    if (res.status === 401 && token() !== t) continue;
    if (res.status === 401 && asked++ < 3) {
      const msg = (data && data.error && data.error.message) || 'this server needs an ACL token';
      await askToken(t ? 'The token was refused: ' + msg : msg);
      continue;
    }
    if (!res.ok) {
      let e = data && data.error;
      if (!e) { try { e = JSON.parse(text).error; } catch { e = null; } }
      e = e || {};
      throw new ApiError(res.status, e.code || 'http_' + res.status, e.message || text.trim() || res.statusText, e.field);
    }
    if (opts.text) return { text, revision: Number(res.headers.get('X-Sextant-Revision') || 0) };
    return data;
  }
}

export const get = (path, opts) => request('GET', path, opts);
export const post = (path, body, opts = {}) => request('POST', path, { ...opts, body });
export const put = (path, body, opts = {}) => request('PUT', path, { ...opts, body });
export const del = (path, opts) => request('DELETE', path, opts);

export const enc = encodeURIComponent;

// services lists every service of every namespace the token may read.
export async function allServices(signal) {
  const ns = await get('/v1/namespaces', { signal });
  const lists = await Promise.all(ns.namespaces.map(n => get(`/v1/namespaces/${enc(n)}/services`, { signal })));
  const services = lists.flatMap(l => l.services);
  return { revision: ns.revision, namespaces: ns.namespaces, services };
}

// listAll follows next_page_token through a paged listing, up to max items;
// it returns {items, more, revision}.
export async function listAll(path, params, key, max, signal) {
  let items = [];
  let token = '';
  let revision = 0;
  for (;;) {
    const page = await get(path, { query: { ...params, page_token: token }, signal });
    revision = page.revision;
    items = items.concat(page[key] || []);
    token = page.next_page_token || '';
    if (!token) return { items, more: false, revision };
    if (items.length >= max) return { items, more: true, revision };
  }
}

// gatewayAddr is where a registered gateway's admin API answers: its
// sextant.admin metadata, with an unspecified host (0.0.0.0, ::) replaced
// by the instance's host or, failing that, this page's.
export function gatewayAddr(instance) {
  const admin = (instance.metadata || {})['sextant.admin'] || '';
  const m = admin.match(/^\[?(.*?)\]?:(\d+)$/);
  if (!m) return '';
  let host = m[1];
  if (host === '' || host === '0.0.0.0' || host === '::') {
    host = instance.host && instance.host !== '0.0.0.0' && instance.host !== '::' ? instance.host : location.hostname;
  }
  if (host.includes(':')) host = '[' + host + ']';
  return `http://${host}:${m[2]}`; // the admin API serves plain HTTP only
}

// gateway reads a gateway's admin API (no credentials: it has none).
export async function gateway(base, path, params, signal) {
  const res = await fetch(base + path + query(params), { signal, cache: 'no-store' });
  const text = await res.text();
  let data = null;
  try { data = JSON.parse(text); } catch { data = null; }
  if (!res.ok) {
    const e = (data && data.error) || {};
    throw new ApiError(res.status, e.code || 'http_' + res.status, e.message || text.trim());
  }
  return data;
}

// gateways finds the gateways registered in the registry (metadata
// sextant.role=gateway), whatever service name they registered under.
export async function gateways(signal) {
  const { items } = await listAll('/v1/instances', { selector: 'sextant.role=gateway', limit: 1000 }, 'instances', 10000, signal);
  return items;
}
