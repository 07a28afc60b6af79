// Schema page: show only the inputs that matter for each column's type, and drop the
// "from your data" mark once the custodian has typed a value of their own.
(function () {
  "use strict";
  // cell class -> the column types it applies to
  var APPLIES = {
    "numeric-only": ["numeric", "date"],
    "number-only": ["numeric"],
    "date-only": ["date"],
    "categorical-only": ["categorical"],
    "used-only": ["numeric", "date", "categorical"]
  };
  function showFor(row) {
    var type = row.querySelector("select[name$='-type']").value;
    Object.keys(APPLIES).forEach(function (name) {
      var off = APPLIES[name].indexOf(type) < 0;
      row.querySelectorAll("." + name).forEach(function (cell) {
        cell.querySelectorAll("input, select, textarea").forEach(function (input) { input.disabled = off; });
        cell.classList.toggle("inactive", off);
      });
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
