/* Live parts: a page rendered on the server keeps every part that can change fresh, with
 * no second template in script. The page marks those parts with data-live-part (each has
 * an id); a page script says which events concern it:
 *   LiveParts.watch("nodes", (msg) => msg.data.name === "r000-n01");
 *   LiveParts.watch("cycles");
 *   LiveParts.onSwap((changedIds) => {...});   // after parts were replaced
 *   LiveParts.minGap(2000);                    // at most one refetch per 2 s (default 1 s)
 * On such an event it refetches the page's own address (GET) and replaces each part whose
 * HTML changed; on reconnect too. One refetch at a time, at most one per minGap (a burst
 * of events makes one refetch at its end). Parts hold no form field a person types in
 * (those stay put); focus inside a replaced part comes back to the element of the same id.
 * <body data-live-refreshed> is the time of the last refetch (tests wait on it). */
(function () {
  "use strict";
  let minGapMs = 1000;
  const swapHooks = [];
  let inflight = false;
  let again = false;
  let last = 0;
  let timer = null;

  function parts(root) {
    return Array.from(root.querySelectorAll("[data-live-part][id]"));
  }

  async function refresh() {
    if (inflight) { again = true; return; }
    inflight = true;
    last = Date.now();
    try {
      const response = await fetch(location.pathname + location.search, {
        credentials: "same-origin", headers: { Accept: "text/html", "X-Live-Refresh": "1" },
      });
      if (!response.ok) return;  // a 403 after logout, a 404 after a delete: keep the page
      const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
      const changed = [];
      for (const part of parts(document)) {
        const next = fresh.getElementById(part.id);
        if (!next || next.outerHTML === part.outerHTML) continue;
        const focused = part.contains(document.activeElement) ? document.activeElement.id : null;
        part.replaceWith(document.importNode(next, true));
        if (focused) {
          const again_ = document.getElementById(focused);
          if (again_) again_.focus();
        }
        changed.push(part.id);
      }
      document.body.dataset.liveRefreshed = String(Date.now());
      if (changed.length) swapHooks.forEach((fn) => fn(changed));
    } catch (e) {
      /* offline: the next event or the reconnect refetches */
    } finally {
      inflight = false;
      if (again) { again = false; schedule(); }
    }
  }

  function schedule() {
    if (timer) return;
    const wait = Math.max(150, last + minGapMs - Date.now());
    timer = setTimeout(() => { timer = null; refresh(); }, wait);
  }

  let hooked = false;
  window.LiveParts = {
    watch(topic, accept) {
      window.Live.on(topic, (msg) => { if (!accept || accept(msg)) schedule(); });
      if (!hooked) { hooked = true; window.Live.onReconnect(schedule); }
    },
    onSwap(fn) { swapHooks.push(fn); },
    minGap(ms) { minGapMs = ms; },
    refresh: schedule,
  };
})();
