// The console's third-party libraries in one ES module, bundled by
// `make console` into ../assets/vendor/lib.js. The console's own code is
// not bundled: it is served as written (docs/console.md).
import { h } from 'preact';
import htm from 'htm';

export { h, render, Fragment } from 'preact';
export { useState, useEffect, useRef, useMemo, useCallback, useLayoutEffect } from 'preact/hooks';
export { default as uPlot } from 'uplot';
export { parseDocument, stringify, LineCounter, isMap, isSeq, isPair, isScalar } from 'yaml';

// html`<div class=${c}>...</div>`: JSX without a compiler.
export const html = htm.bind(h);
