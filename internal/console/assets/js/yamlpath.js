// yamlpath.js: maps the API's field paths (spec.http[0].mirror,
// documents[1].spec.hosts[0], items[2].metadata.name) to lines of the YAML
// the user wrote, so an error shows at its line.
import { parseDocument, LineCounter, isMap, isSeq, isPair } from '../vendor/lib.js';

// splitDocs cuts text into documents exactly as the server does
// (internal/config splitDocuments): at "---" or "..." lines, dropping
// documents of only blank lines and comments. Each has its first line
// (0-based) in text.
export function splitDocs(text) {
  const lines = text.split('\n');
  const docs = [];
  let start = 0;
  let cur = [];
  const flush = () => {
    if (cur.some(l => { const t = l.trim(); return t && !t.startsWith('#'); })) docs.push({ start, text: cur.join('\n') });
    cur = [];
  };
  lines.forEach((line, i) => {
    const s = line.replace(/[ \t\r]+$/, '');
    if (s === '---' || s.startsWith('--- ') || s.startsWith('---\t') || s === '...') {
      flush();
      start = i + 1;
      return;
    }
    if (!cur.length) start = i;
    cur.push(line);
  });
  flush();
  return docs;
}

// parsePath reads "a.b[0].c" into ['a', 'b', 0, 'c'].
export function parsePath(path) {
  const out = [];
  // [3] is an index; [x-canary] and ["a.b"] are map keys.
  const re = /([^.[\]]+)|\[(\d+)\]|\["([^"]*)"\]|\[([^\]]*)\]/g;
  let m;
  while ((m = re.exec(path))) {
    if (m[1] !== undefined) out.push(m[1]);
    else if (m[2] !== undefined) out.push(Number(m[2]));
    else out.push(m[3] !== undefined ? m[3] : m[4]);
  }
  return out;
}

const snake = s => s.replace(/[A-Z]/g, c => '_' + c.toLowerCase());
const camel = s => s.replace(/_([a-z])/g, (_, c) => c.toUpperCase());

function findPair(map, key) {
  for (const variant of [key, snake(key), camel(key)]) {
    const p = map.items.find(it => isPair(it) && it.key && String(it.key.value ?? it.key) === variant);
    if (p) return p;
  }
  return null;
}

// lineIn returns the 1-based line, within one document's text, of the
// deepest node of path that exists (the key's line for a map entry).
export function lineIn(docText, segs) {
  const lc = new LineCounter();
  let doc;
  try { doc = parseDocument(docText, { lineCounter: lc, prettyErrors: false, version: '1.1' }); } catch { return 1; }
  let node = doc.contents;
  let offset = node && node.range ? node.range[0] : 0;
  for (let i = 0; i < segs.length && node; i++) {
    const seg = segs[i];
    if (isMap(node) && typeof seg === 'string') {
      // A key may itself hold dots (annotations: sextant.io/load-balancer).
      let pair = null;
      let j = i;
      for (; j < segs.length && typeof segs[j] === 'string'; j++) {
        pair = findPair(node, segs.slice(i, j + 1).join('.'));
        if (pair) break;
      }
      if (!pair) break;
      i = j;
      offset = pair.key && pair.key.range ? pair.key.range[0] : offset;
      node = pair.value;
    } else if (isSeq(node) && typeof seg === 'number') {
      const item = node.items[seg];
      if (!item) break;
      node = item;
      if (isPair(item)) { offset = item.key.range[0]; node = item.value; } else if (item.range) offset = item.range[0];
    } else break;
  }
  return lc.linePos(offset).line;
}

// problems turns an API error of POST /v1/config:apply into
// [{line, path, message}] over text (line 1-based, 0 when unknown). The
// message holds every problem ("config: 3 problems:\n  document 2:
// spec.x: ..."); its field names the first.
export function problems(err, text) {
  const docs = splitDocs(text);
  let lines = (err.message || '').split('\n');
  if (lines.length > 1 && /problems:$/.test(lines[0])) lines = lines.slice(1);
  const out = [];
  for (const raw of lines) {
    const l = raw.trim();
    if (!l) continue;
    let m = l.match(/^document (\d+): (.*)$/);
    const doc = m ? Number(m[1]) - 1 : 0;
    const rest = m ? m[2] : l;
    m = rest.match(/^([A-Za-z0-9_$.[\]\/\-"]+): (.*)$/);
    let path = m ? m[1] : '';
    const msg = m ? m[2] : rest;
    if (!path && out.length === 0 && err.field) path = err.field.replace(/^documents\[\d+\]\.?/, '');
    out.push({ line: locate(docs, doc, path, msg), path, message: msg, doc: docs.length > 1 ? doc + 1 : 0 });
  }
  if (!out.length) out.push({ line: 0, path: err.field || '', message: err.message });
  return out;
}

function locate(docs, doc, path, msg) {
  const d = docs[doc];
  if (!d) return 0;
  // A YAML syntax error names its line in the text sent (internal/manifest).
  const y = msg.match(/^not YAML or JSON: line (\d+):/);
  if (y) return Number(y[1]);
  if (!path) return d.start + 1;
  return d.start + lineIn(d.text, parsePath(path));
}
