"""What a person reads must read well (#15): checks run on every page a browser test visits.

``readable(page, where)`` collects the page's visible text (``page.inner_text("body")``
plus the text of charts, which ``innerText`` leaves out) and fails on a raw epoch (a 9-10
digit number, with or without decimals), a float dump (an exponent, or more than three
decimals) and a clock time without its zone (``UTC``, or the short name of the zone the
page is shown in, e.g. ``JST``) that is not relative. A time has its zone when the element
showing it, its row, or its table column header names it, or when a chart's axis does.
It also fails on a count of 1,000 or more written without its thousands separators
("4186 used"), outside literal values (``<code>``: an audit record's stored before and
after); a job's id (``#4186``, ``job 4186``) is not a count.
"""

from __future__ import annotations

import re

EPOCH = re.compile(r"(?<![\d.,])\d{9,10}(?:\.\d+)?(?![\d,])")
EXPONENT = re.compile(r"\d(?:\.\d+)?[eE][+-]?\d+\b")
ISO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:\d\d)?$")
LONG_DECIMALS = re.compile(r"(?<![\d.])\d+\.\d{4,}(?![\d.])")  # not in dotted versions/IPs
# A count of 1,000 or more without its thousands separators ("4186 used" where another
# page writes "4,186"): a number standing alone, not a job's id (#4186, job 4186), not part
# of a date, time, name, version or path.
UNSEPARATED = re.compile(r"(?<![\w#.,:/+-])(?<!job )(?<!jobs )(?<!Job )\d{4,}(?![\w:/-]|,\d)")

# Every text node showing a clock time (HH:MM) whose element, row or column header,
# within the nearest few ancestors, has no "UTC" and is not a relative time.
_ZONELESS_JS = r"""
() => {
  const TIME = /(^|[^\d:])\d{1,2}:\d{2}(?::\d{2})?(?![\d:])/;
  // UTC, or a name the page gives its display zone (<html data-tz-names>: "540=JST")
  const names = ["UTC", "\\+00:00", "\\bZ\\b", "\\dZ\\b"];  // ISO 8601: 20:30:00Z
  for (const pair of (document.documentElement.dataset.tzNames || "").split(";")) {
    const name = pair.split("=")[1];
    if (name && /^[A-Za-z]{2,6}$/.test(name)) names.push(`\\b${name}\\b`);
  }
  const ZONE = new RegExp(names.join("|"));
  const RELATIVE = /\bago\b|\bin \d|from now/;
  const header = (cell) => {
    const table = cell.closest("table");
    if (!table) return "";
    const row = cell.parentElement;
    const index = Array.prototype.indexOf.call(row.children, cell);
    const head = table.querySelector("thead tr");
    const th = head && head.children[index];
    return (th ? th.textContent : "") + " " + (table.caption ? table.caption.textContent : "");
  };
  const out = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode;
    const text = node.textContent;
    if (!TIME.test(text)) continue;
    const el = node.parentElement;
    if (!el || el.closest("script, style, template, noscript, [hidden]")) continue;
    if (!el.getClientRects().length) continue;  // not shown
    const svg = el.closest("svg");
    const scope = svg ? (svg.closest("[id^=chart-]") || svg) : null;
    let ok = false;
    if (scope) {
      ok = ZONE.test(scope.textContent);
    } else {
      let a = el;
      for (let i = 0; a && i < 4 && !ok; i++, a = a.parentElement) {
        const t = a.textContent;
        ok = ZONE.test(t) || RELATIVE.test(t);
        if (!ok && (a.tagName === "TD" || a.tagName === "TH")) ok = ZONE.test(header(a));
        if (a.tagName === "LI" || a.tagName === "TR" || a.tagName === "P") break;
      }
    }
    if (!ok) out.push(text.trim().slice(0, 120));
  }
  return out;
}
"""

_CHART_TEXT_JS = """() => Array.from(document.querySelectorAll("svg text"))
    .map((t) => t.textContent).join("\\n")"""


# The page's text but literal values (``<code>``, ``<pre>``, ``<kbd>``, ``<samp>``: an audit
# record's stored before/after, a command), which are shown as stored, not as prose.
_PROSE_JS = """() => {
  const out = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const el = walker.currentNode.parentElement;
    if (el && !el.closest("code, pre, kbd, samp, script, style, template")) {
      out.push(walker.currentNode.textContent);
    }
  }
  return out.join("\\n");
}"""


def unreadable(text: str) -> list[str]:
    """The raw epochs and float dumps in ``text``, each with a little context."""
    return [_around(text, m) for p in (EPOCH, EXPONENT, LONG_DECIMALS) for m in p.finditer(text)]


def unseparated(text: str) -> list[str]:
    """The counts of four digits or more in ``text`` written without thousands separators,
    each with a little context."""
    return [_around(text, m) for m in UNSEPARATED.finditer(text)]


def _around(text: str, m: re.Match[str]) -> str:
    """A match with a little context, on one line."""
    return text[max(0, m.start() - 40) : m.end() + 20].replace("\n", " | ")


def readable(page, where: str) -> str:
    """Assert the page reads well (see the module docstring); return its visible text."""
    text = page.inner_text("body")
    charts = page.evaluate(_CHART_TEXT_JS)
    bad = unreadable(text + "\n" + charts)
    assert not bad, f"{where}: raw epoch or float dump: {bad}"
    bare = unseparated(page.evaluate(_PROSE_JS) + "\n" + charts)
    assert not bare, f"{where}: a count without thousands separators: {bare}"
    zoneless = page.evaluate(_ZONELESS_JS)
    assert not zoneless, f"{where}: a time without its zone: {zoneless}"
    return text


def readable_json(value, where: str) -> None:
    """Every string a person reads in an API answer (a verdict's message, remedy and
    details, the events' messages) has no raw epoch or float dump; ISO 8601 times,
    which programs read, are left out."""
    strings: list[str] = []

    def walk(v) -> None:
        if isinstance(v, str):
            if not ISO_TIME.match(v):  # machine-readable times are for programs
                strings.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(value)
    bad = unreadable("\n".join(strings))
    assert not bad, f"{where}: raw epoch or float dump: {bad}"
    bare = unseparated("\n".join(strings))
    assert not bare, f"{where}: a count without thousands separators: {bare}"
