/* On-call console, rack map and node page, live.
 * - nodes (node.updated) and cycles (cycle.completed that moved work): refetch every
 *   rack-map cell as [name, status, glyph, label] (computed on the server by
 *   monitoring/charts.py) and update the cells in place: class, glyph, title, aria-label.
 * - alerts (alert.raised / alert.updated): refetch the alerts list (server-rendered HTML).
 * - after a reconnect: both. */
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
  if (nodeStatus && !map) {
    const name = nodeStatus.dataset.node;
    const refreshNode = debounce(async () => {
      const snap = await getJSON(`${nodeStatus.dataset.cellsUrl}?node=${encodeURIComponent(name)}`);
      const cell = snap.cells.find((c) => c[0] === name);
      if (!cell) return;
      const [, status, glyph, label] = cell;
      const glyphEl = document.getElementById("node-glyph");
      if (glyphEl) { glyphEl.className = `n k-${status} big-cell`; glyphEl.textContent = glyph; }
      setText("node-label", label);
    }, 200);
    if (window.Live) {
      Live.on("nodes", (msg) => {
        const d = msg.data || {};
        if (d.name !== name) return;
        if (d.state) setText("node-state", d.state);
        if (d.state_reason !== undefined) setText("node-state-reason", d.state_reason || "—");
        if (d.residual_gpus !== undefined) setText("node-residual", d.residual_gpus);
        const note = document.getElementById("node-live-note");
        if (note) note.hidden = false;
        refreshNode();
      });
      Live.onReconnect(refreshNode);
    }
  }
})();
