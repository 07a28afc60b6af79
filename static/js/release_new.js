// New-release form: show the settings of the chosen mechanism and, as the user types, the
// expected accuracy and the budget left (from a JSON endpoint that never reads the raw data).
(function () {
  "use strict";
  var form = document.getElementById("release-form");
  var configElement = document.getElementById("page-config");
  if (!form || !configElement) { return; }
  var config = JSON.parse(configElement.textContent);
  var output = document.getElementById("preview-body");
  var section = document.getElementById("preview");
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
    result.warnings.forEach(function (line) { output.appendChild(paragraph(line, "warning")); });
    showConfirmation(result.warnings);
    if (result.accuracy_table) { renderAccuracyTable(result.accuracy_table); }
    if (result.risk) { renderRisk(result.risk); }
    if (result.fits) {
      output.appendChild(paragraph("Budget left after this release: ε = " + result.epsilon_left +
        " of " + result.epsilon_total + (result.delta_left !== "0" ? ", δ = " + result.delta_left : "") + "."));
    } else {
      output.appendChild(paragraph("This release needs more budget than is left: lower ε (or δ).",
        "warning"));
    }
  }

  // A release the preview warns against needs the "Spend anyway" box ticked (the server refuses
  // it otherwise): the box appears next to the button with the warnings restated, and goes
  // away (unticked) when the settings change so that nothing is warned against.
  var confirmBox = document.getElementById("confirm-box");
  var confirmList = document.getElementById("confirm-warnings");
  var confirmTick = form.querySelector("input[name=confirm]");
  function showConfirmation(warnings) {
    if (!confirmBox) { return; }  // an analyst's request page: the owner decides, nothing spends
    confirmList.replaceChildren();
    warnings.forEach(function (line) {
      var item = document.createElement("li");
      item.textContent = line;
      confirmList.appendChild(item);
    });
    if (!warnings.length) { confirmTick.checked = false; }
    confirmBox.hidden = !warnings.length;
  }

  function table(caption, headers, rows) {
    var element = document.createElement("table");
    var title = document.createElement("caption");
    title.textContent = caption;
    element.appendChild(title);
    var head = element.createTHead().insertRow();
    headers.forEach(function (text) {
      var th = document.createElement("th");
      th.scope = "col";
      th.textContent = text;
      head.appendChild(th);
    });
    var body = element.createTBody();
    rows.forEach(function (cells) {
      var row = body.insertRow();
      cells.forEach(function (cell) {
        var td = row.insertCell();
        if (cell instanceof Node) { td.appendChild(cell); } else { td.textContent = cell; }
      });
    });
    return element;
  }

  function renderAccuracyTable(accuracy) {
    if (accuracy.rows.length) {
      output.appendChild(table("Each released count, with " + accuracy.confidence + " probability",
        ["Output", "Within", "Note"],
        accuracy.rows.map(function (r) { return [r.output, r.within, r.note]; })));
    }
    if (accuracy.marginals.length) {
      output.appendChild(table("Expected error of the synthetic rows on the chosen tables " +
        "(TVD: share of rows off; 0 is exact)", ["Table", "Expected TVD", "Note"],
        accuracy.marginals.map(function (m) { return [m.marginal, m.tvd, m.note]; })));
    }
  }

  // The risk in words (mechanisms.risk, computed by the portal): this release, then the
  // dataset's total with it.
  function renderRisk(risk) {
    [["The risk of this release", risk.release],
     [risk.total_caption || "The risk of all releases of this dataset together, this one included",
      risk.dataset_total]]
      .forEach(function (pair) {
        output.appendChild(table(pair[0] + " (ε = " + pair[1].epsilon + ", δ = " + pair[1].delta + ")",
          ["Sure before", "At most sure after"],
          pair[1].table.map(function (r) { return r.shown; })));
        pair[1].sentences.forEach(function (line) { output.appendChild(paragraph(line)); });
      });
  }

  var planBody = document.getElementById("plan-body");
  function useProposal(proposal) {
    var radio = form.querySelector("input[name=mechanism][value='" + proposal.mechanism + "']");
    if (radio) { radio.checked = true; }
    form.querySelector("input[name=epsilon]").value = proposal.epsilon;
    scheduleEstimate();
  }

  function renderPlan(result) {
    planBody.replaceChildren();
    if (!result.ok) {
      result.errors.forEach(function (error) { planBody.appendChild(paragraph(error, "warning")); });
      return;
    }
    var rows = result.proposals.map(function (p) {
      if (!p.epsilon) { return [p.title, "—", p.reason, ""]; }
      var button = document.createElement("button");
      button.type = "button";
      button.textContent = "Use ε = " + p.epsilon;
      button.addEventListener("click", function () { useProposal(p); });
      var left = p.fits ? "ε = " + p.left + " left of " + result.epsilon_remaining :
        "needs more than the ε = " + result.epsilon_remaining + " left";
      return [p.title, p.epsilon, "for " + p.planned + "; " + left, button];
    });
    planBody.appendChild(table("ε needed for counts within " + result.target + " at " +
      result.confidence, ["Kind of release", "ε needed", "Budget", ""], rows));
  }

  // Only the answer to the last click is shown, whichever answer arrives last.
  var latestPlan = 0;
  function plan() {
    if (!form.querySelector("input[name=columns]:checked")) {
      planBody.replaceChildren(paragraph("Choose the columns to release (step 2) first."));
      return;
    }
    var params = new URLSearchParams(new FormData(form));
    params.delete("csrfmiddlewaretoken");
    params.delete("submission");
    planBody.replaceChildren(paragraph("Working out the ε each kind of release needs…"));
    var request = ++latestPlan;
    fetch(config.plan_url + "?" + params.toString(),
          { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (response) { return response.json(); })
      .then(function (result) { if (request === latestPlan) { renderPlan(result); } })
      .catch(function () {
        if (request === latestPlan) {
          planBody.replaceChildren(paragraph("The planner is not available right now."));
        }
      });
  }
  document.getElementById("plan-button").addEventListener("click", plan);

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
    fetch(config.preview_url + "?" + params.toString(),
          { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (response) { return response.json(); })
      .then(function (result) { if (request === latest) { render(result); } })
      .catch(function () {
        if (request === latest) {
          output.replaceChildren(paragraph("The estimate is not available right now."));
        }
      })
      .finally(function () { if (request === latest) { section.setAttribute("aria-busy", "false"); } });
  }

  // Each input outdates the answer still on its way (for older input): only an answer to a
  // request sent after the last input is shown, and the section stays busy until it arrives.
  function scheduleEstimate() {
    latest++;
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
