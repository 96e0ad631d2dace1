// The browser's time zone, for pages shown in the viewer's zone (core/timezones.py): on
// the first visit (no "tz" cookie yet) remember Intl's zone; the server checks the name
// against its zone list and ignores anything else. A zone chosen on /account/ wins.
(function () {
  "use strict";
  if (document.cookie.split("; ").some((c) => c.indexOf("tz=") === 0)) return;
  let zone = "";
  try {
    zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "";
  } catch (e) {
    return;
  }
  if (!zone || zone.length > 64) return;
  document.cookie = "tz=" + encodeURIComponent(zone) + "; path=/; max-age=31536000; SameSite=Lax";
})();
