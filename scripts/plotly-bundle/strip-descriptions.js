// esbuild plugin: empties the `description` texts of plotly.js's attribute definitions.
// They document the figure schema (Plotly.PlotSchema) and are never read when drawing;
// plotly.js's own minified dist bundles leave them out the same way. Only a plain string
// ('...') or a plain joined array of strings (['...', '...'].join(' ')) is emptied; any
// other form is left as it is. The key stays, so no object literal changes shape.
'use strict';
const fs = require('fs');

const STRING = "'(?:[^'\\\\\\n]|\\\\.)*'";
const PLAIN = new RegExp(`(\\bdescription:\\s*)${STRING}`, 'g');
const JOINED = new RegExp(
  `(\\bdescription:\\s*)\\[(?:\\s*${STRING}\\s*,?)*\\s*\\]\\.join\\(\\s*${STRING}\\s*\\)`, 'g'
);

function strip(source) {
  return source.replace(JOINED, "$1''").replace(PLAIN, "$1''");
}

const plugin = {
  name: 'strip-attribute-descriptions',
  setup(build) {
    build.onLoad({ filter: /[\\/]plotly\.js[\\/]src[\\/].*\.js$/ }, async (args) => ({
      contents: strip(await fs.promises.readFile(args.path, 'utf8')),
      loader: 'js',
    }));
  },
};

module.exports = { plugin, strip };
