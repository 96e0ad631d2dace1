/* A job array's page, live: where its tasks stand, its facts (the bound), the cancel
 * button's count and the tasks table are live parts (static/js/live_parts.js), refetched
 * after each cycle (tasks start, end, wait) and each queue change (a bound changed, a
 * task submitted or cancelled elsewhere), at most every 2 s. The bound's form, where a
 * person types, stays as it is. */
(function () {
  "use strict";
  if (!document.getElementById("array-now") || !window.LiveParts) return;
  LiveParts.minGap(2000);
  LiveParts.watch("cycles");
  LiveParts.watch("queues");
})();
