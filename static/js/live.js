/* The one small live client: a websocket to /ws/live/, topic subscriptions, reconnect
 * with backoff, and a refetch hook so a page that missed events while disconnected
 * catches up from a fresh snapshot. Pages use:
 *   Live.on("queues", (msg) => {...});      // msg = {type, topic, data}
 *   Live.on("cycles", fn, { noFetch: true });  // fn asks the server nothing: at once, always
 *   Live.onReconnect(() => {...});          // refetch a snapshot
 *   Live.agePageMessages("Now: …");         // the flash messages are about the past now
 * The status element #live-status (if present) shows the connection state in words;
 * when the server ends the connection because the session ended, it says so and the
 * client stops (a reconnect would be refused).
 *
 * "live" is a promise about the page's content: a page whose scripts register a refetch
 * (Live.onReconnect) updates what can change and catches up after a disconnection. On
 * any other page the badge says "not live" (reload for the latest figures), even when a
 * helper such as the header's clock listens to events.
 *
 * An event only tells a page to ask the server again, so every open page costs the server
 * a request per event (docs/reliability.md, "What the open pages cost"):
 * - a hidden page (a tab behind another, a minimised window) handles no event: it notes
 *   that it missed some and, once shown again, catches up from one fresh snapshot, as
 *   after a reconnect (500 people with the portal in a background tab made the server
 *   render 500 pages a cycle for nobody to read);
 * - a page-wide event (every topic but a job's own) reaches the page's handlers after a
 *   random wait of up to SPREAD_MS, so the pages open across the organisation do not all
 *   ask in the same instant after a cycle (100 at once made a submission wait 2 s behind
 *   them).
 * Handlers registered with { noFetch: true } (the header's clock) run at once, always. */
(function () {
  "use strict";
  const handlers = new Map();
  const reconnectHooks = [];
  let socket = null;
  let attempt = 0;
  let everConnected = false;
  let loaded = false;
  let missed = false;  // events (or a reconnect) went unhandled while the page was hidden

  const SPREAD_MS = 2000;
  const hidden = () => document.visibilityState === "hidden";

  function catchUp() {
    if (hidden()) { missed = true; return; }
    missed = false;
    reconnectHooks.forEach((fn) => fn());
  }

  document.addEventListener("visibilitychange", () => {
    if (missed && !hidden()) catchUp();
  });

  // Close codes of the server (core/realtime.py).
  const ACCESS_CHANGED = 4000;
  const SIGNED_OUT = 4401;
  const NOT_LIVE_TITLE = "This page does not update itself: reload it for the latest figures.";

  function setStatus(text, state) {
    const el = document.getElementById("live-status");
    if (el) {
      const live = reconnectHooks.length > 0;
      el.textContent = live ? text : "not live";
      el.dataset.state = live ? state : "off";
      el.title = live ? "This page updates itself as the cluster changes." : NOT_LIVE_TITLE;
    }
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    socket = new WebSocket(`${scheme}://${location.host}/ws/live/`);
    socket.addEventListener("open", () => {
      attempt = 0;
      setStatus("live", "open");
      for (const topic of handlers.keys()) socket.send(JSON.stringify({ subscribe: topic }));
      if (everConnected) catchUp();
      everConnected = true;
    });
    socket.addEventListener("message", (event) => {
      let msg;
      try { msg = JSON.parse(event.data); } catch (e) { return; }
      if (msg.error) { console.warn("live:", msg.error); return; }
      const list = handlers.get(msg.topic);
      if (!list || !msg.type) return;
      const shown = !hidden();
      const pageWide = !msg.topic.startsWith("job.");
      for (const h of list) {
        if (h.noFetch) h.fn(msg);
        else if (!shown) missed = true;
        else if (pageWide) setTimeout(() => h.fn(msg), Math.random() * SPREAD_MS);
        else h.fn(msg);
      }
    });
    socket.addEventListener("close", (event) => {
      if (event.code === SIGNED_OUT) {  // the session ended: nothing to reconnect to
        setStatus("signed out: reload the page to sign in again", "closed");
        return;
      }
      setStatus("reconnecting…", "closed");
      // ACCESS_CHANGED: the role or lines changed; subscribe again at once, each topic
      // checked against the role as it is now.
      attempt = event.code === ACCESS_CHANGED ? 0 : attempt + 1;
      const delay = Math.min(30000, 500 * 2 ** Math.min(attempt, 6)) * (0.5 + Math.random() / 2);
      setTimeout(connect, delay);
    });
  }

  function start() {
    loaded = true;
    if (!reconnectHooks.length) setStatus("not live", "off");
    if (handlers.size) connect();
  }

  // Flash messages say what happened when the page was made ("submitted: it waits for the
  // next cycle"); once the page has seen the cluster move on, each is marked as earlier and
  // one line says how things stand now (updated in place on later calls). A page without
  // flash messages is left alone.
  function agePageMessages(nowText) {
    const list = document.querySelector("main > ul.messages");
    if (!list) return;  // no flash: nothing to correct
    list.setAttribute("aria-live", "polite");
    for (const li of list.querySelectorAll("li:not([data-now]):not([data-earlier])")) {
      li.dataset.earlier = "1";
      li.classList.add("is-earlier");
      const tag = document.createElement("span");
      tag.className = "earlier-tag";
      tag.textContent = "Earlier: ";
      li.prepend(tag);
    }
    if (!nowText) return;
    let now = list.querySelector("li[data-now]");
    if (!now) {
      now = document.createElement("li");
      now.dataset.now = "1";
      now.className = "info is-now";
      list.append(now);
    }
    if (now.textContent !== nowText) now.textContent = nowText;
  }

  window.Live = {
    on(topic, fn, options) {
      if (!handlers.has(topic)) {
        handlers.set(topic, []);
        if (socket && socket.readyState === WebSocket.OPEN) {
          socket.send(JSON.stringify({ subscribe: topic }));
        }
      }
      handlers.get(topic).push({ fn, noFetch: Boolean(options && options.noFetch) });
      if (loaded && !socket && document.body.dataset.live !== "off") connect();
    },
    onReconnect(fn) { reconnectHooks.push(fn); },
    agePageMessages,
  };
  if (document.body.dataset.live !== "off") {
    document.addEventListener("DOMContentLoaded", start);
  }
})();
