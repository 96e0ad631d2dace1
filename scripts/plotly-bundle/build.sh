#!/usr/bin/env bash
# Rebuild static/vendor/plotly-partial.min.js from the pinned npm packages (package.json,
# package-lock.json) in a scratch folder: nothing is installed in the repository.
# Needs node and npm (the npm registry). Prints the bundle's sha256 for static/vendor/README.md.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
vendor="$here/../../static/vendor"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$here"/package.json "$here"/package-lock.json "$here"/*.js "$work/"
cd "$work"
npm ci --no-audit --no-fund --ignore-scripts
node build.js "$vendor/plotly-partial.min.js"
cp node_modules/plotly.js/LICENSE "$vendor/plotly.LICENSE.txt"
sha256sum "$vendor/plotly-partial.min.js"
