// gate web console: live queue (server-sent events), countdowns, "changed elsewhere" notice.
// No framework and no build step. Markup always comes from the server's escaped templates.
(function () {
  "use strict";

  function span(seconds) {
    seconds = Math.max(0, Math.floor(seconds));
    if (seconds < 60) return seconds + "s";
    if (seconds < 3600) return Math.floor(seconds / 60) + "m " + String(seconds % 60).padStart(2, "0") + "s";
    if (seconds < 86400) return Math.floor(seconds / 3600) + "h " + String(Math.floor(seconds % 3600 / 60)).padStart(2, "0") + "m";
    return Math.floor(seconds / 86400) + "d " + Math.floor(seconds % 86400 / 3600) + "h";
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll("[data-since]").forEach(function (el) {
      el.textContent = span((now - Date.parse(el.dataset.since)) / 1000) + " ago";
    });
    document.querySelectorAll("[data-expires]").forEach(function (el) {
      var left = (Date.parse(el.dataset.expires) - now) / 1000;
      el.textContent = left <= 0 ? "deadline passed" : span(left) + " left";
      el.classList.toggle("soon", left > 0 && left < 120);
      el.classList.toggle("passed", left <= 0);
    });
  }

  // One EventSource, reopened after errors: the browser retries by itself while the server
  // is unreachable, but gives up for good on an HTTP error, so we start a new one then.
  function live(url, onEvent, onState) {
    var source = null;
    var timer = null;
    function open() {
      source = new EventSource(url);
      source.onopen = function () { onState("live"); };
      source.onerror = function () {
        onState("lost");
        if (source.readyState === EventSource.CLOSED) {
          clearTimeout(timer);
          timer = setTimeout(open, 3000);
        }
      };
      ["created", "changed", "final"].forEach(function (kind) {
        source.addEventListener(kind, function (e) {
          try { onEvent(JSON.parse(e.data)); } catch (err) { /* ignore malformed data */ }
        });
      });
    }
    open();
    window.addEventListener("pagehide", function () { if (source) source.close(); });
  }

  function setupQueue(box) {
    var status = document.getElementById("live");
    var text = status ? status.querySelector(".live-text") : null;
    var pending = false;
    function refresh() {
      if (pending) return;
      pending = true;
      fetch(box.dataset.rowsUrl, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) {
          if (r.status === 401) { window.location.href = "/login?next=/"; return null; }
          return r.ok ? r.text() : null;
        })
        .then(function (html) {
          if (html !== null) { box.innerHTML = html; tick(); }
        })
        .catch(function () { /* the event stream reports the outage */ })
        .finally(function () { pending = false; });
    }
    live(box.dataset.eventsUrl, refresh, function (state) {
      if (!status) return;
      status.dataset.state = state;
      text.textContent = state === "live" ? "Live" : "Connection lost, retrying…";
      if (state === "live") refresh(); // catch up on anything missed while away
    });
  }

  function setupDetail(article) {
    var id = article.dataset.requestId;
    var notice = document.getElementById("changed");
    live(article.dataset.eventsUrl, function (event) {
      if (event.id === id && notice) notice.hidden = false;
    }, function () {});
  }

  document.addEventListener("DOMContentLoaded", function () {
    tick();
    setInterval(tick, 1000);
    var queue = document.getElementById("queue");
    if (queue) setupQueue(queue);
    var article = document.querySelector("[data-request-id]");
    if (article && article.dataset.status === "pending") setupDetail(article);
  });
})();
