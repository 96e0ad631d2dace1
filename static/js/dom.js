/* The DOM helpers the page scripts share. Text is always set with textContent, never
 * as HTML, so nothing a user typed (job names, messages) can become markup.
 *   Dom.el("li", "text", "rp-muted")            // an element with text and a class
 *   Dom.fillList(ul, items, "None yet.", toLi)  // one <li> per item, or the empty text
 * and the cluster clock (every time the portal shows is cluster time, in the viewer's zone
 * from <html data-tz> (UTC by default); on the
 * simulator it runs faster than the wall clock, so never measure against Date.now()):
 *   Dom.clusterNow()   // cluster time now, epoch ms (from the header's #cluster-clock)
 *   Dom.when(iso)      // "2026-12-01 03:10 UTC"
 *   Dom.zoned(text)    // a verdict's text with its "2026-12-01 03:10 UTC" times in the page's zone
 *   Dom.ago(iso)       // "5 min ago" / "in 2 h 10 min", against Dom.clusterNow()
 * and counts as every page writes them (scheduling.engine.explain.num, the `count` filter):
 *   Dom.count(2943)    // "2,943"; text and null pass through unchanged */
(function () {
  "use strict";

  function count(n) {
    return typeof n === "number" && Number.isInteger(n) ? n.toLocaleString("en-US") : n;
  }

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = text;
    if (cls) node.className = cls;
    return node;
  }

  function fillList(list, items, emptyText, toItem) {
    list.replaceChildren();
    if (!items.length) {
      list.appendChild(el("li", emptyText, "rp-muted"));
      return;
    }
    for (const item of items) list.appendChild(toItem(item));
  }

  // -- the cluster clock ----------------------------------------------------------------
  // The page says what cluster time it was when the server rendered it, how many cluster
  // seconds pass per wall second (0 while paused or stopped) and, on the simulator, the
  // latest time its clock reaches without another cycle. Cycles (topic "cycles") move it on.
  const clockEl = document.getElementById("cluster-clock");
  const clock = { at: Date.now(), now: Date.now(), speed: 1, rate: 1, until: null, catchUp: null };
  if (clockEl) {
    clock.now = Number(clockEl.dataset.nowMs) || clock.at;
    clock.speed = Number(clockEl.dataset.speed) || 0;
    clock.rate = Number(clockEl.dataset.rate) || 0;
    clock.until = clockEl.dataset.untilMs ? Number(clockEl.dataset.untilMs) : null;
    clock.catchUp = clockEl.dataset.catchUpS ? Number(clockEl.dataset.catchUpS) * 1000 : null;
  }

  function clusterNow() {
    const t = clock.now + (Date.now() - clock.at) * clock.speed;
    return clock.until === null ? t : Math.min(t, clock.until);
  }

  function parse(iso) {
    // Python's isoformat() has microseconds: keep milliseconds, which every browser parses.
    return Date.parse(String(iso).replace(/(\.\d{3})\d+/, "$1"));
  }

  // The zone the server rendered the page in (<html data-tz>, core/timezones.py), and what
  // the server calls it at each UTC offset (<html data-tz-names>: "540=JST"), so a time
  // written here names its zone as the server's (Intl would say "GMT+9").
  const zone = document.documentElement.dataset.tz || "UTC";
  const zoneNames = {};
  for (const pair of (document.documentElement.dataset.tzNames || "").split(";")) {
    const [minutes, name] = pair.split("=");
    if (name) zoneNames[minutes] = name;
  }
  let zoneFormat = null;
  if (zone !== "UTC") {
    try {
      zoneFormat = new Intl.DateTimeFormat("en-GB", {
        timeZone: zone, year: "numeric", month: "2-digit", day: "2-digit",
        hour: "2-digit", minute: "2-digit", hourCycle: "h23", timeZoneName: "longOffset",
      });
    } catch (e) {
      zoneFormat = null; // an unknown zone: UTC, said so
    }
  }

  function zoneName(offset) {
    // "GMT+09:00" (or "GMT" at 0) -> the server's name, else "UTC+09" / "UTC+0530" as it
    // writes a zone without an abbreviation
    const m = /^GMT([+-])(\d\d):(\d\d)$/.exec(offset);
    const minutes = m ? (m[1] === "-" ? -1 : 1) * (60 * Number(m[2]) + Number(m[3])) : 0;
    if (zoneNames[String(minutes)]) return zoneNames[String(minutes)];
    return m ? `UTC${m[1]}${m[2]}${m[3] === "00" ? "" : m[3]}` : "UTC";
  }

  function when(iso) {
    if (!iso) return "—";
    const t = parse(iso);
    if (Number.isNaN(t)) return String(iso);
    if (!zoneFormat) return new Date(t).toISOString().slice(0, 16).replace("T", " ") + " UTC";
    const p = {};
    for (const part of zoneFormat.formatToParts(new Date(t))) p[part.type] = part.value;
    return `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute} ${zoneName(p.timeZoneName)}`;
  }

  // A time as the verdicts write it (always UTC); core/templatetags/cluster_time.py
  // (VERDICT_TIME, the in_zone filter) rewrites the same shape when it renders the page.
  const VERDICT_TIME = /\b(\d{4}-\d\d-\d\d) (\d\d:\d\d) UTC\b/g;

  function zoned(text) {
    if (!text || !zoneFormat) return text || "";
    return String(text).replace(VERDICT_TIME, (_m, day, hm) => when(`${day}T${hm}:00Z`));
  }

  function span(seconds) {
    const s = Math.floor(Math.abs(seconds));
    if (s < 60) return `${s} s`;
    const minutes = Math.floor(s / 60);
    if (minutes < 60) return `${minutes} min`;
    const hours = Math.floor(minutes / 60);
    if (hours < 48) return minutes % 60 ? `${hours} h ${minutes % 60} min` : `${hours} h`;
    const days = count(Math.floor(hours / 24));
    return hours % 24 ? `${days} d ${hours % 24} h` : `${days} d`;
  }

  function ago(iso) {
    const t = parse(iso);
    if (Number.isNaN(t)) return "";
    const delta = (t - clusterNow()) / 1000;
    if (Math.abs(delta) < 60) return "just now";
    return delta > 0 ? `in ${span(delta)}` : `${span(delta)} ago`;
  }

  // A cycle finished at cluster time `iso`: the clock is at least there, and on the
  // simulator it runs on for another catch-up from it. Never moves back.
  function sawCycle(iso) {
    const t = parse(iso);
    if (Number.isNaN(t)) return;
    const shown = clusterNow();
    clock.at = Date.now();
    clock.now = Math.max(shown, t);
    if (clock.until !== null && clock.catchUp !== null) {
      clock.until = Math.max(clock.until, t + clock.catchUp);
      if (clockEl.dataset.state === "stopped" && clock.rate > 0) {
        // A stopped clock runs again once cycles come back: say so.
        clockEl.dataset.state = "running";
        clock.speed = clock.rate;
        const badge = document.getElementById("sim-badge");
        if (badge) badge.textContent = `simulated cluster · ${clock.rate}\u00d7`;
      }
    }
    tick();
  }

  const timeEl = document.getElementById("cluster-time");
  function tick() {
    if (!timeEl) return;
    const iso = new Date(clusterNow()).toISOString();
    timeEl.textContent = when(iso);
    timeEl.setAttribute("datetime", iso);
  }
  if (timeEl) {
    setInterval(tick, 1000);
    if (window.Live) {
      window.Live.on("cycles", (msg) => sawCycle(msg.data && msg.data.cluster_time),
                     { noFetch: true });  // the clock stays right, in a hidden tab too
    }
  }

  window.Dom = { el, fillList, clusterNow, when, zoned, ago, span, count };
})();
