// gate web console: live queue (server-sent events) with the pending count in the title and
// opt-in browser notifications, countdowns, "changed elsewhere" notice, the decide bar,
// revealing a masked value, and checks on the "Approve with edits" (with the change shown
// before it is sent) and preset-reason forms.
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
  // "(3) Pending · gate": the count of pending requests leads the tab's title, so a person
  // working in another tab sees that something waits.
  var baseTitle = document.title.replace(/^\(\d+\) /, "");
  function showCount(box) {
    var n = box.querySelectorAll("tr[data-id]").length;
    document.title = (n ? "(" + n + ") " : "") + baseTitle;
  }

  // Browser notifications of new requests this person may decide: off until they click the
  // button (the browser asks for permission only then), remembered per person in this
  // browser. Only requests that arrive while the page is open are announced.
  function setupNotify(box) {
    var button = document.getElementById("notify");
    var said = document.getElementById("notify-state");
    var known = {};
    box.querySelectorAll("tr[data-id]").forEach(function (tr) { known[tr.dataset.id] = true; });
    if (!button || !("Notification" in window)) return function () {};
    var key = "gate.notify." + button.dataset.me;
    function on() { return localStorage.getItem(key) === "1" && Notification.permission === "granted"; }
    function show() {
      var yes = on();
      button.setAttribute("aria-pressed", yes ? "true" : "false");
      button.textContent = yes ? "Notifications on (turn off)" : "Notify me of new requests";
    }
    button.hidden = false;
    show();
    button.addEventListener("click", function () {
      if (on()) {
        localStorage.removeItem(key);
        said.textContent = "Notifications off.";
        show();
        return;
      }
      Notification.requestPermission().then(function (answer) {
        if (answer === "granted") {
          localStorage.setItem(key, "1");
          said.textContent = "Notifications on: new requests you may decide will pop up while this page is open.";
        } else {
          said.textContent = "The browser did not allow notifications (" + answer + "); change it in the site's settings.";
        }
        show();
      });
    });
    return function () {
      box.querySelectorAll("tr[data-id]").forEach(function (tr) {
        var id = tr.dataset.id;
        if (known[id]) return;
        known[id] = true;
        if (!on() || !tr.classList.contains("mine")) return;
        var note = new Notification("gate: a request waits for you", {
          body: tr.dataset.headline || "", tag: "gate-" + id
        });
        note.onclick = function () { window.focus(); window.location.href = "/requests/" + id; };
      });
    };
  }

  // The batch form's "(2 selected)": how many requests are ticked, said as they change.
  function countPicked(box) {
    var note = document.getElementById("batch-count");
    if (!note) return;
    var n = box.querySelectorAll("input[name=ids]:checked").length;
    note.textContent = n ? "(" + n + " selected)" : "(none selected)";
  }

  function setupQueue(box) {
    box.addEventListener("change", function (event) {
      if (event.target.name === "ids") countPicked(box);
    });
    var announce = setupNotify(box);
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
            // ticked requests stay ticked across a refresh (the batch form's selection)
            var ticked = {};
            box.querySelectorAll("input[name=ids]:checked").forEach(function (c) { ticked[c.value] = true; });
            box.innerHTML = html;
            box.querySelectorAll("input[name=ids]").forEach(function (c) { c.checked = !!ticked[c.value]; });
            countPicked(box);
            tick();
            showCount(box);
            announce();
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
    var confirmBox = form.querySelector("#edit-confirm");
    var confirmed = false;
    function unconfirm() { confirmed = false; if (confirmBox) confirmBox.hidden = true; }
    box.addEventListener("input", function () { unconfirm(); show(checkEdit(box.value)); });
    form.addEventListener("submit", function (e) {
      var result = checkEdit(box.value);
      show(result);
      if (result.error) { e.preventDefault(); box.focus(); return; }
      if (confirmed || !confirmBox || !original) return;
      // First the approver sees exactly what changes between the call asked and the call
      // approved; only "Send" posts the form.
      e.preventDefault();
      showDiff(original, result.value, confirmBox);
      confirmBox.hidden = false;
      confirmBox.focus();
    });
    if (confirmBox) {
      form.querySelector("#edit-send").addEventListener("click", function () {
        confirmed = true;
        if (form.requestSubmit) form.requestSubmit(); else form.submit();
      });
      form.querySelector("#edit-back").addEventListener("click", function () { unconfirm(); box.focus(); });
    }
  }

  // A line diff (longest common subsequence) of two texts: [{kind, text, old, new}], where
  // kind is "context", "del" or "add" and old/new are 1-based line numbers.
  function lineDiff(a, b) {
    var start = 0;
    while (start < a.length && start < b.length && a[start] === b[start]) start++;
    var endA = a.length, endB = b.length;
    while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) { endA--; endB--; }
    var out = [], i, j;
    for (i = 0; i < start; i++) out.push({ kind: "context", text: a[i], old: i + 1, new: i + 1 });
    var midA = a.slice(start, endA), midB = b.slice(start, endB);
    var n = midA.length, m = midB.length;
    if (n * m > 4000000) { // too large for the table: every old line out, every new one in
      midA.forEach(function (t, k) { out.push({ kind: "del", text: t, old: start + k + 1 }); });
      midB.forEach(function (t, k) { out.push({ kind: "add", text: t, new: start + k + 1 }); });
    } else {
      var table = [];
      for (i = 0; i <= n; i++) table.push(new Int32Array(m + 1));
      for (i = n - 1; i >= 0; i--) {
        for (j = m - 1; j >= 0; j--) {
          table[i][j] = midA[i] === midB[j] ? table[i + 1][j + 1] + 1 : Math.max(table[i + 1][j], table[i][j + 1]);
        }
      }
      i = 0; j = 0;
      while (i < n || j < m) {
        if (i < n && j < m && midA[i] === midB[j]) {
          out.push({ kind: "context", text: midA[i], old: start + i + 1, new: start + j + 1 }); i++; j++;
        } else if (i < n && (j === m || table[i + 1][j] >= table[i][j + 1])) {
          out.push({ kind: "del", text: midA[i], old: start + i + 1 }); i++; // old line first
        } else {
          out.push({ kind: "add", text: midB[j], new: start + j + 1 }); j++;
        }
      }
    }
    for (i = endA, j = endB; i < a.length; i++, j++) out.push({ kind: "context", text: a[i], old: i + 1, new: j + 1 });
    return out;
  }

  function cell(row, text, cls) {
    var td = document.createElement("td");
    if (cls) td.className = cls;
    td.textContent = text;
    row.appendChild(td);
    return td;
  }

  // The diff between the call as asked and as edited, as a table like gate's own diffs:
  // both line numbers, a +/- mark as well as the colour, two lines of context around each
  // change and the unchanged runs between them counted.
  function showDiff(before, after, into) {
    var a = JSON.stringify(before, null, 2).split("\n");
    var b = JSON.stringify(after, null, 2).split("\n");
    var lines = lineDiff(a, b);
    var near = lines.map(function () { return false; });
    lines.forEach(function (l, k) {
      if (l.kind === "context") return;
      for (var d = -2; d <= 2; d++) if (lines[k + d]) near[k + d] = true;
    });
    var added = lines.filter(function (l) { return l.kind === "add"; }).length;
    var removed = lines.filter(function (l) { return l.kind === "del"; }).length;
    var note = into.querySelector("#edit-confirm-note");
    var keys = changedKeys(before, after);
    note.textContent = keys.length
      ? "Changed: " + keys.join(", ") + " (+" + added + " -" + removed + " lines). The agent's call runs with the new text."
      : "No changes: this approves the call exactly as asked.";
    var table = document.createElement("table");
    table.className = "lines diff-lines edit-diff";
    var body = document.createElement("tbody");
    var skipped = 0;
    function flush() {
      if (!skipped) return;
      var tr = document.createElement("tr");
      tr.className = "hunk";
      cell(tr, "… " + skipped + " unchanged line" + (skipped === 1 ? "" : "s")).colSpan = 4;
      body.appendChild(tr);
      skipped = 0;
    }
    lines.forEach(function (l, k) {
      if (!near[k]) { skipped++; return; }
      flush();
      var tr = document.createElement("tr");
      tr.className = "ln " + l.kind;
      cell(tr, l.kind === "add" ? "" : String(l.old), "no");
      cell(tr, l.kind === "del" ? "" : String(l.new), "no");
      cell(tr, l.kind === "add" ? "+" : l.kind === "del" ? "-" : "", "mark");
      cell(tr, l.text, "tx");
      body.appendChild(tr);
    });
    flush();
    table.appendChild(body);
    var holder = into.querySelector("#edit-diff");
    holder.textContent = "";
    if (added || removed) holder.appendChild(table);
  }

  // Reveal: the value behind a mask, asked of the server (which records who asked, when and
  // for which key) and shown in place of the mask on this page only.
  function setupReveal(form) {
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      var row = form.closest("tr");
      var text = row ? row.querySelector(".text") : null;
      var button = form.querySelector("button");
      button.disabled = true;
      function say(message, cls) {
        var p = document.createElement("span");
        p.className = cls;
        p.setAttribute("role", "status");
        p.textContent = message;
        form.replaceWith(p);
      }
      fetch(form.action, {
        method: "POST", body: new FormData(form), credentials: "same-origin",
        headers: { "Accept": "application/json" }
      }).then(function (r) {
        return r.json().catch(function () { return null; }).then(function (data) { return { r: r, data: data }; });
      }).then(function (got) {
        var data = got.data;
        if (!got.r.ok || !data || !("value" in data)) {
          var why = data && data.error && data.error.message ? data.error.message : "HTTP " + got.r.status;
          button.disabled = false;
          var old = form.parentNode.querySelector(".reveal-error");
          if (old) old.remove();
          var err = document.createElement("span");
          err.className = "reveal-error";
          err.setAttribute("role", "alert");
          err.textContent = "Not revealed: " + why;
          form.after(err);
          return;
        }
        // the server's JSON text of the value: invisible and look-alike characters escaped,
        // as everywhere else on the page
        var shownText = typeof data.text === "string" ? data.text : JSON.stringify(data.value);
        if (text) {
          var t = text.textContent;
          if (t.indexOf('"[masked]"') >= 0) t = t.replace('"[masked]"', shownText);
          else if (t.indexOf("[masked]") >= 0) t = t.replace("[masked]", shownText);
          else t = t + " = " + shownText;
          text.textContent = t;
          row.classList.add("revealed");
        }
        say("Revealed to you; the reveal is recorded in the audit trail.", "revealed-note");
      }).catch(function () {
        button.disabled = false;
      });
    });
  }

  // The bar at the bottom (Approve… / Reject…) keeps the decision one tap away while the
  // call is on screen; it steps aside once the decision forms themselves are in view.
  function setupBar(bar) {
    var decision = document.getElementById("decision");
    if (!decision || !("IntersectionObserver" in window)) return;
    new IntersectionObserver(function (entries) {
      bar.classList.toggle("away", entries[0].isIntersecting);
    }, { rootMargin: "0px 0px -30% 0px" }).observe(decision);
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
    if (queue) { showCount(queue); setupQueue(queue); }
    document.querySelectorAll("form.reveal").forEach(setupReveal);
    var bar = document.getElementById("decide-bar");
    if (bar) setupBar(bar);
    var article = document.querySelector("[data-request-id]");
    if (article && article.dataset.status === "pending") setupDetail(article);
    var editForm = document.getElementById("edit-form");
    if (editForm) setupEditor(editForm);
    var reasons = document.querySelector("form.reject[data-reasons=preset]");
    if (reasons) setupReasons(reasons);
  });
})();
