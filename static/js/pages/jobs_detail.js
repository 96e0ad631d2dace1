/* Job detail, live: on `job.<id>` events (and, while the job waits, on `pending.updated`,
 * which is when the scheduler rewrites verdicts) refetch /api/v1/jobs/<id>/ and re-render
 * the state, the verdict, the status, the placement, the timeline and the flash messages
 * (marked as earlier once the job moved on); refetch on reconnect.
 * Text is set with textContent only (links to other jobs as <a> elements built here). */
(function () {
  "use strict";
  const config = JSON.parse(document.getElementById("job-live-config").textContent);
  const $ = (id) => document.getElementById(id);
  const { el, fillList, when, zoned } = window.Dom;
  let state = $("job-state").dataset.state;
  const loadedState = state;
  let inflight = false;
  let again = false;

  function duration(seconds) {
    const minutes = Math.floor(seconds / 60);
    return minutes < 60 ? `${minutes} min` : `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
  }

  /* A verdict's text with the jobs ("job 7905", "#7905") and arrays ("array 42") it names
   * that the viewer may see (links.job: reason.job_links, links.array: reason.array_links;
   * id -> its page) as links, as the page renders them (scheduling/verdict_text.py
   * REFERENCE, the `job_links` filter); DOM nodes only. */
  const REFERENCE = /(?<![\w#])(?:(?:job #?|#)([0-9]+)|array ([0-9]+))\b/g;

  function linkJobs(node, text, links) {
    node.replaceChildren();
    let start = 0;
    for (const m of text.matchAll(REFERENCE)) {
      const [kind, ref] = m[1] ? ["job", m[1]] : ["array", m[2]];
      const href = Object.hasOwn(links[kind], ref) ? links[kind][ref] : null;
      if (!href) continue;
      const a = el("a", m[0]);
      a.href = href;
      node.append(text.slice(start, m.index), a);
      start = m.index + m[0].length;
    }
    node.append(text.slice(start));
    return node;
  }

  function renderVerdict(job) {
    const section = $("verdict");
    section.hidden = job.state !== "pending";
    const reason = job.pending_reason;
    $("verdict-body").hidden = !reason;
    $("verdict-none").hidden = !!reason;
    if (!reason) return;
    $("verdict-title").textContent = config.titles[reason.code] || reason.code;
    $("verdict-code").textContent = reason.code;
    const links = { job: reason.job_links || {}, array: reason.array_links || {} };
    linkJobs($("verdict-message"), zoned(reason.message), links);
    const dl = $("verdict-details");
    dl.replaceChildren();
    /* formatted by the server (scheduling/verdict_text.py), as the page and gpuctl show them */
    for (const fact of reason.facts || []) {
      dl.append(el("dt", fact.label), linkJobs(el("dd"), zoned(fact.text), links));
    }
    $("verdict-remedy").textContent = zoned(reason.remedy) || "—";
    $("queue-position").textContent = Dom.count(job.queue_position || "unknown");
    linkJobs($("estimated-start"), zoned(reason.estimated_start_text)
      || (job.estimated_start ? when(job.estimated_start) : "unknown"), links);
  }

  /* While a run is on its progress moves with the cluster clock (the server counts it to
   * its now: Job.progress_at), so between two refetches "Progress so far" ticks with the
   * header's clock from the last value the server gave, never lagging the time beside it. */
  const rendered = document.getElementById("cluster-clock");  // the server's instant
  let progress = {
    seconds: config.progress_seconds || 0,
    at: (rendered && Number(rendered.dataset.nowMs)) || window.Dom.clusterNow(),
  };
  function tickProgress() {
    if (!["running", "preempting"].includes(state)) return;
    const field = document.querySelector('#job-status [data-field="progress_seconds"]');
    if (field) field.textContent = duration(progress.seconds + (window.Dom.clusterNow() - progress.at) / 1000);
  }
  setInterval(tickProgress, 1000);

  /* as the server writes it (templates/scheduling/job_detail.html): "4 h a run: this run
   * is asked to stop at <when> if still running" (the `minutes` filter: Dom.span) */
  function timeLimit(job) {
    if (!job.time_limit_minutes) return "none";
    const limit = `${Dom.span(job.time_limit_minutes * 60)} a run`;
    return job.time_limit_at ? `${limit}: this run is asked to stop at ${when(job.time_limit_at)} if still running` : limit;
  }

  function renderStatus(job) {
    progress = { seconds: job.progress_seconds || 0, at: window.Dom.clusterNow() };
    const values = {
      submitted_at: when(job.submitted_at),
      begin_at: job.begin_at ? `${when(job.begin_at)} (asked: Slurm's --begin)` : "none",
      started_at: when(job.started_at),
      finished_at: when(job.finished_at),
      preemption_count: String(job.preemption_count),
      retry_count: `${job.retry_count} of ${job.max_retries}`,
      progress_seconds: duration(job.progress_seconds || 0),
      last_checkpoint_at: when(job.last_checkpoint_at),
      borrowed: job.borrowed ? "yes (reclaimable)" : "no",
      failure_reason: job.failure_reason || "—",
      time_limit: timeLimit(job),
    };
    /* a requeued job keeps its last run's start: say so while it waits again */
    $("started-label").textContent =
      job.state === "pending" && job.started_at ? "Last run started" : "Started";
    /* a running job's progress moves on and is saved only at a checkpoint: not yet "kept";
     * a cancelled or failed one lost what it made since its checkpoint (Job.progress_label) */
    $("progress-label").textContent =
      ["running", "preempting"].includes(job.state) ? "Progress so far"
        : ["cancelled", "failed"].includes(job.state) ? "Progress made" : "Progress kept";
    for (const dd of document.querySelectorAll("#job-status [data-field]")) {
      if (dd.dataset.field in values) dd.textContent = values[dd.dataset.field];
    }
  }

  function renderPlacement(job) {
    /* the allocations go when a run ends: where it ran stays in the timeline */
    const none = job.started_at ? "Holds no GPUs now; where it ran is in the timeline." : "Not placed yet.";
    fillList($("placement"), job.placement, none, (slot) =>
      el("li", slot.gpus.length === slot.node_gpus && slot.node_gpus > 1
        ? `${slot.node}: all ${slot.node_gpus} GPUs`
        : `${slot.node}: GPU${slot.gpus.length === 1 ? "" : "s"} ${slot.gpus.join(", ")}`));
  }

  function renderTimeline(job) {
    fillList($("timeline"), job.events, "No events yet.", (e) => {
      const li = el("li");
      const time = el("time", when(e.at));
      time.setAttribute("datetime", e.at);
      li.append(time, " ", el("strong", e.kind), " ", zoned(e.message));
      return li;
    });
  }

  function render(job) {
    state = job.state;
    const badge = $("job-state");
    badge.textContent = job.state;
    badge.dataset.state = job.state;
    renderVerdict(job);
    renderStatus(job);
    renderPlacement(job);
    renderTimeline(job);
    const cancel = $("cancel-form");
    if (cancel) cancel.hidden = !config.active_states.includes(job.state);
    const cancelNote = $("cancel-note");
    if (cancelNote) cancelNote.hidden = job.state === "pending";
    renderHoldForm(job);
    const actions = $("job-actions");
    if (actions) actions.hidden = !config.active_states.includes(job.state);
    const limitForm = $("time-limit-form");
    if (limitForm) limitForm.hidden = !config.active_states.includes(job.state);
    for (const id of ["begin-time-form", "top-form", "move-form"]) {
      const form = $(id);
      if (form) form.hidden = job.state !== "pending";
    }
    renderMessages(job);
  }

  // The hold form (its reason field stays as typed): shown while the job is active and
  // not held, its words by state, as the server writes them (templates/scheduling/
  // job_detail.html). Who holds it and the release button are the "hold-status" live part.
  function renderHoldForm(job) {
    const form = $("hold-form");
    if (!form) return;
    form.hidden = !config.active_states.includes(job.state) || Boolean(job.hold);
    const pending = job.state === "pending";
    $("hold-button").textContent = pending ? "Hold this job" : "Suspend this job";
    $("hold-note").textContent = pending ? config.hold_notes.pending : config.hold_notes.running;
  }

  // The flash of the action that led here ("submitted: it waits for the next cycle") is
  // about the moment the page was made: once the job has moved on, it is marked as
  // earlier and one line says where the job stands now.
  function renderMessages(job) {
    if (job.state === loadedState && !document.querySelector("main li[data-now]")) return;
    let now = `Now: job #${job.id} is ${job.state}`;
    if (job.state === "running" && job.started_at) now += ` (started ${when(job.started_at)})`;
    else if (job.finished_at && !config.active_states.includes(job.state)) now += ` (${when(job.finished_at)})`;
    else if (job.state === "pending" && job.pending_reason) now += `: ${job.pending_reason.code}`;
    window.Live.agePageMessages(now + ".");
  }

  async function refresh() {
    if (inflight) { again = true; return; }
    inflight = true;
    try {
      const response = await fetch(config.api, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (response.ok) render(await response.json());
    } catch (e) {
      /* offline: the next event or the reconnect refetches */
    } finally {
      inflight = false;
      if (again) { again = false; refresh(); }
    }
  }

  /* the pipeline (the jobs it starts after, those waiting for it) changes with other jobs:
   * refetched from the page itself after each cycle (static/js/live_parts.js) */
  if (document.getElementById("pipeline")) window.LiveParts.watch("cycles");

  window.Live.on(`job.${config.id}`, refresh);
  if ($("hold-status")) window.LiveParts.watch(`job.${config.id}`);
  window.Live.on("pending", () => { if (state === "pending") refresh(); });
  window.Live.onReconnect(refresh);
})();
