// New-release form: show the settings of the chosen mechanism and, as the user types, the
// expected accuracy and the budget left (from a JSON endpoint that never reads the raw data).
(function () {
  "use strict";
  var form = document.getElementById("release-form");
  var configElement = document.getElementById("page-config");
  if (!form || !configElement) { return; }
  var config = JSON.parse(configElement.textContent);
  var output = document.getElementById("estimate-body");
  var section = document.getElementById("estimate");
  var timer = null;
  var latest = 0;

  function chosenMechanism() {
    var checked = form.querySelector("input[name=mechanism]:checked");
    return checked ? checked.value : "";
  }

  function showRelevantSettings() {
    var mechanism = chosenMechanism();
    form.querySelectorAll("[data-for]").forEach(function (element) {
      var wanted = element.dataset.for.split(" ");
      element.hidden = mechanism === "" || wanted.indexOf(mechanism) === -1;
    });
  }

  function paragraph(text, className) {
    var p = document.createElement("p");
    p.textContent = text;
    if (className) { p.className = className; }
    return p;
  }

  function render(result) {
    output.replaceChildren();
    if (!result.ok) {
      output.appendChild(paragraph("To see the expected accuracy, fix these first:"));
      var list = document.createElement("ul");
      result.errors.forEach(function (error) {
        var item = document.createElement("li");
        item.textContent = error;
        list.appendChild(item);
      });
      output.appendChild(list);
      return;
    }
    result.accuracy.forEach(function (line) { output.appendChild(paragraph(line)); });
    if (result.fits) {
      output.appendChild(paragraph("Budget left after this release: ε = " + result.epsilon_left +
        " of " + result.epsilon_total + (result.delta_left !== "0" ? ", δ = " + result.delta_left : "") + "."));
    } else {
      output.appendChild(paragraph("This release needs more budget than is left: lower ε (or δ).",
        "warning"));
    }
  }

  function estimate() {
    if (!form.querySelector("input[name=columns]:checked")) {
      output.replaceChildren(paragraph("Now choose the columns to release (step 2) to see the expected accuracy."));
      section.setAttribute("aria-busy", "false");
      return;
    }
    var params = new URLSearchParams(new FormData(form));
    params.delete("csrfmiddlewaretoken");
    params.delete("submission");
    var request = ++latest;
    fetch(config.estimate_url + "?" + params.toString(),
          { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (response) { return response.json(); })
      .then(function (result) { if (request === latest) { render(result); } })
      .catch(function () {
        output.replaceChildren(paragraph("The estimate is not available right now."));
      })
      .finally(function () { if (request === latest) { section.setAttribute("aria-busy", "false"); } });
  }

  function scheduleEstimate() {
    section.setAttribute("aria-busy", "true");
    showRelevantSettings();
    window.clearTimeout(timer);
    timer = window.setTimeout(estimate, 300);
  }

  // One click spends once: the button is disabled as soon as the form is sent (the server also
  // refuses a second use of the form's one-time token); re-enabled if the page is shown again
  // from the back/forward cache.
  var submit = document.getElementById("release-submit");
  form.addEventListener("submit", function () {
    submit.disabled = true;
    submit.textContent = "Submitting…";
  });
  window.addEventListener("pageshow", function (event) {
    if (event.persisted) {
      submit.disabled = false;
      submit.textContent = "Spend this budget and make the release";
    }
  });

  form.addEventListener("input", scheduleEstimate);
  form.addEventListener("change", scheduleEstimate);
  showRelevantSettings();
  if (chosenMechanism()) { estimate(); }
})();
