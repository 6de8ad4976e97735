// SQL log page: while the log is being processed, poll its progress and fill in the counts.
(function () {
  "use strict";
  const box = document.getElementById("sql-log");
  if (!box) return;
  const url = box.dataset.progressUrl;
  const field = function (name) { return box.querySelector('[data-field="' + name + '"]'); };
  const labels = { pending: "Pending", processing: "Processing", done: "Done", failed: "Failed" };

  function size(bytes) {
    const units = ["bytes", "KB", "MB", "GB"];
    let value = bytes;
    let unit = 0;
    while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
    return (unit ? value.toFixed(1) : value) + " " + units[unit];
  }

  function render(log) {
    box.dataset.state = log.state;
    field("state").textContent = labels[log.state] || log.state;
    const bar = field("progress");
    bar.max = Math.max(log.sizeBytes, 1);
    bar.value = log.state === "done" ? log.sizeBytes : log.bytesRead;
    field("progress-text").textContent = size(bar.value) + " of " + size(log.sizeBytes);
    ["records", "events", "reads", "skippedFailed", "cacheHits"].forEach(function (name) {
      field(name).textContent = log.counts[name];
    });
    field("problems").textContent = log.counts.lineErrors + log.counts.parseErrors;
    if (log.error) { field("error").hidden = false; field("error").textContent = log.error; }
  }

  function poll() {
    fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.json() : Promise.reject(response.status); })
      .then(function (log) {
        render(log);
        if (log.state === "pending" || log.state === "processing") {
          window.setTimeout(poll, 1000);
        } else if (log.counts.lineErrors + log.counts.parseErrors > 0) {
          window.location.reload();  // show the problems table
        }
      })
      .catch(function () { window.setTimeout(poll, 5000); });
  }

  if (box.dataset.state === "pending" || box.dataset.state === "processing") poll();
})();
