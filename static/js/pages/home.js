/* The home page, live: the totals, nodes by state and the lines against their contracts
 * are one live part (#home-live, static/js/live_parts.js), refetched after a cycle, a
 * node's change or a contract's change, at most every 5 s (every signed-in person lands
 * here). */
(function () {
  "use strict";
  if (!document.getElementById("home-live") || !window.LiveParts) return;
  LiveParts.minGap(5000);
  LiveParts.watch("cycles");
  LiveParts.watch("nodes");
  LiveParts.watch("queues", (msg) => (msg.data || {}).change !== undefined);
})();
