// Schema page: show only the inputs that matter for each column's type, and drop the
// "from your data" mark once the custodian has typed a value of their own.
(function () {
  "use strict";
  function showFor(row) {
    var type = row.querySelector("select[name$='-type']").value;
    row.querySelectorAll(".numeric-only").forEach(function (cell) {
      cell.querySelectorAll("input, select, textarea").forEach(function (input) { input.disabled = type !== "numeric"; });
      cell.classList.toggle("inactive", type !== "numeric");
    });
    row.querySelectorAll(".categorical-only").forEach(function (cell) {
      cell.querySelectorAll("input, select, textarea").forEach(function (input) { input.disabled = type !== "categorical"; });
      cell.classList.toggle("inactive", type !== "categorical");
    });
  }
  document.querySelectorAll(".schema-row").forEach(function (row) {
    var select = row.querySelector("select[name$='-type']");
    select.addEventListener("change", function () { showFor(row); });
    showFor(row);
  });
  document.querySelectorAll(".from-data[data-for]").forEach(function (mark) {
    var input = document.getElementById(mark.getAttribute("data-for"));
    if (!input) { return; }
    var original = input.value;
    input.addEventListener("input", function () { mark.hidden = input.value !== original ? true : false; });
  });
})();
