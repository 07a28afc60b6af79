// Budget ledger page: draw the "budget spent over time" chart from the figure in #ledger-figure.
(function () {
  "use strict";
  var source = document.getElementById("ledger-figure");
  var target = document.getElementById("ledger-chart");
  if (!source || !target || typeof Plotly === "undefined") {
    return;
  }
  var figure = JSON.parse(source.textContent);
  Plotly.newPlot(target, figure.data, figure.layout, {
    displaylogo: false,
    responsive: true,
  });
})();
