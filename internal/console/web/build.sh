#!/bin/sh
# Rebuilds ../assets/vendor/ from the pinned npm packages (make console).
# Needs Node.js and npm; nothing here is needed to build or run Sextant.
set -eu
cd "$(dirname "$0")"
npm ci --no-audit --no-fund
out=../assets/vendor
mkdir -p "$out"
npx esbuild vendor.js --bundle --format=esm --minify --target=es2020 \
	--legal-comments=none --outfile="$out/lib.js"
cp node_modules/uplot/dist/uPlot.min.css "$out/uPlot.min.css"
{
	echo "Third-party code bundled into lib.js and uPlot.min.css, with their licenses."
	for p in preact htm uplot yaml; do
		v=$(node -p "require('./node_modules/$p/package.json').version")
		echo
		echo "================================================================"
		echo "$p $v (npm)"
		echo "================================================================"
		cat "node_modules/$p/LICENSE"
	done
} > "$out/LICENSES.txt"
ls -l "$out"
