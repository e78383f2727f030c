// The page's one way to make an element (app.js, fields.js): attributes set one by one and children appended,
// so a string is always a text node. Text from the server is never parsed as HTML: documents are untrusted input.
"use strict";

window.SSIDom = (() => {
  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs)) {
      if (name === "class") node.className = value;
      else if (name === "text") node.textContent = value;
      else node.setAttribute(name, value);
    }
    for (const child of children) node.append(child); // strings become text nodes
    return node;
  }

  return { el };
})();
