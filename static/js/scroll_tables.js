// A table wider than the screen scrolls inside its own box (portal.css, 390 px phones).
// Keyboard users can scroll it only if it takes focus (WCAG 2.1.1; axe-core's
// scrollable-region-focusable), so a table that overflows is focusable and one that fits
// is not, which adds no needless tab stop on a wide screen.
(function () {
  "use strict";
  const tables = Array.from(document.querySelectorAll("main table"));
  if (!tables.length) return;
  function update(table) {
    if (table.scrollWidth > table.clientWidth + 1) {
      table.setAttribute("tabindex", "0");
    } else if (table.getAttribute("tabindex") === "0") {
      table.removeAttribute("tabindex");
    }
  }
  function updateAll() {
    tables.forEach(update);
  }
  updateAll();
  let pending = 0;
  window.addEventListener("resize", function () {
    window.clearTimeout(pending);
    pending = window.setTimeout(updateAll, 100);
  });
  if ("ResizeObserver" in window) {
    const observer = new ResizeObserver(function (entries) {
      entries.forEach(function (e) { update(e.target); });
    });
    tables.forEach(function (t) { observer.observe(t); });
  }
})();
