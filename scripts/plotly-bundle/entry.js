// The portal's partial plotly.js bundle: the traces monitoring/charts.py draws.
// `scatter` (lines and markers) comes with plotly.js's core; `bar` is added here.
// A chart using another trace type needs it registered here and the bundle rebuilt
// (build.sh); tests/monitoring/test_dashboard_bundle.py checks the figures against this list.
'use strict';
var Plotly = require('plotly.js/lib/core');

Plotly.register([require('plotly.js/lib/bar')]);

module.exports = Plotly;
