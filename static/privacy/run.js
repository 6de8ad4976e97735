// Run page: poll the run's status endpoint until it is done or failed; show each dataset's result.
(function () {
  "use strict";
  const box = document.getElementById("run");
  if (!box) return;
  const url = box.dataset.statusUrl;
  const kind = box.dataset.kind;
  const body = document.querySelector("#run-results tbody");
  const $ = function (name) { return box.querySelector('[data-field="' + name + '"]'); };

  function resultText(target) {
    const result = target.result;
    if (!target.runnable) {
      return (kind === "scan" ? "not scannable" : "by the owners") + (target.reason ? ": " + target.reason : "");
    }
    if (!result) return "waiting";
    if (result.status === "error") return "error: " + (result.error || "");
    if (result.rowsFound !== undefined && result.rowsFound !== null) {
      return result.rowsFound + " row" + (result.rowsFound === 1 ? "" : "s") + " found";
    }
    if (result.rowsMatched !== undefined && result.rowsMatched !== null) {
      let text = result.rowsMatched + " of " + result.rowsBefore + " rows match";
      if (result.swapped) text += "; erased, " + result.rowsAfter + " rows now";
      else if (result.status === "nothing_to_erase") text += "; nothing to erase";
      return text;
    }
    return result.status + (result.reason ? ": " + result.reason : "");
  }

  function cell(row, text, className) {
    const td = document.createElement("td");
    td.textContent = text;
    if (className) td.className = className;
    row.appendChild(td);
    return td;
  }

  function renderRows(run) {
    if (!run.datasets.length) return;
    body.replaceChildren();
    run.datasets.forEach(function (target) {
      const row = document.createElement("tr");
      const name = cell(row, target.name, "mono");
      const where = document.createElement("div");
      where.className = "muted small";
      where.textContent = target.location || "no location";
      name.appendChild(where);
      cell(row, target.relation);
      cell(row, target.columns.join(", "), "mono small");
      if (kind !== "scan") cell(row, target.operation || "");
      cell(row, resultText(target));
      cell(row, target.owners.map(function (o) { return o.name; }).join(", ") || "—");
      body.appendChild(row);
    });
  }

  function render(run) {
    box.dataset.state = run.state;
    $("state").textContent = run.state;
    $("progress").max = Math.max(run.progress.total, 1);
    $("progress").value = run.progress.done;
    $("progress-text").textContent = run.progress.done + " of " + run.progress.total + " datasets done";
    if (run.error) { $("error").hidden = false; $("error").textContent = run.error; }
    renderRows(run);
  }

  function poll() {
    fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.json() : Promise.reject(response.status); })
      .then(function (run) {
        render(run);
        if (run.state === "pending" || run.state === "running") setTimeout(poll, 1500);
      })
      .catch(function () { setTimeout(poll, 5000); });
  }
  poll();
})();
