// Leasehold dashboard: live updates over server-sent events (plain EventSource, no library).
// - A region marked data-live re-reads itself from the page's own URL whenever an event of a
//   lock it may show arrives (debounced), and every few seconds for the TTL countdown.
//   An election's page listens to its observe stream, whose messages are named (data-event-names).
// - The events page's #feed lists each event as it arrives (text only, never HTML); an
//   election's events (its lock is election/<name>) are shown as the election's.
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
    function onMessage(message) {
      var event;
      try { event = JSON.parse(message.data); } catch (e) { return; }
      onEvent(event);
    }
    source.onmessage = onMessage;
    (element.dataset.eventNames || "").split(" ").forEach(function (name) {
      if (name) source.addEventListener(name, onMessage);
    });
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
    return td;
  }

  // What an operator reads: the event's own facts. The stream's bookkeeping (at_us, the
  // microsecond twin of the time shown; event_id, the resume point) and the columns shown
  // beside it are left out.
  // A force release's removed holders as "holder (lease 1a2b3c4d)", and a hold's start as
  // how long it was held, instead of their raw JSON.
  function details(event) {
    var skip = { type: 1, lock: 1, at_ms: 1, at_us: 1, event_id: 1, lease_id: 1, holder: 1,
                 holders: 1, holder_ids: 1, lease_ids: 1, since_ms: 1 };
    var parts = [];
    if (Array.isArray(event.holders) && event.holders.length) {
      parts.push("removed " + event.holders.map(function (h) {
        return (h.holder || "?") + " (lease " + String(h.lease_id || "").slice(0, 8) + ")";
      }).join(", "));
    }
    if (typeof event.since_ms === "number" && typeof event.at_ms === "number") {
      parts.push("held " + ((event.at_ms - event.since_ms) / 1000).toFixed(1) + " s");
    }
    return parts.concat(Object.keys(event).filter(function (k) { return !skip[k]; }).map(function (k) {
      var v = event[k];
      return k + "=" + (typeof v === "string" ? v : JSON.stringify(v));
    })).join(" ");
  }

  // An election runs on a lock named election/<name>: its events read as the election's.
  var ELECTION = "election/";
  var TERM_EVENTS = { acquired: "new term", granted: "new term", released: "resigned",
                      expired: "term expired", force_released: "term ended", queued: "candidate in line",
                      left: "candidate left", renewed: "heartbeat" };

  function subject(lock) {
    if (lock.indexOf(ELECTION) === 0) {
      var name = lock.slice(ELECTION.length);
      return { href: "/elections/" + encodeURIComponent(name), text: "election " + name, election: true };
    }
    return { href: "/locks/" + encodeURIComponent(lock), text: lock, election: false };
  }

  function feed(body) {
    listen(body.dataset.events, function (event) {
      var row = document.createElement("tr");
      row.className = "ev-" + String(event.type);
      var at = new Date(event.at_ms).toISOString();
      cell(row, at.slice(11, 23), "at").title = at;
      var about = subject(String(event.lock));
      var lock = document.createElement("a");
      lock.href = about.href;
      lock.textContent = about.text;
      cell(row, "").appendChild(lock);
      if (about.election) {
        row.classList.add("election");
        var what = TERM_EVENTS[String(event.type)] || String(event.type);
        if (what === "new term" && event.fencing_token !== undefined) what += " " + event.fencing_token;
        cell(row, what);
      } else {
        cell(row, event.type);
      }
      // A lease id is a UUID: its first block tells leases apart on one page; the whole id
      // is its tooltip.
      var id = event.lease_id ? String(event.lease_id) : "";
      cell(row, id.slice(0, 8), "id lease").title = id;
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
