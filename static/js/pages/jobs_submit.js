/* Submit page: queue defaults, "would it start now, and when?" and the resource estimator.
 * Works without this script (every button posts the form and the server answers);
 * with it, the estimate and the scheduler's what-if update in place as you type. Everything shown
 * is set with textContent, never as HTML. */
(function () {
  "use strict";
  const form = document.getElementById("submit-form");
  if (!form) return;
  const queues = JSON.parse(document.getElementById("queue-info").textContent);
  const TIERS = ["experiment", "finetune", "core", "urgent"]; // lowest first
  const FEASIBILITY_FIELDS = ["queue", "tier", "gpus", "gpus_per_node", "gpu_memory_gb", "rdma",
    "exclusive_node", "avoid_inference", "preemptible", "estimated_runtime_minutes", "time_limit_minutes", "model_name",
    "after", "after_arrays", "after_condition", "singleton", "array", "after_corresponding", "name",
    "begin_at"];
  const EST_FIELDS = ["params", "precision", "optimizer", "zero_stage", "data_parallel", "seq_len",
    "micro_batch", "hidden_size", "num_layers", "activation_checkpointing"];
  const $ = (id) => document.getElementById(id);
  const { el, zoned, count } = window.Dom;
  let lastRecommendation = null;

  function debounce(fn, ms) {
    let timer = null;
    return (...args) => { clearTimeout(timer); timer = setTimeout(() => fn(...args), ms); };
  }

  function fieldValue(input) {
    if (!input) return "";
    if (input.type === "checkbox") return input.checked ? "on" : "";
    return input.value;
  }

  function query(prefix, names) {
    const params = new URLSearchParams();
    for (const name of names) {
      const value = fieldValue(form.elements[prefix + name]);
      if (value !== "") params.set(name, value);
    }
    return params.toString();
  }

  // -- queue defaults -------------------------------------------------------------------
  function currentQueue() {
    const id = form.elements.queue.value;
    return queues.find((q) => String(q.id) === id) || null;
  }

  function updateQueueDefaults() {
    const queue = currentQueue();
    const hint = $("queue-hint");
    const tierSelect = form.elements.tier;
    const preemptSelect = form.elements.preemptible;
    if (!queue) {
      hint.textContent = "";
      return;
    }
    const maxRank = TIERS.indexOf(queue.tier);
    for (const option of tierSelect.options) {
      if (option.value === "") {
        option.textContent = `The queue's tier (${queue.tier})`;
      } else {
        option.disabled = TIERS.indexOf(option.value) > maxRank;
      }
    }
    if (tierSelect.selectedOptions[0] && tierSelect.selectedOptions[0].disabled) tierSelect.value = "";
    const tier = tierSelect.value || queue.tier;
    const preemptible = TIERS.indexOf(tier) < TIERS.indexOf("core");
    preemptSelect.options[0].textContent = `Default for tier ${tier}: ${preemptible ? "yes" : "no"}`;
    hint.textContent = `Queue ${queue.name} (line ${queue.line}) has tier ${queue.tier}: ` +
      `jobs may ask for that tier or lower; at tier ${tier} a job is ` +
      `${preemptible ? "" : "not "}preemptible unless you choose otherwise.` + limitHint(queue);
  }

  /* the queue's time limits (scheduling/time_limits.py: of_request), as its hint says them */
  function limitHint(queue) {
    const words = (minutes) => Dom.span(minutes * 60);
    if (!queue.max_time_limit && !queue.default_time_limit) return "";
    const most = queue.max_time_limit ? ` A run may last at most ${words(queue.max_time_limit)} here.` : "";
    return `${most} A job that gives no time limit gets ${words(queue.default_time_limit)}.`;
  }

  // -- would it start now, and when? (the engine's what-if) ----------------------------
  // /jobs/feasibility/ runs the scheduler's plan() on the current cluster with this job
  // added; the answer fills the same elements the server rendered (submit.html).
  const feasibilityBox = $("feasibility");
  const part = {
    title: $("feasibility-title"), code: $("feasibility-code"), text: $("feasibility-text"),
    when: $("feasibility-when"), start: $("feasibility-start"),
    position: $("feasibility-position"), remedy: $("feasibility-remedy"),
    numbers: $("feasibility-numbers"), details: $("feasibility-details"),
    asOf: $("feasibility-asof"),
  };
  const AS_OF = "The scheduler's own plan on the cluster as it is now, with this job added; " +
    "its next cycle decides.";
  let feasibilitySeq = 0;
  let inFlight = null;

  function showAnswer(body) {
    feasibilityBox.dataset.status = body.status || "unknown";
    feasibilityBox.dataset.code = body.code || "";
    part.title.textContent = body.title || "";
    part.code.textContent = body.code || "";
    part.code.hidden = !body.code;
    part.text.textContent = zoned(body.message);
    part.start.textContent = zoned(body.estimated_start_text);
    part.position.textContent = body.position ? `; place in line: ${count(body.position)}` : "";
    part.when.hidden = !body.estimated_start_text;
    part.remedy.textContent = zoned(body.remedy);
    part.remedy.hidden = !body.remedy;
    const rows = body.detail_rows || [];
    part.details.replaceChildren();
    for (const [label, value] of rows) part.details.append(el("dt", label), el("dd", value));
    part.numbers.hidden = !rows.length;
    part.asOf.textContent = zoned(body.as_of_text) || AS_OF;
  }

  async function checkFeasibility() {
    const seq = ++feasibilitySeq;
    if (inFlight) inFlight.abort(); // an older question is no longer wanted
    if (!form.elements.queue.value || !form.elements.gpus.value) {
      showAnswer({ status: "unknown", message: "Choose a queue and a GPU count to see." });
      return;
    }
    feasibilityBox.setAttribute("aria-busy", "true");
    // The first question after a cycle rebuilds the cluster's snapshot (up to a second or
    // two at 10,000 GPUs): say so while the last answer stays on screen.
    const slow = setTimeout(() => {
      if (seq === feasibilitySeq) part.asOf.textContent = "Asking the scheduler…";
    }, 300);
    inFlight = new AbortController();
    let response, body;
    try {
      response = await fetch(`/jobs/feasibility/?${query("", FEASIBILITY_FIELDS)}`,
        { credentials: "same-origin", headers: { Accept: "application/json" },
          signal: inFlight.signal });
      body = await response.json();
    } catch (e) {
      // superseded (a newer question is on its way), or no answer: keep the last one
      if (seq === feasibilitySeq) {
        part.asOf.textContent = "No answer from the portal: the answer above may be out of date.";
      }
      return;
    } finally {
      clearTimeout(slow);
      if (seq === feasibilitySeq) feasibilityBox.removeAttribute("aria-busy");
    }
    if (seq !== feasibilitySeq) return; // a newer check is on its way
    if (response.ok) {
      showAnswer(body);
    } else if (response.status === 503) {
      showAnswer({ status: "unknown", title: "No answer now",
        message: ((body.errors || {}).cluster || ["The cluster did not answer."]).join(" ") });
    } else {
      const parts = Object.entries(body.errors || {}).map(([k, v]) => `${k}: ${v.join(" ")}`);
      showAnswer({ status: "invalid", title: "Would be refused",
        message: "Not valid yet: " + (parts.join("; ") || "check the form") });
    }
  }
  const checkSoon = debounce(checkFeasibility, 250);

  // -- estimator ------------------------------------------------------------------------
  function showEstimatorErrors(errors) {
    for (const name of EST_FIELDS) {
      const input = form.elements["est-" + name];
      if (!input) continue;
      const wrapper = input.closest(".rp-field");
      const old = wrapper.querySelector(".js-error");
      if (old) old.remove();
      input.removeAttribute("aria-invalid");
      if (errors && errors[name]) {
        const p = el("p", errors[name].join(" "), "error js-error");
        p.id = `${input.id}_js_error`;
        wrapper.appendChild(p);
        input.setAttribute("aria-invalid", "true");
      }
    }
  }

  function fmt(x) {
    return Number(x).toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 });
  }

  function renderEstimate(rec) {
    const b = rec.breakdown;
    const box = $("estimate-result");
    box.replaceChildren();
    box.appendChild(el("h3", "Memory per GPU"));
    const table = el("table", null, "grid rp-breakdown");
    const caption = `Estimated memory per GPU at ${count(b.data_parallel)} data-parallel GPU` +
      `${b.data_parallel === 1 ? "" : "s"}${b.zero_stage ? `, ZeRO-${b.zero_stage}` : ""}`;
    table.appendChild(el("caption", caption));
    const head = el("thead");
    const hr = el("tr");
    hr.append(el("th", "Part"), el("th", "GB per GPU"));
    hr.querySelectorAll("th").forEach((th) => th.setAttribute("scope", "col"));
    head.appendChild(hr);
    table.appendChild(head);
    const body = el("tbody");
    for (const [label, key] of [["Weights", "weights_gb"], ["Gradients", "gradients_gb"],
      ["Optimizer states", "optimizer_gb"], ["Activations", "activations_gb"]]) {
      const tr = el("tr");
      const th = el("th", label);
      th.setAttribute("scope", "row");
      const td = el("td", fmt(b[key]));
      td.dataset.part = key;
      tr.append(th, td);
      body.appendChild(tr);
    }
    table.appendChild(body);
    const foot = el("tfoot");
    const tr = el("tr");
    const th = el("th", "Total");
    th.setAttribute("scope", "row");
    const td = el("td");
    td.dataset.part = "total_gb";
    td.appendChild(el("strong", fmt(b.total_gb)));
    tr.append(th, td);
    foot.appendChild(tr);
    table.appendChild(foot);
    box.appendChild(table);
    box.appendChild(el("p",
      `Model states: ${Number(b.bytes_per_param.toFixed(2))} bytes per parameter, ` +
      `${count(Math.round(b.states_gb))} GB for the whole model before sharding. Shape: hidden ` +
      `${count(b.hidden_size)}, ${count(b.num_layers)} layers${b.shape_derived ? " (derived from the size)" : ""}.`,
      "rp-muted"));
    const p = el("p", null, rec.fits ? "rp-recommend" : "rp-recommend is-bad");
    p.id = "recommendation-text";
    if (rec.fits) {
      p.appendChild(el("strong", "Recommended:"));
      let text = ` ${count(rec.gpus)} × ${rec.gpu_model} ${rec.gpu_memory_gb} GB`;
      text += rec.fits_one_node ? ", fits on one node"
        : ` on ${count(rec.nodes)} nodes of ${rec.gpus_per_node} GPUs (needs RDMA)`;
      if (rec.zero_stage) text += `, ZeRO-${rec.zero_stage}`;
      if (rec.activation_checkpointing) text += ", activation checkpointing";
      text += `. Ask for at least ${b.needed_memory_gb} GB per GPU.`;
      p.appendChild(document.createTextNode(text));
    } else {
      p.appendChild(el("strong", "Does not fit this cluster as asked."));
    }
    box.appendChild(p);
    if (rec.notes.length) {
      const ul = el("ul", null, "rp-notes");
      rec.notes.forEach((n) => ul.appendChild(el("li", n)));
      box.appendChild(ul);
    }
    $("fill-button").disabled = !rec.fits;
  }

  async function runEstimate() {
    const box = $("estimate-result");
    box.setAttribute("aria-busy", "true");
    try {
      const response = await fetch(`/jobs/estimate/?${query("est-", EST_FIELDS)}`,
        { credentials: "same-origin", headers: { Accept: "application/json" } });
      const body = await response.json();
      if (!response.ok) {
        showEstimatorErrors(body.errors || {});
        lastRecommendation = null;
        return null;
      }
      showEstimatorErrors(null);
      lastRecommendation = body;
      renderEstimate(body);
      return body;
    } finally {
      box.removeAttribute("aria-busy");
    }
  }

  async function fillForm() {
    const rec = lastRecommendation || (await runEstimate());
    if (!rec || !rec.fits) return;
    form.elements.gpus.value = rec.form.gpus;
    form.elements.gpus_per_node.value = "";
    form.elements.gpu_memory_gb.value = rec.form.gpu_memory_gb ?? "";
    const note = $("estimate-result").querySelector(".js-filled") || el("p", null, "js-filled rp-ok");
    note.textContent = `Filled the job form: ${count(rec.form.gpus)} GPUs, at least ` +
      `${rec.form.gpu_memory_gb} GB each.`;
    $("estimate-result").appendChild(note);
    checkFeasibility();
    form.elements.gpus.focus();
  }

  // -- wiring ---------------------------------------------------------------------------
  form.elements.queue.addEventListener("change", () => { updateQueueDefaults(); checkSoon(); });
  form.elements.tier.addEventListener("change", updateQueueDefaults);
  for (const name of FEASIBILITY_FIELDS) {
    const input = form.elements[name];
    if (!input) continue;
    input.addEventListener("change", checkSoon);
    input.addEventListener("input", checkSoon);
  }
  $("estimate-button").addEventListener("click", (event) => { event.preventDefault(); runEstimate(); });
  $("fill-button").addEventListener("click", (event) => { event.preventDefault(); fillForm(); });
  $("check-button").addEventListener("click", (event) => { event.preventDefault(); checkFeasibility(); });
  for (const name of EST_FIELDS) {
    const input = form.elements["est-" + name];
    if (!input) continue;
    input.addEventListener("change", () => { lastRecommendation = null; });
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter") { event.preventDefault(); runEstimate(); }
    });
  }
  updateQueueDefaults();
  const summary = $("error-summary");
  if (summary) summary.focus();
})();
