// A small, safe Markdown renderer: everything is HTML-escaped first, then fenced code, inline
// code, headings, lists, bold, italics and http(s) links become markup. No dependencies.
"use strict";
(function () {
  function escape(text) {
    return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
  }
  function inline(text) {
    return text
      .replace(/`([^`]+)`/g, "<code>$1</code>")
      .replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>")
      .replace(/(^|[^*])\*([^*\s][^*]*)\*/g, "$1<em>$2</em>")
      .replace(/\[([^\]]+)\]\((https?:\/\/[^\s)]+)\)/g, '<a href="$2" rel="noopener" target="_blank">$1</a>');
  }
  function render(source) {
    const out = [];
    const blocks = escape(source).split(/```/);
    blocks.forEach(function (block, index) {
      if (index % 2 === 1) {
        out.push("<pre><code>" + block.replace(/^[\w+-]*\n/, "") + "</code></pre>");
        return;
      }
      let list = null;
      block.split("\n").forEach(function (line) {
        const item = /^\s*(?:[-*]|\d+\.)\s+(.*)$/.exec(line);
        if (item) {
          if (!list) { list = []; }
          list.push("<li>" + inline(item[1]) + "</li>");
          return;
        }
        if (list) { out.push("<ul>" + list.join("") + "</ul>"); list = null; }
        const heading = /^(#{1,6})\s+(.*)$/.exec(line);
        if (heading) {
          const level = heading[1].length;
          out.push("<h" + level + ">" + inline(heading[2]) + "</h" + level + ">");
        } else if (line.trim()) {
          out.push("<p>" + inline(line) + "</p>");
        }
      });
      if (list) { out.push("<ul>" + list.join("") + "</ul>"); }
    });
    return out.join("");
  }
  window.renderMarkdown = render;
  window.escapeHtml = escape;
})();
