// Sorting and filtering for the grader's index page, and opening collapsed diff files on a candidate page. The
// pages are complete without this script: it only shows the filter form (hidden in the HTML), makes table headers
// sort buttons, hides rows that do not match, keeps the filter and sort in the URL's query string (restored on
// load, so a view can be shared or reloaded), and opens the collapsed file that holds a linked hunk.
(function () {
  "use strict";

  function cellValue(row, index, type) {
    var cell = row.children[index];
    if (!cell) return type === "number" ? -Infinity : "";
    var raw = cell.hasAttribute("data-sort") ? cell.getAttribute("data-sort") : cell.textContent.trim();
    if (type === "number") {
      var n = parseFloat(raw);
      return isNaN(n) ? -Infinity : n;
    }
    return raw.toLowerCase();
  }

  function compare(a, b) {
    return a < b ? -1 : a > b ? 1 : 0;
  }

  // Sort one table's rows by the column of ``header`` (null: back to the order the page listed them in).
  function sortBy(table, header, ascending) {
    var index = header ? Array.prototype.indexOf.call(header.parentNode.children, header) : -1;
    var type = header ? header.getAttribute("data-sort-type") || "text" : "number";
    table.querySelectorAll("thead th[aria-sort]").forEach(function (th) {
      th.setAttribute("aria-sort", th === header ? (ascending ? "ascending" : "descending") : "none");
    });
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows).map(function (row) {
      var position = Number(row.getAttribute("data-position"));
      return { row: row, key: header ? cellValue(row, index, type) : position, position: position };
    });
    rows.sort(function (x, y) {
      var order = compare(x.key, y.key);
      return (ascending ? order : -order) || x.position - y.position;
    });
    rows.forEach(function (item) { body.appendChild(item.row); });
  }

  function sortAll(key, ascending) {
    document.querySelectorAll("table.sortable").forEach(function (table) {
      var header = key ? table.querySelector('thead th[data-key="' + key + '"]') : null;
      if (!key || header) sortBy(table, header, ascending);
    });
  }

  function makeSortable(table) {
    Array.prototype.forEach.call(table.tBodies[0].rows, function (row, position) {
      row.setAttribute("data-position", String(position));
    });
    table.querySelectorAll("thead th").forEach(function (header) {
      var button = document.createElement("button");
      button.type = "button";
      button.className = "sort";
      while (header.firstChild) button.appendChild(header.firstChild);
      header.appendChild(button);
      header.setAttribute("aria-sort", "none");
      offerSortKey(header);
      button.addEventListener("click", function () {
        var ascending = header.getAttribute("aria-sort") !== "ascending";
        var key = header.getAttribute("data-key");
        var select = document.getElementById("sort-key");
        if (key && select) {
          // A header's sort is the form's sort: every table follows it and the URL keeps it.
          select.value = key;
          document.getElementById("sort-order").value = ascending ? "ascending" : "descending";
          sortAll(key, ascending);
          saveState();
        } else {
          sortBy(table, header, ascending);
        }
      });
    });
  }

  // Every sortable header is a choice of "Sort by" (criteria and the reason included), so the URL can name it.
  function offerSortKey(header) {
    var select = document.getElementById("sort-key");
    var key = header.getAttribute("data-key");
    if (!select || !key) return;
    if (Array.prototype.some.call(select.options, function (o) { return o.value === key; })) return;
    var option = document.createElement("option");
    option.value = key;
    option.textContent = key;
    select.appendChild(option);
  }

  function value(id) {
    var element = document.getElementById(id);
    return element ? element.value : "";
  }

  // Form fields and the query-string names that keep their values.
  var STATE = { text: "filter-text", task: "filter-task", verdict: "filter-verdict", run: "filter-run",
                judge: "filter-agreement", input: "filter-input", sort: "sort-key", order: "sort-order" };

  function saveState() {
    var params = new URLSearchParams();
    Object.keys(STATE).forEach(function (name) {
      var element = document.getElementById(STATE[name]);
      if (element && element.value && !(name === "order" && element.value === "ascending")) {
        params.set(name, element.value);
      }
    });
    var query = params.toString();
    try {
      history.replaceState(null, "", (query ? "?" + query : location.pathname) + location.hash);
    } catch (error) {
      // A browser that refuses to rewrite this URL keeps the view, only not in the address.
    }
  }

  function restoreState() {
    var params = new URLSearchParams(location.search);
    Object.keys(STATE).forEach(function (name) {
      var element = document.getElementById(STATE[name]);
      if (!element || !params.has(name)) return;
      var wanted = params.get(name);
      if (element.tagName === "SELECT" &&
          !Array.prototype.some.call(element.options, function (o) { return o.value === wanted; })) return;
      element.value = wanted;
    });
  }

  function applyFilters() {
    var text = value("filter-text").trim().toLowerCase();
    var task = value("filter-task");
    var verdict = value("filter-verdict");
    var run = value("filter-run");
    var agreement = value("filter-agreement");
    var input = value("filter-input");
    var shown = 0, total = 0;
    document.querySelectorAll("section.task").forEach(function (section) {
      var taskMatches = !task || section.getAttribute("data-task") === task;
      var visible = 0;
      var rows = section.querySelectorAll("table.results tbody tr");
      rows.forEach(function (row) {
        var match = taskMatches &&
          (!verdict || row.getAttribute("data-verdict") === verdict) &&
          (!run || row.getAttribute("data-run") === run) &&
          (!agreement || row.getAttribute("data-agreement") === agreement) &&
          (!input || row.getAttribute("data-input") === input) &&
          (!text || row.textContent.toLowerCase().indexOf(text) !== -1);
        row.hidden = !match;
        if (match) visible += 1;
      });
      total += rows.length;
      shown += visible;
      section.hidden = visible === 0;
      var note = section.querySelector("[data-shown]");
      if (note) note.textContent = visible === rows.length ? "" : visible + " of " + rows.length + " shown";
    });
    var count = document.getElementById("filter-count");
    if (count) count.textContent = shown + " of " + total + " candidates shown";
  }

  // A link to a hunk inside a collapsed file opens the file first (browsers that open it themselves do no harm).
  function openTarget() {
    var id = decodeURIComponent(location.hash.slice(1));
    var target = id && document.getElementById(id);
    if (!target) return;
    var opened = false;
    for (var node = target.parentElement; node; node = node.parentElement) {
      if (node.tagName === "DETAILS" && !node.open) { node.open = true; opened = true; }
    }
    if (opened) target.scrollIntoView();
  }

  function start() {
    document.querySelectorAll("table.sortable").forEach(makeSortable);
    openTarget();
    window.addEventListener("hashchange", openTarget);
    var form = document.getElementById("filters");
    if (!form) return;
    form.hidden = false;
    form.addEventListener("submit", function (event) { event.preventDefault(); });
    form.addEventListener("input", function () { applyFilters(); saveState(); });
    form.addEventListener("change", function (event) {
      if (event.target.id === "sort-key" || event.target.id === "sort-order") {
        sortAll(value("sort-key"), value("sort-order") !== "descending");
      }
      applyFilters();
      saveState();
    });
    restoreState();
    if (value("sort-key")) sortAll(value("sort-key"), value("sort-order") !== "descending");
    applyFilters();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
