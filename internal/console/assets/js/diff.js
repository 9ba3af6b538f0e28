// diff.js: a line diff (longest common subsequence) for the dry run's
// "what would change", in unified form with a few lines of context.

// diffLines returns [{op: ' '|'-'|'+', text}] turning a into b.
export function diffLines(a, b) {
  const x = a.split('\n');
  const y = b.split('\n');
  // Trim the common head and tail: edits are usually small.
  let head = 0;
  while (head < x.length && head < y.length && x[head] === y[head]) head++;
  let tail = 0;
  while (tail < x.length - head && tail < y.length - head && x[x.length - 1 - tail] === y[y.length - 1 - tail]) tail++;
  const xs = x.slice(head, x.length - tail);
  const ys = y.slice(head, y.length - tail);
  const out = x.slice(0, head).map(text => ({ op: ' ', text }));
  if (xs.length * ys.length > 4e6) {
    xs.forEach(text => out.push({ op: '-', text }));
    ys.forEach(text => out.push({ op: '+', text }));
  } else {
    const n = xs.length, m = ys.length;
    const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        lcs[i][j] = xs[i] === ys[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
      }
    }
    let i = 0, j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && xs[i] === ys[j]) { out.push({ op: ' ', text: xs[i] }); i++; j++; }
      else if (i < n && (j === m || lcs[i + 1][j] >= lcs[i][j + 1])) { out.push({ op: '-', text: xs[i] }); i++; }
      else { out.push({ op: '+', text: ys[j] }); j++; }
    }
  }
  x.slice(x.length - tail).forEach(text => out.push({ op: ' ', text }));
  return out;
}

// hunks keeps changed lines and ctx lines around them; a gap becomes
// {op: '@', text: '…'}.
export function hunks(lines, ctx = 3) {
  const keep = new Uint8Array(lines.length);
  lines.forEach((l, i) => {
    if (l.op === ' ') return;
    for (let k = Math.max(0, i - ctx); k <= Math.min(lines.length - 1, i + ctx); k++) keep[k] = 1;
  });
  const out = [];
  let gap = false;
  lines.forEach((l, i) => {
    if (keep[i]) { out.push(l); gap = false; } else if (!gap) { out.push({ op: '@', text: '…' }); gap = true; }
  });
  return out;
}
