/* A business line's page, live: the contract and its use, recent use, suggestions, the
 * history of contract changes and the requests are one live part (#line-live, see
 * static/js/live_parts.js), refetched when a cycle ran, a job came or went in a queue,
 * or a contract of this line changed (an approval taking effect, a change ending). After
 * a contract change the flash messages are marked as earlier. */
(function () {
  "use strict";
  const part = document.getElementById("line-live");
  if (!part || !window.LiveParts) return;
  const line = part.dataset.line;
  LiveParts.minGap(2000);
  let contractChanged = false;
  LiveParts.watch("queues", (msg) => {
    const d = msg.data || {};
    if (d.change !== undefined) {  // a contract change: ours only
      if (d.line !== line) return false;
      contractChanged = true;
    }
    return true;
  });
  LiveParts.onSwap(() => {
    if (contractChanged) Live.agePageMessages(`Now: the contract of ${line} changed; the figures below are current.`);
  });
})();
