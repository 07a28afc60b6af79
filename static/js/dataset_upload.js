// Upload page: warn about oversized files before sending, and suggest a budget from answers.
(function () {
  "use strict";
  var file = document.getElementById("id_file");
  var tooLarge = document.getElementById("file-too-large");
  if (file && tooLarge) {
    file.addEventListener("change", function () {
      var limit = Number(file.getAttribute("data-max-bytes"));
      var big = file.files.length > 0 && file.files[0].size > limit;
      tooLarge.hidden = !big;
      file.setCustomValidity(big ? tooLarge.textContent : "");
    });
  }

  var perRelease = { high: 0.1, medium: 0.5, low: 1 };
  var suggestion = document.getElementById("suggestion");
  var useButton = document.getElementById("use-suggestion");
  var epsilon = document.getElementById("id_epsilon_total");
  var suggested = null;

  function checked(name) {
    var input = document.querySelector('input[name="' + name + '"]:checked');
    return input ? input.value : null;
  }

  function update() {
    var sensitivity = checked("q_sensitivity");
    var releases = checked("q_releases");
    if (!sensitivity || !releases) { return; }
    var each = perRelease[sensitivity];
    suggested = Math.min(10, Math.round(each * Number(releases) * 100) / 100);
    suggestion.textContent = "Suggested total: ε = " + suggested + " (about ε = " + each +
      " per release for " + releases + " releases).";
    useButton.hidden = false;
  }

  document.querySelectorAll('#questionnaire input[type="radio"]').forEach(function (input) {
    input.addEventListener("change", update);
  });
  if (useButton && epsilon) {
    useButton.addEventListener("click", function () {
      if (suggested !== null) { epsilon.value = suggested; epsilon.focus(); }
    });
  }
})();
