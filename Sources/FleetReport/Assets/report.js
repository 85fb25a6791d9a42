(function () {
  "use strict";
  var block = document.getElementById("report-data");
  function load() {
    if (block.dataset.encoding !== "deflate") return Promise.resolve(block.textContent);
    var binary = atob(block.textContent), bytes = new Uint8Array(binary.length);
    for (var i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Response(stream).text();
  }
  load().then(function (json) { start(JSON.parse(json)); });
  function start(data) {
  var rows = data.rows, size = data.pageSize;
  // Columns as shown: address, profile, identity, firmware, battery, crossing,
  // calibration age, |g|, findings, model, serial, last seen, benches.
  var source = [0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13];
  function cell(row, shown) {
    var column = source[shown];
    switch (shown) {
      case 2: return row[2] === null ? "" : row[2] + "." + row[3];
      case 5: var d = row[6]; return d === null ? "" : d < 0 ? "below now" : String(d);
      default: break;
    }
    var v = row[column];
    if (v === null || v === undefined) return "";
    switch (column) {
      case 1: return data.profiles[v];
      case 4: return data.firmware[v];
      case 9: return data.findings[v];
      case 10: return data.models[v];
      case 13: return data.benches[v];
      default: return String(v);
    }
  }
  var haystacks = null;
  function haystack(i) {
    if (haystacks === null) {
      haystacks = new Array(rows.length);
      for (var j = 0; j < rows.length; j++) {
        var r = rows[j], parts = [];
        for (var c = 0; c < data.columns.length; c++) parts.push(cell(r, c));
        haystacks[j] = parts.join(" ").toLowerCase();
      }
    }
    return haystacks[i];
  }
  var sortColumn = -1, descending = false, page = 0, view = null;
  var tbody = document.querySelector("#device-table tbody");
  var status = document.getElementById("table-status");
  var pageLabel = document.getElementById("page");
  var filter = document.getElementById("filter"), finding = document.getElementById("finding");
  function compute() {
    var needle = filter.value.trim().toLowerCase(), code = finding.value;
    var indexes = [];
    for (var i = 0; i < rows.length; i++) {
      if (code !== "") {
        var f = rows[i][9];
        if (f === null) continue;
        if (code !== "*" && (" " + data.findings[f] + " ").indexOf(" " + code + " ") < 0) continue;
      }
      if (needle !== "" && haystack(i).indexOf(needle) < 0) continue;
      indexes.push(i);
    }
    if (sortColumn >= 0) {
      var isNumber = sortColumn === 2 || sortColumn === 4 || sortColumn === 5 || sortColumn === 6 || sortColumn === 7 || sortColumn === 11;
      var keys = new Array(rows.length);
      indexes.forEach(function (i) {
        var r = rows[i];
        keys[i] = sortColumn === 2 ? (r[2] === null ? null : r[2] * 65536 + r[3])
          : isNumber ? r[source[sortColumn]] : cell(r, sortColumn).toLowerCase();
      });
      indexes.sort(function (a, b) {
        var x = keys[a], y = keys[b];
        if (x === y) return a - b;
        if (x === null || x === "") return 1;
        if (y === null || y === "") return -1;
        var c = x < y ? -1 : 1;
        return descending ? -c : c;
      });
    }
    view = indexes;
  }
  function render() {
    var pages = Math.max(1, Math.ceil(view.length / size));
    if (page >= pages) page = pages - 1;
    var fragment = document.createDocumentFragment();
    var end = Math.min(view.length, (page + 1) * size);
    for (var i = page * size; i < end; i++) {
      var tr = document.createElement("tr");
      var r = rows[view[i]];
      for (var c = 0; c < data.columns.length; c++) {
        var td = document.createElement("td");
        td.textContent = cell(r, c);
        if (c === 4 && r[9] !== null && (" " + data.findings[r[9]] + " ").indexOf(" battery-low ") >= 0) td.className = "low";
        tr.appendChild(td);
      }
      fragment.appendChild(tr);
    }
    tbody.replaceChildren(fragment);
    status.dataset.matching = String(view.length);
    status.textContent = view.length === rows.length
      ? rows.length.toLocaleString("en") + " devices"
      : view.length.toLocaleString("en") + " of " + rows.length.toLocaleString("en") + " devices match";
    pageLabel.textContent = "page " + (page + 1) + " of " + pages;
    document.getElementById("prev").disabled = page === 0;
    document.getElementById("next").disabled = page >= pages - 1;
  }
  var timer = null;
  function refilter() {
    var started = performance.now();
    compute(); page = 0; render();
    status.dataset.ms = String(Math.round(performance.now() - started));
  }
  filter.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(refilter, 120); });
  finding.addEventListener("change", refilter);
  document.getElementById("prev").addEventListener("click", function () { page--; render(); });
  document.getElementById("next").addEventListener("click", function () { page++; render(); });
  document.querySelectorAll("#device-table th button").forEach(function (button) {
    button.addEventListener("click", function () {
      var column = Number(button.dataset.column);
      descending = sortColumn === column ? !descending : false;
      sortColumn = column;
      document.querySelectorAll("#device-table th").forEach(function (th) { th.setAttribute("aria-sort", "none"); });
      button.parentElement.setAttribute("aria-sort", descending ? "descending" : "ascending");
      compute(); render();
    });
  });
  compute(); render();
  document.documentElement.dataset.rendered = String(Math.round(performance.now()));
  }
})();
