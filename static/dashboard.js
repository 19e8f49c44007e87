// Leasehold dashboard: live updates over server-sent events (plain EventSource, no library).
// - A region marked data-live re-reads itself from the page's own URL whenever an event of a
//   lock it may show arrives (debounced), and every few seconds for the TTL countdown.
// - The events page's #feed lists each event as it arrives (text only, never HTML).
(function () {
  "use strict";

  // The page's live-connection indicator: up while the event stream is open.
  function showStatus(up) {
    document.querySelectorAll("[data-live-status]").forEach(function (el) {
      if (up) el.dataset.up = "1"; else delete el.dataset.up;
      el.textContent = up ? "Live updates: connected" : "Live updates: disconnected, retrying…";
    });
  }

  function listen(url, onEvent, onResync, element) {
    var source = new EventSource(url);
    source.onopen = function () { element.dataset.connected = "1"; showStatus(true); };
    source.onerror = function () { delete element.dataset.connected; showStatus(false); };
    source.onmessage = function (message) {
      var event;
      try { event = JSON.parse(message.data); } catch (e) { return; }
      onEvent(event);
    };
    source.addEventListener("resync", onResync);
    return source;
  }

  function liveRegion(region) {
    var pending = null;
    function refresh() {
      if (pending) return;
      pending = setTimeout(function () {
        fetch(window.location.href, { headers: { accept: "text/html" }, credentials: "same-origin" })
          .then(function (response) { return response.ok ? response.text() : null; })
          .then(function (html) {
            pending = null;
            if (html === null) return;
            var fresh = new DOMParser().parseFromString(html, "text/html").getElementById(region.id);
            if (fresh) {
              region.replaceChildren.apply(region, Array.prototype.slice.call(fresh.childNodes));
              region.dataset.refreshes = String(Number(region.dataset.refreshes || 0) + 1);
            }
          })
          .catch(function () { pending = null; });
      }, 150);
    }
    listen(region.dataset.events, refresh, refresh, region);
    setInterval(refresh, 5000);
  }

  function cell(row, text, className) {
    var td = document.createElement("td");
    td.textContent = text === undefined || text === null ? "" : String(text);
    if (className) td.className = className;
    row.appendChild(td);
  }

  function details(event) {
    var skip = { type: 1, lock: 1, at_ms: 1, lease_id: 1, holder: 1 };
    return Object.keys(event).filter(function (k) { return !skip[k]; }).map(function (k) {
      var v = event[k];
      return k + "=" + (typeof v === "string" ? v : JSON.stringify(v));
    }).join(" ");
  }

  function feed(body) {
    listen(body.dataset.events, function (event) {
      var row = document.createElement("tr");
      row.className = "ev-" + String(event.type);
      cell(row, new Date(event.at_ms).toISOString());
      cell(row, event.lock);
      cell(row, event.type);
      cell(row, event.lease_id, "id");
      cell(row, event.holder);
      cell(row, details(event));
      body.insertBefore(row, body.firstChild);
      while (body.children.length > 500) body.removeChild(body.lastChild);
    }, function () {}, body);
  }

  document.querySelectorAll("[data-live]").forEach(liveRegion);
  var body = document.getElementById("feed");
  if (body) feed(body);
})();
