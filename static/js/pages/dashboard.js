/* Dashboard: draw the server-built Plotly figures, then redraw them from a fresh
 * snapshot (GET data-url) when a cycle completes or the rollup publishes eviction
 * ratios, and after a reconnect. Figures are built by monitoring/charts.py only. */
(function () {
  "use strict";
  const root = document.getElementById("dashboard");
  const initial = document.getElementById("dashboard-data");
  if (!root || !initial || !window.Plotly) return;  // deferred after plotly-partial.min.js
  const CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"] };

  function text(id, value) {
    const el = document.getElementById(id);
    if (el && value !== undefined && value !== null) el.textContent = String(value);
  }

  // Draws every figure; resolves when Plotly has drawn them all.
  function draw(payload) {
    const drawn = [];
    for (const [key, fig] of Object.entries(payload.figures)) {
      const el = document.getElementById(`chart-${key}`);
      if (!el) continue;
      drawn.push(Plotly.react(el, fig.data, fig.layout, CONFIG));
      const caption = document.querySelector(`#summary-${key} .summary-text`);
      if (caption) caption.textContent = fig.summary;
    }
    for (const [key, value] of Object.entries(payload.tiles)) text(`tile-${key}`, value);
    // The sample's time as the server wrote it for this viewer (sample_text: in their zone,
    // named, as on the first render), in a <time> with the UTC stamp as the page has it.
    const asof = payload.as_of;
    const parts = [];
    if (asof.sample) {
      const at = document.createElement("time");
      at.setAttribute("datetime", asof.sample);
      at.textContent = asof.sample_text;
      parts.push("Latest sample at cluster time ", at);
    } else {
      parts.push("No metrics sample yet (the rollup writes one a minute)");
    }
    parts.push(asof.cycle ? `; pending reasons from cycle #${asof.cycle}.` : ".");
    const asofEl = document.getElementById("dash-asof");
    if (asofEl) asofEl.replaceChildren(...parts);
    root.dataset.cycle = asof.cycle || "";
    root.dataset.sample = asof.sample || "";
    return Promise.all(drawn);
  }

  let timer = null;
  let inflight = false;
  function refetch() {
    clearTimeout(timer);
    timer = setTimeout(async () => {
      if (inflight) { refetch(); return; }
      inflight = true;
      try {
        const r = await fetch(root.dataset.url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
        if (r.ok) draw(await r.json());
      } catch (e) {
        console.warn("dashboard refresh failed", e);
      } finally {
        inflight = false;
      }
    }, 250);
  }

  // The first draw from the figures embedded in the page (no request). When the last chart
  // is drawn: the performance mark "charts-drawn" and window.__chartsDrawn (ms since
  // navigation start), which `manage.py bench_browser` and the browser tests read.
  draw(JSON.parse(initial.textContent)).then(() => {
    performance.mark("charts-drawn");
    window.__chartsDrawn = performance.now();
    root.dataset.drawn = "true";
    document.dispatchEvent(new CustomEvent("charts:drawn"));
  });
  if (window.Live) {
    Live.on("cycles", refetch);
    Live.on("eviction", refetch);
    Live.onReconnect(refetch);
  }
})();
