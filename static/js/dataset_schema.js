// Schema page: show only the inputs that matter for each column's type; fill categories from a
// public list or a pasted line of values; "estimate for me" fills a column in place with its DP
// estimate (the server spends the stated share of the budget and records it, protecting the
// people the page's person question names).
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
        cell.querySelectorAll("input, select, textarea, button").forEach(function (input) { input.disabled = off; });
        cell.classList.toggle("inactive", off);
      });
    });
  }
  // A spend the choice under the table calls too little to find anything: its kind's "estimate
  // for me" buttons are disabled, and the note beside them says why.
  function applySpend() {
    ["numeric", "categorical"].forEach(function (kind) {
      var checked = document.querySelector("input[name='spend_" + kind + "']:checked");
      var tooLittle = !!(checked && checked.hasAttribute("data-too-little"));
      document.querySelectorAll(".public-help[data-kind='" + kind + "']").forEach(function (help) {
        var button = help.querySelector("button.estimate-button");
        var note = help.querySelector(".estimate-too-little");
        if (!button || !note) { return; }
        note.hidden = !tooLittle;
        button.disabled = tooLittle || !!button.closest(".inactive");
      });
    });
  }
  document.querySelectorAll("input[name^='spend_']").forEach(function (radio) {
    radio.addEventListener("change", applySpend);
  });
  document.querySelectorAll(".schema-row").forEach(function (row) {
    var select = row.querySelector("select[name$='-type']");
    select.addEventListener("change", function () { showFor(row); applySpend(); });
    showFor(row);
  });
  applySpend();
  // The person question names the column that identifies people: its row needs nothing else
  // (the server reads it as the person column whatever its type says).
  var personSelect = document.querySelector("select[name='person_column']");
  function markPerson() {
    document.querySelectorAll(".schema-row").forEach(function (row) {
      var chosen = personSelect.value !== "" && row.getAttribute("data-name") === personSelect.value;
      row.classList.toggle("person-row", chosen);
      row.querySelector(".person-note").hidden = !chosen;
      row.querySelector("select[name$='-type']").disabled = chosen;
    });
  }
  if (personSelect) {
    personSelect.addEventListener("change", markPerson);
    markPerson();
  }

  var listsElement = document.getElementById("public-lists");
  var lists = listsElement ? JSON.parse(listsElement.textContent) : {};
  document.querySelectorAll("select.public-list").forEach(function (select) {
    select.addEventListener("change", function () {
      var target = document.getElementById(select.getAttribute("data-target"));
      if (target && lists[select.value]) { target.value = lists[select.value].join("\n"); }
      select.value = "";
    });
  });
  // A pasted single line "a, b; c" (or tab-separated cells of a spreadsheet row) becomes one
  // value per line.
  document.querySelectorAll("textarea[name$='-categories']").forEach(function (area) {
    area.addEventListener("paste", function (event) {
      var text = (event.clipboardData || window.clipboardData).getData("text");
      if (/[\r\n]/.test(text.trim()) || !/[,;\t]/.test(text)) { return; }
      event.preventDefault();
      var values = text.split(/[,;\t]/).map(function (v) { return v.trim(); }).filter(Boolean);
      area.value = (area.value ? area.value.replace(/\s+$/, "") + "\n" : "") + values.join("\n");
    });
  });

  function showEstimate(help, text, isError) {
    var line = help.querySelector(".dp-estimate");
    line.hidden = false;
    line.textContent = "";
    var label = document.createElement("span");
    label.className = isError ? "errorlist" : "dp-estimate-label";
    label.textContent = isError ? "Nothing was spent" : "DP estimate";
    line.appendChild(label);
    line.appendChild(document.createTextNode(" " + text));
  }
  function fill(row, data) {
    if (data.kind === "numeric" && data.lower !== null && data.upper !== null) {
      row.querySelector("input[name$='-lower']").value = data.lower;
      row.querySelector("input[name$='-upper']").value = data.upper;
    } else if (data.kind === "categorical" && data.categories && data.categories.length) {
      row.querySelector("textarea[name$='-categories']").value = data.categories.join("\n");
    }
  }
  document.querySelectorAll("button.estimate-button").forEach(function (button) {
    button.addEventListener("click", function (event) {
      event.preventDefault();
      var row = button.closest(".schema-row");
      var help = button.closest(".public-help");
      var body = new FormData(button.form);  // the page's person question goes with it
      body.append("estimate", button.value);
      button.disabled = true;
      fetch(button.formAction, {method: "POST", body: body, headers: {"Accept": "application/json"}, credentials: "same-origin"})
        .then(function (response) { return response.json(); })
        .then(function (data) {
          if (data.ok) { fill(row, data); showEstimate(help, data.text, false); }
          else { showEstimate(help, data.error, true); }
        })
        .catch(function () { showEstimate(help, "The estimate could not be made; try again.", true); })
        .then(function () { button.disabled = false; applySpend(); });
    });
  });
})();
