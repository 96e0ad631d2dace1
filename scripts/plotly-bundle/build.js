// Builds the portal's partial plotly.js bundle (scatter and bar traces; see entry.js).
// Usage: node build.js OUTFILE   (run by build.sh after `npm ci` of the pinned packages)
'use strict';
const fs = require('fs');
const path = require('path');
const esbuild = require('esbuild');
const stripDescriptions = require('./strip-descriptions.js').plugin;

const out = process.argv[2];
if (!out) throw new Error('usage: node build.js OUTFILE');
const version = require('plotly.js/package.json').version;

esbuild.build({
  entryPoints: [path.join(__dirname, 'entry.js')],
  outfile: out,
  // as plotly.js's own dist bundles (its esbuild-config.js): one IIFE assigning window.Plotly
  format: 'iife',
  globalName: 'Plotly',
  bundle: true,
  minify: true,
  target: 'es2016',
  define: { global: 'window', 'define.amd': 'false' },
  // MapLibre's stylesheet is required only when a map trace registers; none does here,
  // so it is left out (empty) rather than shipped as a string
  loader: { '.css': 'empty' },
  legalComments: 'eof',
  plugins: [stripDescriptions],
  banner: {
    js: `/**\n* plotly.js (gpu-portal partial bundle: scatter, bar) v${version}\n` +
        '* Copyright 2012-2026, Plotly, Inc.\n* All rights reserved.\n' +
        '* Licensed under the MIT license\n*/',
  },
  logLevel: 'warning',
}).then(() => {
  console.log(`${out}: plotly.js ${version}, ${fs.statSync(out).size} bytes`);
}).catch(() => process.exit(1));
