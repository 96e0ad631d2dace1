/* On-call console, rack map and node page, live.
 * - nodes (node.updated) and cycles (cycle.completed that moved work): refetch every
 *   rack-map cell as [name, status, glyph, label] (computed on the server by
 *   monitoring/charts.py) and update the cells in place: class, glyph, title, aria-label.
 * - alerts (alert.raised / alert.updated): refetch the alerts list (server-rendered HTML).
 * - after a reconnect: both.
 * - the node page: its live parts (see below). */
(function () {
  "use strict";
  const map = document.getElementById("rack-map");
  const alertsBody = document.getElementById("alerts-body");
  const nodeStatus = document.getElementById("node-status");

  function debounce(fn, ms) {
    let timer = null;
    let running = false;
    const run = async () => {
      if (running) { timer = setTimeout(run, ms); return; }
      running = true;
      try { await fn(); } catch (e) { console.warn("live refresh failed", e); } finally { running = false; }
    };
    return () => { clearTimeout(timer); timer = setTimeout(run, ms); };
  }

  async function getJSON(url) {
    const r = await fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
    if (!r.ok) throw new Error(`${url}: ${r.status}`);
    return r.json();
  }

  function setText(id, value) {
    const el = document.getElementById(id);
    if (el && value !== undefined) el.textContent = String(value);
  }

  // -- rack map -------------------------------------------------------------------------
  if (map) {
    const cells = new Map();
    map.querySelectorAll("a.n[data-n]").forEach((el) => cells.set(el.dataset.n, el));
    const news = document.getElementById("rackmap-news");

    const refreshMap = debounce(async () => {
      const snap = await getJSON(map.dataset.cellsUrl);
      const changed = [];
      for (const [name, status, glyph, label] of snap.cells) {
        const el = cells.get(name);
        if (!el) continue;
        const cls = `n k-${status}`;
        if (el.getAttribute("aria-label") === label && el.className.startsWith(cls)) continue;
        el.className = `${cls} changed`;
        el.textContent = glyph;
        el.title = label;
        el.setAttribute("aria-label", label);
        changed.push(label);
        setTimeout(() => el.classList.remove("changed"), 4000);
      }
      for (const [rack, summary] of Object.entries(snap.racks)) {
        const el = map.querySelector(`.rack-summary[data-rack="${CSS.escape(rack)}"]`);
        if (el) el.textContent = summary;
      }
      document.querySelectorAll(".legend-count[data-status]").forEach((el) => {
        el.textContent = String(snap.counts[el.dataset.status] ?? 0);
      });
      setText("rm-nodes-out", snap.nodes_out);
      setText("rm-gpus-used", snap.gpus_used);
      setText("rm-gpus-inference", snap.gpus_inference);
      setText("rm-gpus-residual", snap.gpus_residual);
      if (news && changed.length) {
        news.textContent = changed.length <= 3 ? changed.join("; ") : `${changed.length} nodes changed`;
      }
      map.dataset.refreshed = String(Date.now());
    }, 200);

    if (window.Live) {
      Live.on("nodes", refreshMap);
      Live.on("cycles", (msg) => {
        const d = msg.data || {};
        if (d.starts || d.finished || d.failed || d.preemptions || d.requeued) refreshMap();
      });
      Live.onReconnect(refreshMap);
    }
  }

  // -- alerts ---------------------------------------------------------------------------
  if (alertsBody) {
    const refreshAlerts = debounce(async () => {
      const r = await fetch(alertsBody.dataset.url, { credentials: "same-origin" });
      if (!r.ok) throw new Error(`alerts: ${r.status}`);
      const html = await r.text();
      const focused = document.activeElement && alertsBody.contains(document.activeElement)
        ? document.activeElement.id : null;
      alertsBody.innerHTML = html;
      if (focused) {
        const again = document.getElementById(focused);
        if (again) again.focus();
      }
      alertsBody.dataset.refreshed = String(Date.now());
    }, 200);
    if (window.Live) {
      Live.on("alerts", refreshAlerts);
      Live.onReconnect(refreshAlerts);
    }
  }

  // -- node page ------------------------------------------------------------------------
  // Every part that can change (state, GPUs, jobs, blast radius, buttons, history) is a
  // live part (static/js/live_parts.js): refetched when this node changes and after every
  // cycle (which starts, stops and moves jobs on it). Flash messages then say "Earlier".
  if (nodeStatus && !map && window.LiveParts) {
    const name = nodeStatus.dataset.node;
    LiveParts.watch("nodes", (msg) => (msg.data || {}).name === name);
    LiveParts.watch("cycles");
    const summary = (s) => `${s.state} ${s.used} ${s.jobs}`;
    const loaded = summary(nodeStatus.dataset);
    let aged = false;
    LiveParts.onSwap(() => {
      const s = document.getElementById("node-status").dataset;
      if (!aged && summary(s) === loaded) return;  // only a relative time moved on
      aged = true;
      const jobs = Number(s.jobs);
      Live.agePageMessages(`Now: ${name} is ${s.state}, ${s.used} of ${s.total} GPUs used, ` +
        `${jobs} job${jobs === 1 ? "" : "s"} on it.`);
    });
  }
})();
