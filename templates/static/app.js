// gate web console: live queue (server-sent events), countdowns, "changed elsewhere" notice,
// and checks on the "Approve with edits" and preset-reason forms.
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

  // One refresh at a time. An event that arrives while one is loading may describe a change
  // the loading rows already missed (the second of two requests submitted back to back, a
  // decision made a moment later), so it is never dropped: the refresh runs once more.
  function setupQueue(box) {
    var status = document.getElementById("live");
    var text = status ? status.querySelector(".live-text") : null;
    var loading = false;
    var again = false;
    function refresh() {
      if (loading) { again = true; return; }
      loading = true;
      again = false;
      fetch(box.dataset.rowsUrl, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) {
          if (r.status === 401) { window.location.href = "/login?next=/"; return null; }
          return r.ok ? r.text() : null;
        })
        .then(function (html) {
          if (html !== null) {
            box.innerHTML = html;
            tick();
            // how many refreshes landed: a test (or a person's devtools) can wait for one
            box.dataset.refreshed = String(Number(box.dataset.refreshed || 0) + 1);
          }
        })
        .catch(function () { /* the event stream reports the outage */ })
        .finally(function () {
          loading = false;
          if (again) refresh();
        });
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

  // The "Approve with edits" editor: the text must parse as a JSON object before the form
  // goes; the server checks again (and says precisely what is wrong) whatever the browser did.
  function checkEdit(text) {
    var value;
    if (!text.trim()) return { error: "The edited arguments are empty: write a JSON object, or use Approve." };
    try {
      value = JSON.parse(text);
    } catch (err) {
      return { error: "Not valid JSON: " + err.message };
    }
    if (value === null || typeof value !== "object" || Array.isArray(value)) {
      var kind = Array.isArray(value) ? "an array" : value === null ? "null" : "a " + typeof value;
      return { error: "The edited arguments must be a JSON object ({...}), not " + kind + "." };
    }
    return { value: value };
  }

  function changedKeys(before, after) {
    var keys = Object.keys(before).concat(Object.keys(after).filter(function (k) { return !(k in before); }));
    return keys.filter(function (k) { return JSON.stringify(before[k]) !== JSON.stringify(after[k]); });
  }

  function setupEditor(form) {
    var box = form.querySelector("#edited-args");
    var error = form.querySelector("#edit-error");
    var changes = form.querySelector("#edit-changes");
    var original = null;
    try { original = JSON.parse(box.dataset.original); } catch (err) { original = null; }
    function show(result) {
      var bad = Boolean(result.error);
      box.setAttribute("aria-invalid", bad ? "true" : "false");
      error.hidden = !bad;
      error.textContent = bad ? result.error : "";
      if (bad || !original) { changes.textContent = ""; return; }
      var keys = changedKeys(original, result.value);
      changes.textContent = keys.length ? "Changed: " + keys.join(", ") : "No changes yet: this would approve the call as asked.";
    }
    box.addEventListener("input", function () { show(checkEdit(box.value)); });
    form.addEventListener("submit", function (e) {
      var result = checkEdit(box.value);
      show(result);
      if (result.error) { e.preventDefault(); box.focus(); }
    });
  }

  // With preset reasons the free text is optional, but one of the two is still required.
  function setupReasons(form) {
    var text = form.querySelector("textarea[name=comment]");
    var error = form.querySelector("#reject-error");
    form.addEventListener("submit", function (e) {
      var picked = form.querySelectorAll("input[name=reasons]:checked").length > 0;
      var ok = picked || text.value.trim() !== "";
      error.hidden = ok;
      text.setAttribute("aria-invalid", ok ? "false" : "true");
      if (!ok) { e.preventDefault(); text.focus(); }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    tick();
    setInterval(tick, 1000);
    var queue = document.getElementById("queue");
    if (queue) setupQueue(queue);
    var article = document.querySelector("[data-request-id]");
    if (article && article.dataset.status === "pending") setupDetail(article);
    var editForm = document.getElementById("edit-form");
    if (editForm) setupEditor(editForm);
    var reasons = document.querySelector("form.reject[data-reasons=preset]");
    if (reasons) setupReasons(reasons);
  });
})();
