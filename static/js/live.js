/* The one small live client: a websocket to /ws/live/, topic subscriptions, reconnect
 * with backoff, and a refetch hook so a page that missed events while disconnected
 * catches up from a fresh snapshot. Pages use:
 *   Live.on("queues", (msg) => {...});      // msg = {type, topic, data}
 *   Live.onReconnect(() => {...});          // refetch a snapshot
 * The status element #live-status (if present) shows the connection state in words. */
(function () {
  "use strict";
  const handlers = new Map();
  const reconnectHooks = [];
  let socket = null;
  let attempt = 0;
  let everConnected = false;

  function setStatus(text, state) {
    const el = document.getElementById("live-status");
    if (el) {
      el.textContent = text;
      el.dataset.state = state;
    }
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    socket = new WebSocket(`${scheme}://${location.host}/ws/live/`);
    socket.addEventListener("open", () => {
      attempt = 0;
      setStatus("live", "open");
      for (const topic of handlers.keys()) socket.send(JSON.stringify({ subscribe: topic }));
      if (everConnected) reconnectHooks.forEach((fn) => fn());
      everConnected = true;
    });
    socket.addEventListener("message", (event) => {
      let msg;
      try { msg = JSON.parse(event.data); } catch (e) { return; }
      if (msg.error) { console.warn("live:", msg.error); return; }
      const list = handlers.get(msg.topic);
      if (list && msg.type) list.forEach((fn) => fn(msg));
    });
    socket.addEventListener("close", () => {
      setStatus("reconnecting…", "closed");
      attempt += 1;
      const delay = Math.min(30000, 500 * 2 ** Math.min(attempt, 6)) * (0.5 + Math.random() / 2);
      setTimeout(connect, delay);
    });
  }

  window.Live = {
    on(topic, fn) {
      if (!handlers.has(topic)) {
        handlers.set(topic, []);
        if (socket && socket.readyState === WebSocket.OPEN) {
          socket.send(JSON.stringify({ subscribe: topic }));
        }
      }
      handlers.get(topic).push(fn);
    },
    onReconnect(fn) { reconnectHooks.push(fn); },
  };
  if (document.body.dataset.live !== "off") {
    document.addEventListener("DOMContentLoaded", connect);
  }
})();
