/* Queues page, live: on `queues.updated` refetch /api/v1/queues/ and /api/v1/business-lines/
 * and rewrite the numbers in place (the bar always comes with its number and percentage);
 * refetch on reconnect. */
(function () {
  "use strict";
  let inflight = false;
  let again = false;

  async function getAll(url) {
    const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!response.ok) throw new Error(`${url}: ${response.status}`);
    const body = await response.json();
    return Array.isArray(body) ? body : body.results;
  }

  function set(row, field, value) {
    const cell = row.querySelector(`[data-field="${field}"]`);
    const text = String(Dom.count(value));
    if (cell && cell.textContent !== text) cell.textContent = text;
  }

  function setUsage(row, used, quota) {
    const box = row.querySelector('[data-field="used"] [data-usage]');
    if (!box) return;
    const percent = quota ? Math.round((100 * used) / quota) : null;
    const over = Boolean(quota && used > quota);
    box.classList.toggle("is-over", over);
    const bar = box.querySelector(".rp-bar");
    bar.value = Math.min(100, percent || 0);
    bar.hidden = quota === null || quota === undefined;
    box.querySelector(".rp-usage-text").textContent = quota === null || quota === undefined
      ? `${Dom.count(used)} GPU${used === 1 ? "" : "s"} (no queue quota: the line's applies)`
      : `${Dom.count(used)} of ${Dom.count(quota)} GPUs (${percent}%)${over ? ", over quota" : ""}`;
  }

  async function refresh() {
    if (inflight) { again = true; return; }
    inflight = true;
    try {
      const [queues, lines] = await Promise.all([
        getAll("/api/v1/queues/?limit=1000"), getAll("/api/v1/business-lines/?limit=1000"),
      ]);
      const perLine = {};
      for (const q of queues) {
        const row = document.querySelector(`[data-queue-id="${q.id}"]`);
        const sums = (perLine[q.business_line] ||= { running: 0, pending: 0 });
        sums.running += q.running_jobs;
        sums.pending += q.pending_jobs;
        if (!row) continue;
        set(row, "quota_gpus", q.quota_gpus === null ? "line's" : q.quota_gpus);
        set(row, "guarantee_gpus", q.guarantee_gpus);
        setUsage(row, q.used_gpus, q.quota_gpus);
        set(row, "borrowed_gpus", q.borrowed_gpus);
        set(row, "running_jobs", q.running_jobs);
        set(row, "pending_jobs", q.pending_jobs);
        set(row, "pending_gpus", q.pending_gpus);
        // null: the window holds no data yet (never shown as 0.0%)
        set(row, "eviction_ratio", q.eviction_ratio === null || q.eviction_ratio === undefined
          ? "no data yet" : `${(100 * q.eviction_ratio).toFixed(1)}%`);
      }
      // the sentence naming the sample the ratios are read from follows them
      const asOf = document.getElementById("eviction-as-of");
      if (asOf && queues.length) {
        const at = queues[0].eviction_sampled_at;
        const text = at ? `as of the rollup sample at ${Dom.when(at)}` : "no rollup sample yet";
        if (asOf.textContent !== text) asOf.textContent = text;
      }
      for (const line of lines) {
        const section = document.querySelector(`[data-line-id="${line.id}"]`);
        if (!section) continue;
        const row = section.querySelector("table tbody tr");
        set(row, "quota_gpus", line.quota_gpus);
        set(row, "guarantee_gpus", line.guarantee_gpus);
        setUsage(row, line.used_gpus, line.quota_gpus);
        set(row, "within_quota_gpus", line.within_quota_gpus);
        set(row, "borrowed_gpus", line.borrowed_gpus);
        set(row, "pending_gpus", line.pending_gpus);
        const sums = perLine[line.name];
        if (sums) {
          set(row, "running_jobs", sums.running);
          set(row, "pending_jobs", sums.pending);
        }
      }
      document.getElementById("queues-page").dataset.refreshed = String(Date.now());
    } catch (e) {
      /* offline or refused: keep the numbers; the next event or reconnect refetches */
    } finally {
      inflight = false;
      if (again) { again = false; refresh(); }
    }
  }

  window.Live.on("queues", refresh);
  window.Live.onReconnect(refresh);
})();
