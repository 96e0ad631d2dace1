/* On-call console, rack map and node page, live.
 * - nodes (node.updated) and cycles (cycle.completed that moved work): refetch every
 *   rack-map cell as [name, status, glyph, label, mark] (computed on the server by
 *   monitoring/charts.py; mark: "m-soon" when maintenance is scheduled, else "") and update
 *   the cells in place: class, glyph, title, aria-label.
 * - alerts (alert.raised / alert.updated): refetch the alerts list (server-rendered HTML).
 * - after a reconnect: both.
 * - the console's scheduled maintenance and the node page: their live parts (see below). */
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
    if (el && value !== undefined) el.textContent = String(Dom.count(value));
  }

  // -- rack map -------------------------------------------------------------------------
  if (map) {
    const cells = new Map();
    map.querySelectorAll("a.n[data-n]").forEach((el) => cells.set(el.dataset.n, el));
    const news = document.getElementById("rackmap-news");

    const refreshMap = debounce(async () => {
      const snap = await getJSON(map.dataset.cellsUrl);
      const changed = [];
      for (const [name, status, glyph, label, mark] of snap.cells) {
        const el = cells.get(name);
        if (!el) continue;
        const cls = mark ? `n k-${status} ${mark}` : `n k-${status}`;
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
        el.textContent = String(Dom.count(snap.counts[el.dataset.status] ?? 0));
      });
      setText("rm-nodes-out", snap.nodes_out);
      setText("rm-gpus-used", snap.gpus_used);
      setText("rm-gpus-inference", snap.gpus_inference);
      setText("rm-gpus-residual", snap.gpus_residual);
      setText("rm-maintenance-soon", snap.maintenance_soon);
      if (news && changed.length) {
        news.textContent = changed.length <= 3 ? changed.join("; ") : `${Dom.count(changed.length)} nodes changed`;
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

  // -- rack map, by keyboard ----------------------------------------------------------------
  // One Tab stop for the whole map (1,250 nodes on the demo would be 1,250 stops): the
  // arrow keys move from node to node (up and down by the rack's rows, into the next or
  // previous rack at the same column), Page Up / Page Down from rack to rack, Home / End
  // to the first / last node, Enter opens the node (WCAG 2.1.1, the roving tabindex of
  // the ARIA practices). Without JavaScript every cell is a Tab stop, as a plain link.
  if (map) {
    const all = Array.from(map.querySelectorAll("a.n[data-n]"));
    const racks = Array.from(map.querySelectorAll(".rack .cells"));
    if (all.length) {
      let current = all[0];
      all.forEach((el) => el.setAttribute("tabindex", el === current ? "0" : "-1"));
      const take = (el) => {
        if (el === current) return;
        current.setAttribute("tabindex", "-1");
        el.setAttribute("tabindex", "0");
        current = el;
      };
      const inRack = (box) => Array.from(box.querySelectorAll("a.n[data-n]"));
      const columns = (box) => getComputedStyle(box).gridTemplateColumns.split(" ").length;
      const target = (el, key) => {
        const box = el.closest(".cells");
        const cells = inRack(box);
        const at = cells.indexOf(el);
        const r = racks.indexOf(box);
        const cols = columns(box);
        switch (key) {
          case "ArrowRight": return all[all.indexOf(el) + 1];
          case "ArrowLeft": return all[all.indexOf(el) - 1];
          case "Home": return all[0];
          case "End": return all[all.length - 1];
          case "PageDown": return racks[r + 1] && inRack(racks[r + 1])[0];
          case "PageUp": return racks[r - 1] && inRack(racks[r - 1])[0];
          case "ArrowDown": {
            if (at + cols < cells.length) return cells[at + cols];
            const next = racks[r + 1] && inRack(racks[r + 1]);
            return next && next[Math.min(at % cols, next.length - 1)];
          }
          case "ArrowUp": {
            if (at - cols >= 0) return cells[at - cols];
            const prev = racks[r - 1] && inRack(racks[r - 1]);
            if (!prev) return undefined;
            const lastRow = Math.floor((prev.length - 1) / cols) * cols;
            return prev[Math.min(lastRow + (at % cols), prev.length - 1)];
          }
          default: return null;
        }
      };
      map.addEventListener("focusin", (e) => {
        const el = e.target.closest && e.target.closest("a.n[data-n]");
        if (el) take(el);
      });
      map.addEventListener("keydown", (e) => {
        const el = e.target.closest && e.target.closest("a.n[data-n]");
        if (!el || e.altKey || e.ctrlKey || e.metaKey || e.shiftKey) return;
        const to = target(el, e.key);
        if (to === null) return;  // not a key the map uses
        e.preventDefault();
        if (to) {
          take(to);
          to.focus();
        }
      });
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

  // -- scheduled maintenance on the console: its list is a live part, refetched when a
  // node changes (scheduling, cancelling, a window's start and end all say so).
  if (map && window.LiveParts && document.getElementById("maintenance-list")) {
    LiveParts.watch("nodes");
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
