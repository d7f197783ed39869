// A line diff (longest common subsequence) for approval cards: what a write would change.
"use strict";
(function () {
  function lineDiff(before, after) {
    const a = before ? before.replace(/\n$/, "").split("\n") : [];
    const b = after ? after.replace(/\n$/, "").split("\n") : [];
    const rows = a.length + 1, cols = b.length + 1;
    const table = new Array(rows * cols).fill(0);
    for (let i = a.length - 1; i >= 0; i--) {
      for (let j = b.length - 1; j >= 0; j--) {
        table[i * cols + j] = a[i] === b[j] ? table[(i + 1) * cols + j + 1] + 1
          : Math.max(table[(i + 1) * cols + j], table[i * cols + j + 1]);
      }
    }
    const out = [];
    let i = 0, j = 0;
    while (i < a.length || j < b.length) {
      if (i < a.length && j < b.length && a[i] === b[j]) { out.push([" ", a[i]]); i++; j++; }
      else if (j < b.length && (i >= a.length || table[i * cols + j + 1] >= table[(i + 1) * cols + j])) { out.push(["+", b[j]]); j++; }
      else { out.push(["-", a[i]]); i++; }
    }
    return out;
  }
  function diffHtml(lines) {
    const kinds = { "+": "add", "-": "del", " ": "ctx" };
    return '<pre class="diff">' + lines.map(function (pair) {
      return '<span class="' + kinds[pair[0]] + '">' + pair[0] + " " + window.escapeHtml(pair[1]) + "</span>";
    }).join("") + "</pre>";
  }
  function patchLines(patch) {
    return patch.replace(/\n$/, "").split("\n").map(function (line) {
      const head = line.charAt(0);
      if (/^(---|\+\+\+|@@) /.test(line)) { return [" ", line]; }  // headers, not changes
      return [head === "+" || head === "-" ? head : " ", line.slice(1)];
    });
  }
  window.lineDiff = lineDiff;
  window.diffHtml = diffHtml;
  window.patchLines = patchLines;
})();
