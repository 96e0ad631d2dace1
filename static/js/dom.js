/* The DOM helpers the page scripts share. Text is always set with textContent, never
 * as HTML, so nothing a user typed (job names, messages) can become markup.
 *   Dom.el("li", "text", "rp-muted")            // an element with text and a class
 *   Dom.fillList(ul, items, "None yet.", toLi)  // one <li> per item, or the empty text */
(function () {
  "use strict";

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

  window.Dom = { el, fillList };
})();
