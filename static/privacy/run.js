// Run page: poll the run's status endpoint until it is done or failed; fill in the counts.
(function () {
  "use strict";
  const box = document.getElementById("run");
  if (!box) return;
  const url = box.dataset.statusUrl;
  const $ = function (name) { return box.querySelector('[data-field="' + name + '"]'); };

  function resultText(result) {
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

  function render(run) {
    box.dataset.state = run.state;
    $("state").textContent = run.state;
    $("progress").max = Math.max(run.progress.total, 1);
    $("progress").value = run.progress.done;
    $("progress-text").textContent = run.progress.done + " of " + run.progress.total + " datasets done";
    if (run.error) { $("error").hidden = false; $("error").textContent = run.error; }
    run.datasets.forEach(function (target) {
      const row = document.querySelector('#run-results tr[data-key="' + CSS.escape(target.nodeId) + '"]');
      if (!row || !target.runnable) return;
      row.querySelector('[data-field="result"]').textContent = resultText(target.result);
    });
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
