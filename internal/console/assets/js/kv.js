// kv.js: the KV store of a namespace (Consul's KV, docs/api.md "KV"): its
// keys as a tree by "/", a key's value (text, JSON pretty-printed, or
// binary as base64), flags and lock, its history by revision with a diff
// between any two, and writes conditional on the revision loaded, so an
// edit never overwrites a write it did not see.
import { html, useState, useEffect, useMemo } from '../vendor/lib.js';
import { get, put, del, enc, ApiError } from './api.js';
import { diffLines, hunks } from './diff.js';
import { ErrorBox, Badge, Empty, VirtualList, confirm, count, when, ago } from './ui.js';

// ---- values --------------------------------------------------------------

export function fromBase64(s) {
  const bin = atob(s || '');
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

export function toBase64(bytes) {
  let bin = '';
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(bin);
}

// shown is how a value reads: {kind: 'text'|'json'|'binary'|'empty',
// text}: JSON pretty-printed, text as it is, anything not UTF-8 (or
// holding control bytes but tab and newlines) as base64.
export function shown(b64) {
  const bytes = fromBase64(b64);
  if (!bytes.length) return { kind: 'empty', text: '', size: 0 };
  let text;
  try { text = new TextDecoder('utf-8', { fatal: true }).decode(bytes); } catch { text = null; }
  if (text === null || /[\u0000-\u0008\u000b\u000c\u000e-\u001f]/.test(text)) {
    return { kind: 'binary', text: toBase64(bytes), size: bytes.length };
  }
  const t = text.trim();
  if ((t.startsWith('{') || t.startsWith('[')) && t.length > 1) {
    try { return { kind: 'json', text: JSON.stringify(JSON.parse(t), null, 2), raw: text, size: bytes.length }; } catch { /* text */ }
  }
  return { kind: 'text', text, size: bytes.length };
}

// fmtSize is a value's size as people read it.
export function fmtSize(n) {
  if (n < 1024) return count(n, 'byte');
  if (n < 1024 * 1024) return (n / 1024).toFixed(n < 10240 ? 1 : 0) + ' KiB';
  return (n / 1048576).toFixed(1) + ' MiB';
}

// ---- the tree ------------------------------------------------------------

// treeRows flattens keys into the rows shown: a folder per "/" prefix
// (with how many keys it holds), its children only when it is open.
export function treeRows(entries, open) {
  const rows = [];
  const folders = new Map();
  // Keys come sorted, so the keys under a prefix are adjacent: a folder
  // is placed where its first key is.
  for (const e of entries) {
    const parts = e.key.split('/');
    let prefix = '';
    let visible = true;
    for (let i = 0; i < parts.length - 1; i++) {
      prefix += parts[i] + '/';
      let f = folders.get(prefix);
      if (!f) {
        f = { folder: true, key: prefix, name: parts[i] + '/', depth: i, n: 0 };
        folders.set(prefix, f);
        if (visible) rows.push(f);
      }
      f.n++;
      visible = visible && open.has(prefix);
    }
    if (visible) rows.push({ folder: false, key: e.key, name: parts[parts.length - 1] || '(the folder\'s own key)', depth: parts.length - 1, entry: e });
  }
  return rows;
}

// useKeys follows a namespace's keys with blocking queries: each list
// waits (index, wait) until a key changes, so a write shows within the
// round trip. At most 10,000 keys are read.
function useKeys(ns) {
  const [st, setSt] = useState({ entries: null, revision: 0, more: false, error: null });
  useEffect(() => {
    const ctl = new AbortController();
    const url = `/v1/namespaces/${enc(ns)}/kv`;
    (async () => {
      let index = -1;
      let failures = 0;
      while (!ctl.signal.aborted) {
        try {
          const q = { limit: 1000 };
          if (index >= 0) { q.index = index; q.wait = '30s'; }
          const first = await get(url, { query: q, signal: ctl.signal });
          failures = 0;
          if (first.revision === index) continue; // nothing changed
          let entries = first.entries;
          let next = first.next_page_token;
          while (next && entries.length < 10000) {
            const p = await get(url, { query: { limit: 1000, page_token: next }, signal: ctl.signal });
            entries = entries.concat(p.entries);
            next = p.next_page_token;
          }
          index = first.revision;
          setSt({ entries, revision: first.revision, more: !!next, error: null });
        } catch (e) {
          if (ctl.signal.aborted) return;
          setSt(s => ({ ...s, error: e }));
          failures++;
          await new Promise(r => setTimeout(r, Math.min(500 * failures, 5000)));
        }
      }
    })();
    return () => ctl.abort();
  }, [ns]);
  return st;
}

const keyHash = (ns, key) => `#/kv/${enc(ns)}?key=${enc(key)}`;

export function KVPage({ ns = 'default', params }) {
  const key = params.get('key') || '';
  const creating = params.has('new');
  const keys = useKeys(ns);
  const [nsInput, setNsInput] = useState(ns);
  const [open, setOpen] = useState(() => new Set());
  useEffect(() => {
    // The folders above the key shown are open (a link or an address
    // may name a key in a closed one).
    setOpen(s => {
      const n = new Set(s);
      let p = '';
      for (const part of key.split('/').slice(0, -1)) { p += part + '/'; n.add(p); }
      return n.size === s.size ? s : n;
    });
  }, [key]);
  const rows = useMemo(() => keys.entries ? treeRows(keys.entries, open) : [], [keys.entries, open]);
  const current = keys.entries && keys.entries.find(e => e.key === key);
  const toggle = k => setOpen(s => { const n = new Set(s); if (n.has(k)) n.delete(k); else n.add(k); return n; });
  return html`
    <h1>KV ${keys.entries && html`<span class="rev" id="kv-revision">revision ${keys.revision}</span>`}</h1>
    <form class="toolbar center" onSubmit=${e => { e.preventDefault(); if (nsInput.trim()) location.hash = `#/kv/${enc(nsInput.trim())}`; }}>
      <label>namespace <input id="kv-ns" value=${nsInput} onInput=${e => setNsInput(e.currentTarget.value)} size="16" /></label>
      <button type="submit">Open</button>
      <a class="button" id="kv-new" href=${`#/kv/${enc(ns)}?new`}>New key</a>
      ${keys.entries && html`<span class="muted">${count(keys.entries.length, 'key')}${keys.more ? ' (the first 10,000)' : ''}, live</span>`}
    </form>
    <${ErrorBox} error=${keys.error} />
    <div class="split config">
      <aside class="split-list">
        <div id="kv-tree" class="kv-tree">
          ${keys.entries && html`<${VirtualList} items=${rows} rowHeight=${32} height=${560} row=${r => r.folder
            ? html`<a href="#" class="kv-folder" data-folder=${r.key} style=${`padding-left:${10 + 14 * r.depth}px`}
                onClick=${e => { e.preventDefault(); toggle(r.key); }}>${open.has(r.key) ? '▾' : '▸'} ${r.name} <span class="muted">${r.n}</span></a>`
            : html`<a href=${keyHash(ns, r.key)} class=${r.key === key ? 'active' : ''} data-key=${r.key} style=${`padding-left:${24 + 14 * r.depth}px`}>
                ${r.name}${r.entry.session && html` <${Badge} kind="warn">locked</${Badge}>`} <span class="muted rv">${fmtSize(r.entry.size)}</span></a>`} />`}
          ${keys.entries && !keys.entries.length && html`<p class="muted">No keys in namespace ${ns}.</p>`}
        </div>
      </aside>
      <section class="split-main">
        ${creating ? html`<${NewKey} ns=${ns} />`
          : key ? html`<${KeyView} key=${ns + '\n' + key} ns=${ns} name=${key} modified=${current ? current.modify_revision : 0} listed=${!!keys.entries} />`
          : html`<p class="muted">Pick a key to see its value and its history by revision, or add one.</p>`}
      </section>
    </div>`;
}

// ---- one key -------------------------------------------------------------

// keyPath escapes the key's slashes too: a key may hold "//" or start
// with "/", which a path would lose (the server cleans it, redirecting a
// write to another key).
function keyPath(ns, key, route = 'kv') { return `/v1/namespaces/${enc(ns)}/${route}/${enc(key)}`; }

function Value({ v, id }) {
  if (v.kind === 'empty') return html`<p class="muted" id=${id} data-kind="empty">(empty value)</p>`;
  return html`<div class="kv-value" id=${id} data-kind=${v.kind}>
    <div class="muted">${v.kind === 'json' ? 'JSON, pretty-printed' : v.kind === 'binary' ? 'binary, shown as base64' : 'text'} · ${fmtSize(v.size)}</div>
    <pre class="json">${v.text}</pre></div>`;
}

function KeyView({ ns, name, modified, listed }) {
  const [st, setSt] = useState({ entry: null, history: null, error: null, gone: false });
  const [draft, setDraft] = useState(null); // {text, flags, base}: an edit begun at revision base
  const [writeErr, setWriteErr] = useState(null);
  const [saved, setSaved] = useState('');
  useEffect(() => {
    const ctl = new AbortController();
    // The key and its history, again whenever the live list says the key
    // changed (its modify revision) or went.
    Promise.all([
      // A key the list no longer has is not asked for (a 404 in the
      // browser's console for every deleted key looked at).
      listed && !modified ? null : get(keyPath(ns, name), { signal: ctl.signal }).catch(e => { if (e.status === 404) return null; throw e; }),
      get(keyPath(ns, name, 'kv-history'), { signal: ctl.signal }).catch(e => { if (e.status === 404) return null; throw e; }),
    ]).then(([entry, history]) => setSt({ entry, history, error: null, gone: !entry }),
      e => { if (!ctl.signal.aborted) setSt(s => ({ ...s, error: e })); });
    return () => ctl.abort();
  }, [ns, name, modified, listed]);
  const e = st.entry;
  const v = useMemo(() => e ? shown(e.value) : null, [e]);
  const save = async () => {
    setWriteErr(null); setSaved('');
    let body;
    try {
      body = { value: toBase64(new TextEncoder().encode(draft.text)), flags: Number(draft.flags) };
      if (!Number.isSafeInteger(body.flags) || body.flags < 0) throw new ApiError(400, 'invalid_argument', `flags: ${JSON.stringify(draft.flags)} is not a non-negative integer`, 'flags');
      const r = await put(keyPath(ns, name), body, { query: { revision: draft.base } });
      setDraft(null);
      setSaved(`Saved at revision ${r.revision}.`);
    } catch (err) { setWriteErr(err); }
  };
  const remove = async () => {
    if (!await confirm('Delete ' + name, html`Delete key <code>${name}</code> of namespace ${ns}, as of revision ${e.modify_revision}? If someone wrote it since, nothing is deleted.`, 'Delete', true)) return;
    setWriteErr(null);
    try { await del(keyPath(ns, name), { query: { revision: e.modify_revision } }); } catch (err) { setWriteErr(err); }
  };
  const conflict = writeErr && writeErr.status === 409;
  return html`<div class="kv-key">
    <h2><code id="kv-key-name">${name}</code></h2>
    <${ErrorBox} error=${st.error} />
    ${st.gone && html`<p class="empty" id="kv-gone">No key <code>${name}</code> in namespace ${ns}${listed && modified === 0 && st.history ? ': it was deleted (its history is below)' : ''}.</p>`}
    ${e && html`<dl class="record" id="kv-meta">
      <dt>revision</dt><dd>modified at <b id="kv-modify">${e.modify_revision}</b>, created at ${e.create_revision}</dd>
      <dt>flags</dt><dd id="kv-flags">${e.flags}</dd>
      <dt>lock</dt><dd id="kv-lock">${e.session ? html`<${Badge} kind="warn">locked</${Badge}> by session <code>${e.session}</code> (acquired ${count(e.lock_index, 'time')})`
        : html`<span class="muted">not locked${e.lock_index ? ` (acquired ${count(e.lock_index, 'time')} before)` : ''}</span>`}</dd>
    </dl>`}
    ${e && !draft && html`<${Value} v=${v} id="kv-value" />
      <div class="toolbar">
        <button type="button" id="kv-edit" disabled=${v.kind === 'binary'} title=${v.kind === 'binary' ? 'a binary value cannot be edited as text' : ''}
          onClick=${() => { setSaved(''); setWriteErr(null); setDraft({ text: v.kind === 'json' ? v.raw : v.text, flags: String(e.flags), base: e.modify_revision }); }}>Edit</button>
        <button type="button" class="danger" id="kv-delete" onClick=${remove}>Delete</button>
        ${saved && html`<span class="muted" id="kv-saved">${saved}</span>`}
      </div>`}
    ${draft && html`<div class="kv-edit">
      ${e && e.modify_revision !== draft.base && html`<div class="error" role="alert" id="kv-changed">This key was written at revision ${e.modify_revision} since you began editing at ${draft.base}: saving will fail rather than overwrite it.</div>`}
      <textarea id="kv-editor" spellcheck="false" rows="12" value=${draft.text} onInput=${ev => setDraft({ ...draft, text: ev.currentTarget.value })}></textarea>
      <div class="toolbar center">
        <label>flags <input id="kv-flags-input" size="10" value=${draft.flags} onInput=${ev => setDraft({ ...draft, flags: ev.currentTarget.value })} /></label>
        <button type="button" class="primary" id="kv-save" onClick=${save}>Save (if still at revision ${draft.base})</button>
        <button type="button" onClick=${() => { setDraft(null); setWriteErr(null); }}>Cancel</button>
      </div></div>`}
    ${conflict && html`<div class="error" role="alert" id="kv-conflict">Not saved: someone else changed this key since you loaded it (${writeErr.message}).${' '}
      <button type="button" class="link" onClick=${() => { setDraft(null); setWriteErr(null); }}>Discard my edit and show theirs</button></div>`}
    ${writeErr && !conflict && html`<${ErrorBox} error=${writeErr} />`}
    ${st.history && html`<${History} h=${st.history} />`}
  </div>`;
}

// ---- history -------------------------------------------------------------

function History({ h }) {
  const vs = h.versions;
  // Compare the newest with the one before, unless the user picked.
  const [pick, setPick] = useState(null);
  const [a, b] = pick || [vs.length > 1 ? vs[1].revision : vs[0].revision, vs[0].revision];
  const text = rev => {
    const x = vs.find(v => v.revision === rev);
    return !x || x.deleted ? '' : shown(x.value).text;
  };
  const lines = useMemo(() => a === b ? [] : hunks(diffLines(text(a), text(b))), [h, a, b]);
  const choose = (side, rev) => setPick(side === 'a' ? [rev, b] : [a, rev]);
  return html`<section><h2>History <span class="muted">(${count(vs.length, 'revision')}: the last ${h.kept} this server saw, newest first)</span></h2>
    <table id="kv-history"><thead><tr><th title="the older side of the diff">from</th><th title="the newer side of the diff">to</th><th>revision</th><th>when</th><th>value</th><th>flags</th><th>lock</th></tr></thead>
    <tbody>${vs.map(x => {
      const s = x.deleted ? null : shown(x.value);
      return html`<tr data-revision=${x.revision} class=${x.revision === a || x.revision === b ? 'selected' : ''}>
        <td><input type="radio" name="kv-a" aria-label=${'diff from ' + x.revision} checked=${x.revision === a} onChange=${() => choose('a', x.revision)} /></td>
        <td><input type="radio" name="kv-b" aria-label=${'diff to ' + x.revision} checked=${x.revision === b} onChange=${() => choose('b', x.revision)} /></td>
        <td><b>${x.revision}</b></td>
        <td title=${x.committed ? when(x.committed) : ''}>${x.committed ? ago(x.committed) : html`<span class="muted">before this server started</span>`}</td>
        <td class="kv-preview">${x.deleted ? html`<${Badge} kind="bad">deleted</${Badge}>` : html`<code>${s.text.length > 60 ? s.text.slice(0, 60).replace(/\s+/g, ' ') + '…' : s.text.replace(/\s+/g, ' ')}</code> <span class="muted">${fmtSize(s.size)}</span>`}</td>
        <td>${x.deleted ? '' : x.flags}</td><td>${x.session ? html`<code title=${x.session}>${x.session.slice(0, 8)}</code>` : ''}</td></tr>`;
    })}</tbody></table>
    ${a !== b ? html`<h3 class="muted">Revision ${a} → ${b}</h3>
      ${lines.length ? html`<pre class="diff" id="kv-diff">${lines.map(l => html`<span class=${'d' + (l.op === ' ' ? 'ctx' : l.op === '+' ? 'add' : l.op === '-' ? 'del' : 'gap')}>${l.op === '@' ? l.text : l.op + ' ' + l.text}\n</span>`)}</pre>`
        : html`<p class="muted" id="kv-diff">The values are the same (flags or lock may differ).</p>`}`
      : vs.length === 1 ? html`<${Empty}>One revision only: the diff needs two.</${Empty}>` : null}
  </section>`;
}

// ---- a new key -----------------------------------------------------------

function NewKey({ ns }) {
  const [key, setKey] = useState('');
  const [text, setText] = useState('');
  const [flags, setFlags] = useState('0');
  const [err, setErr] = useState(null);
  const create = async ev => {
    ev.preventDefault();
    setErr(null);
    try {
      const f = Number(flags);
      if (!Number.isSafeInteger(f) || f < 0) throw new ApiError(400, 'invalid_argument', `flags: ${JSON.stringify(flags)} is not a non-negative integer`, 'flags');
      await put(keyPath(ns, key), { value: toBase64(new TextEncoder().encode(text)), flags: f }, { query: { revision: 0 } });
      location.hash = keyHash(ns, key);
    } catch (e) { setErr(e); }
  };
  return html`<form class="kv-edit" onSubmit=${create}>
    <h2>New key in namespace ${ns}</h2>
    <label>key <input id="kv-new-key" value=${key} placeholder="app/config.json" onInput=${e => setKey(e.currentTarget.value)} /></label>
    <label>value <textarea id="kv-new-value" rows="10" spellcheck="false" value=${text} onInput=${e => setText(e.currentTarget.value)}></textarea></label>
    <div class="toolbar center">
      <label>flags <input size="10" value=${flags} onInput=${e => setFlags(e.currentTarget.value)} /></label>
      <button type="submit" class="primary" id="kv-create">Create (only if it does not exist)</button>
    </div>
    ${err && err.status === 409 ? html`<div class="error" role="alert" id="kv-conflict">Not created: ${err.message}. <a href=${keyHash(ns, key)}>Open it</a></div>` : html`<${ErrorBox} error=${err} />`}
  </form>`;
}
