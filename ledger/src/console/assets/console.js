// RA Ledger console: the only script. It makes a run page's progress advance without a
// reload; every page works without it.
"use strict";
(function () {
  var run = document.getElementById("run");
  if (!run || !window.fetch) return;
  var feed = run.getAttribute("data-progress");
  var set = function (id, text) {
    var element = document.getElementById(id);
    if (element) element.textContent = text;
  };
  var tick = function () {
    fetch(feed, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("status " + response.status);
        return response.json();
      })
      .then(function (status) {
        var percent = Number(status.percent || 0);
        var bar = document.getElementById("bar");
        if (bar) bar.value = percent;
        set("percent", percent.toFixed(1));
        set("state", status.status);
        set("cursor", status.cursor || "(start)");
        set("pages", status.pages);
        set("replaced", status.replaced);
        set("skipped", status.skipped);
        set("failed", status.failed);
        set("total", status.total_at_start);
        set("rate", Math.round(status.rows_per_second) + " rows/s");
        set("eta", status.eta_seconds == null ? "—" : Math.round(status.eta_seconds) + " s");
        set("stalled", status.stalled ? "yes" : "no");
        if (status.status !== "completed") setTimeout(tick, 500);
        else {
          var resume = document.getElementById("resume");
          if (resume) resume.remove();
        }
      })
      .catch(function () { setTimeout(tick, 2000); });
  };
  setTimeout(tick, 500);
})();
