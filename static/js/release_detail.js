// Release page: draw the plotly charts and keep the job status up to date without reloading.
(function () {
  "use strict";

  function drawCharts() {
    if (typeof Plotly === "undefined") { return; }
    document.querySelectorAll("[data-figure]").forEach(function (element) {
      var source = document.getElementById(element.dataset.figure);
      if (!source) { return; }
      var figure = JSON.parse(source.textContent);
      Plotly.newPlot(element, figure.data, figure.layout,
        { displaylogo: false, responsive: true });
    });
  }

  function setText(id, text) {
    var element = document.getElementById(id);
    if (element) { element.textContent = text; }
  }

  // Polls start quickly and slow down: a short job's result shows up within a fraction of a
  // second, a long one is asked about every few seconds.
  function nextDelay(delay, longest) { return Math.min(Math.round(delay * 1.5), longest); }

  function pollProgress() {
    var configElement = document.getElementById("progress-config");
    if (!configElement) { return; }
    var config = JSON.parse(configElement.textContent);
    var bar = document.getElementById("job-progress");

    var delay = 250;

    function later() { window.setTimeout(update, delay); delay = nextDelay(delay, 2000); }

    function update() {
      fetch(config.url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
        .then(function (response) {
          if (!response.ok) { throw new Error("status " + response.status); }
          return response.json();
        })
        .then(function (progress) {
          if (progress.terminal) { window.location.reload(); return; }
          setText("job-status", progress.status_label);
          setText("job-stage", progress.stage);
          setText("job-elapsed", progress.elapsed ? "(" + progress.elapsed + ")" : "");
          if (bar) { bar.value = progress.percent; bar.textContent = progress.percent + "%"; }
          later();
        })
        .catch(function () {
          setText("job-stage", "Lost contact with the server; retrying…");
          window.setTimeout(update, 5000);
        });
    }
    later();
  }

  // The custodian-only comparison is computed just after the release: fetch this page again
  // until it is there, then swap in the new box (for at most about two minutes).
  function pollComparison(attempt, delay) {
    if (!document.getElementById("comparison-pending") || attempt > 50) { return; }
    var next = nextDelay(delay, 3000);
    window.setTimeout(function () {
      fetch(window.location.href, { credentials: "same-origin" })
        .then(function (response) { return response.text(); })
        .then(function (html) {
          var page = new DOMParser().parseFromString(html, "text/html");
          var fresh = page.getElementById("custodian-section");
          if (fresh && !fresh.querySelector("#comparison-pending")) {
            document.getElementById("custodian-section").replaceWith(document.adoptNode(fresh));
            var verdict = page.getElementById("verdict");
            if (verdict && document.getElementById("verdict")) {
              document.getElementById("verdict").replaceWith(document.adoptNode(verdict));
            }
            drawCharts();
          } else {
            pollComparison(attempt + 1, next);
          }
        })
        .catch(function () { pollComparison(attempt + 1, next); });
    }, delay);
  }

  drawCharts();
  pollProgress();
  pollComparison(0, 500);
})();
