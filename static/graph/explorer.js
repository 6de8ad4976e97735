// Graph explorer: draws the lineage around one node with Cytoscape.js.
// State (node, level, direction, depth, asOf, compare, focus) lives in the URL.
// Small graphs are laid out by dagre; large ones by the layered layout below,
// which is linear in the graph size and stays readable at thousands of nodes.
(function () {
  "use strict";

  const config = JSON.parse(document.getElementById("explorer-config").textContent);
  const $ = (id) => document.getElementById(id);
  const ui = {
    canvas: $("cy"),
    status: $("graph-status"),
    panel: $("node-panel"),
    find: $("graph-find"),
    findStatus: $("find-status"),
    pii: $("hl-pii"),
    risk: $("hl-risk"),
    slider: $("time-slider"),
    timeLabel: $("time-label"),
    timeMarks: $("time-marks"),
    timeAxis: $("time-axis"),
    now: $("time-now"),
    diff: $("diff-toggle"),
    compareBox: $("compare-box"),
    compareSlider: $("compare-slider"),
    compareLabel: $("compare-label"),
  };
  const state = {
    node: config.node,
    level: config.level,
    direction: config.direction,
    depth: config.depth,
    asOf: config.asOf || "",
    compare: config.compare || "",
    focus: config.focus || "",
    limit: config.limit,
  };
  const DAGRE_MAX = 150;
  // Cards, and the smallest label a first view of up to READABLE_NODES nodes draws.
  const CARD_W = 164;
  const CARD_H = 44;
  const JOB_W = 180;
  const JOB_H = 28;
  const CARD_FONT = 12.5;
  const FIELD_W = 160;
  const FIELD_FONT = 10.5;
  const LABEL_FONT = "system-ui, -apple-system, Segoe UI, Roboto, sans-serif";
  const MIN_LABEL_PX = 11;
  const READABLE_NODES = 60;
  // "dagre" or "layered" forces one layout whatever the size (benchmarks compare them).
  const forcedLayout = new URLSearchParams(window.location.search).get("layout") || "";
  let cy = null;
  let instants = [];
  let rootId = state.node;
  let draws = 0;
  let matches = [];
  let matchIndex = -1;
  let requestSeq = 0;

  // --- small DOM helper (names come from users: always textContent) ------------------
  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    Object.entries(attrs || {}).forEach(([key, value]) => {
      if (value === null || value === undefined || value === false) return;
      if (key === "class") node.className = value;
      // Through the CSSOM: the Content-Security-Policy refuses style attributes.
      else if (key === "style") Object.assign(node.style, value);
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : value);
    });
    children.flat().forEach((child) => {
      if (child === null || child === undefined || child === false) return;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    });
    return node;
  }

  function setStatus(text, warn) {
    ui.status.textContent = text;
    ui.status.classList.toggle("warn", Boolean(warn));
  }

  function fmtInstant(iso) {
    if (!iso) return "now";
    return iso.replace("T", " ").replace(/\.\d+/, "").replace("Z", " UTC");
  }

  // --- URL state ------------------------------------------------------------------------
  function query(overrides) {
    const values = { ...state, ...(overrides || {}) };
    const params = new URLSearchParams();
    ["node", "level", "direction", "depth", "asOf", "compare", "focus"].forEach((key) => {
      if (values[key] !== "" && values[key] !== null && values[key] !== undefined) params.set(key, values[key]);
    });
    return params;
  }

  function syncUrl() {
    const params = query();
    history.replaceState(null, "", config.pageUrl + "?" + params.toString());
    document.querySelectorAll('#explorer-form input[name="asOf"], #explorer-form input[name="compare"]').forEach((input) => input.remove());
    const form = $("explorer-form");
    if (state.asOf) form.append(h("input", { type: "hidden", name: "asOf", value: state.asOf }));
    if (state.compare) form.append(h("input", { type: "hidden", name: "compare", value: state.compare }));
  }

  function pageLink(overrides) {
    const params = query(overrides);
    params.delete("focus");
    return config.pageUrl + "?" + params.toString();
  }

  // --- data -----------------------------------------------------------------------------
  let firstLoad = true;
  async function fetchGraph(overrides) {
    const params = query(overrides);
    params.delete("focus");
    params.set("limit", String((overrides && overrides.limit) || state.limit));
    // The first request is exactly the URL the page head preloaded, so it is reused.
    const url = firstLoad && !overrides ? config.firstData : config.dataUrl + "?" + params.toString();
    firstLoad = false;
    const response = await fetch(url);
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || "The graph could not be loaded");
    return body;
  }

  let pages = { dataset: "", job: "" };

  // The page of a node: datasets (and their columns) and jobs by namespace and name.
  function nodeUrl(d) {
    const base = d.kind === "job" ? pages.job : pages.dataset;
    return base + "?" + new URLSearchParams({ namespace: d.namespace, name: d.name }).toString();
  }

  function nodeClasses(n, root) {
    const classes = [n.compound ? "compound" : n.kind];
    if (n.id === root) classes.push("root");
    if (n.pii || n.subject) classes.push("pii");
    if (n.tainted) classes.push("tainted");
    if (n.atRisk) classes.push("atrisk");
    if (n.state === "FAILED") classes.push("failed");
    if (n.dropped) classes.push("dropped");
    if (n.diff && n.diff !== "same") classes.push("diff-" + n.diff);
    return classes.join(" ");
  }

  // Labels are shortened here rather than by Cytoscape's ellipsis, which measures
  // text again and again and makes the first frame of a large graph slow. The
  // tail of a name (table, then schema) is what tells nodes apart.
  const MAX_LABEL = 27;
  function shortLabel(text) {
    const label = String(text);
    if (label.length <= MAX_LABEL) return label;
    const parts = label.split(/(?<=[./:])/);
    let tail = "";
    for (let i = parts.length - 1; i >= 0; i -= 1) {
      if ((parts[i] + tail).length > MAX_LABEL - 1) break;
      tail = parts[i] + tail;
    }
    if (!tail) tail = label.slice(-(MAX_LABEL - 1));
    return "…" + tail;
  }

  // A dataset's card: its last name segment, then the segment before it, where it lives
  // (the namespace's scheme) and its state badges. The full name shows on hover.
  function card(n) {
    if (n.compound || n.kind !== "dataset") return { short: shortLabel(n.label), sub: "" };
    const name = String(n.name);
    const parts = name.split(name.includes("/") ? "/" : ".").filter(Boolean);
    const short = parts.length ? shortLabel(parts[parts.length - 1]) : shortLabel(n.name);
    const badges = [
      parts.length > 1 ? shortLabel(parts[parts.length - 2]) : "",
      String(n.namespace).split(":")[0],
      n.pii || n.subject ? "PII" : "",
      n.tainted ? "tainted" : n.atRisk ? "at risk" : "",
      n.dropped ? "dropped" : "",
    ];
    return { short, sub: badges.filter(Boolean).join(" · ") };
  }

  function toElements(body) {
    if (body.pages) pages = body.pages;
    const elements = [];
    body.nodes.forEach((n) => {
      const { short, sub } = card(n);
      const display = sub ? short + "\n" + sub : short;
      elements.push({ group: "nodes", data: { ...n, short, sub, display }, classes: nodeClasses(n, body.root) });
    });
    body.edges.forEach((e) => {
      const classes = [];
      if (e.pii) classes.push("pii");
      if (e.masking) classes.push("masked");
      if (e.diff && e.diff !== "same") classes.push("diff-" + e.diff);
      elements.push({ group: "edges", data: { ...e }, classes: classes.join(" ") });
    });
    return elements;
  }

  function mergeInstants(list) {
    const all = new Set(instants);
    (list || []).forEach((value) => all.add(value));
    instants = Array.from(all).sort();
    ui.slider.max = String(instants.length);
    ui.slider.value = String(positionOf(state.asOf));
    drawAxis();
    limitCompare();
    ui.compareSlider.value = String(Math.max(positionOf(state.compare), 0));
    showTimeLabels();
  }

  // The slider's axis: a tick at each change (one slider step each) and dates under a
  // few of them, spread so that they do not overlap; "now" at the end.
  const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
  // precision: 0 the day, 1 to the minute, 2 to the second.
  function axisText(iso, precision) {
    const d = new Date(iso);
    const day = d.getUTCDate() + " " + MONTHS[d.getUTCMonth()];
    if (!precision) return day;
    const pad = (n) => String(n).padStart(2, "0");
    const minute = day + " " + pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes());
    return precision > 1 ? minute + ":" + pad(d.getUTCSeconds()) : minute;
  }

  function drawAxis() {
    ui.timeMarks.replaceChildren(...instants.map((iso, i) => h("option", { value: String(i), label: fmtInstant(iso) })));
    const days = new Set(instants.map((iso) => iso.slice(0, 10)));
    const withTime = days.size < instants.length;
    const width = ui.timeAxis.clientWidth || 400;
    const last = instants.length;
    function pick(precision) {
      const room = Math.max(Math.floor(width / [70, 110, 135][precision]), 2);
      const labels = [];
      const step = Math.max(Math.ceil((last + 1) / room), 1);
      for (let i = 0; i < last; i += step) labels.push(i);
      const tail = labels.length ? labels[labels.length - 1] : -step;
      if (last - tail < step / 2 && labels.length > 1) labels.pop();
      return labels;
    }
    // Labels read to the second when two of them would read the same to the minute.
    let labels = pick(withTime ? 1 : 0);
    let texts = labels.map((i) => axisText(instants[i], withTime ? 1 : 0));
    if (withTime && new Set(texts).size < texts.length) {
      labels = pick(2);
      texts = labels.map((i) => axisText(instants[i], 2));
    }
    // Changes within one second: one label for them.
    const shown = labels.filter((_, n) => n === 0 || texts[n] !== texts[n - 1]);
    const shownTexts = texts.filter((t, n) => n === 0 || t !== texts[n - 1]);
    ui.timeAxis.replaceChildren(
      ...shown.map((i, n) => h("span", { class: "time-tick", style: { left: (100 * i / Math.max(last, 1)) + "%" } }, shownTexts[n])),
      h("span", { class: "time-tick time-tick-now", style: { left: "100%" } }, "now"),
    );
  }

  // The instant compared with is always earlier than the one drawn, so "added"
  // and "removed" read forwards in time.
  function limitCompare() {
    const end = state.asOf ? positionOf(state.asOf) - 1 : instants.length - 1;
    ui.compareSlider.max = String(Math.max(end, 0));
  }

  // Slider position of an instant: the last change at or before it; "now" is the end.
  function positionOf(iso) {
    if (!iso) return instants.length;
    let pos = -1;
    for (let i = 0; i < instants.length; i += 1) if (instants[i] <= iso) pos = i;
    return Math.max(pos, 0);
  }

  function showTimeLabels() {
    const label = state.asOf ? fmtInstant(state.asOf) : "now";
    ui.timeLabel.textContent = label;
    const position = Number(ui.slider.value);
    const counted = instants.length ? " (change " + Math.min(position + 1, instants.length) + " of " + instants.length + ")" : "";
    ui.slider.setAttribute("aria-valuetext", state.asOf ? label + counted : "now, after " + instants.length + " change" + (instants.length === 1 ? "" : "s"));
    const compare = state.compare ? fmtInstant(state.compare) : "";
    ui.compareLabel.textContent = compare;
    ui.compareSlider.setAttribute("aria-valuetext", compare || "no instant");
    fitCanvas(); // a longer label may wrap the controls above the canvas
  }

  // --- labels cut to their box, measured in the font they are drawn in -----------------------
  const ruler = document.createElement("canvas").getContext("2d");
  function textWidth(text, font) {
    ruler.font = font;
    return ruler.measureText(text).width;
  }
  // The width a node's label may take, and its font (as the styles below draw it).
  function labelRoom(node) {
    const weight = node.hasClass("root") ? "600 " : "";
    if (node.hasClass("job")) return [JOB_W - 14, weight + CARD_FONT + "px " + LABEL_FONT];
    if (node.hasClass("field")) return [FIELD_W - 12, weight + FIELD_FONT + "px " + LABEL_FONT];
    return [CARD_W - 12, weight + CARD_FONT + "px " + LABEL_FONT];
  }
  // ``text`` whole when it fits ``width``, else as much of it as fits with "…".
  function fit(text, width, font) {
    if (textWidth(text, font) <= width) return text;
    let lo = 0;
    let hi = text.length;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (textWidth(text.slice(0, mid) + "…", font) <= width) lo = mid;
      else hi = mid - 1;
    }
    return text.slice(0, lo) + "…";
  }

  // --- derived marks: hidden neighbours, personal-data flow -----------------------------------
  // Counted over plain edge data in one pass: Cytoscape's per-node traversals
  // (incomers, outgoers) cost too much at thousands of nodes.
  function refreshMarks() {
    const ins = new Map();
    const outs = new Map();
    const piiNodes = new Set();
    cy.nodes(".pii").forEach((n) => { piiNodes.add(n.id()); });
    const piiInputs = new Set();
    const edges = [];
    cy.edges().forEach((edge) => {
      const source = edge.data("source");
      const target = edge.data("target");
      edges.push([edge, source, target]);
      if (source === target) return;
      if (!outs.has(source)) outs.set(source, new Set());
      if (!ins.has(target)) ins.set(target, new Set());
      outs.get(source).add(target);
      ins.get(target).add(source);
      if (piiNodes.has(source)) piiInputs.add(target);
    });
    cy.batch(() => {
      cy.nodes().forEach((node) => {
        const d = node.data();
        if (d.compound) {
          node.data("display", d.short);
          return;
        }
        const hiddenIn = Math.max((d.degIn || 0) - (ins.has(d.id) ? ins.get(d.id).size : 0), 0);
        const hiddenOut = Math.max((d.degOut || 0) - (outs.has(d.id) ? outs.get(d.id).size : 0), 0);
        const more = hiddenIn + hiddenOut;
        const suffix = more ? "  +" + more : "";
        const [width, font] = labelRoom(node);
        const first = fit(d.short, width - textWidth(suffix, font), font) + suffix;
        node.data({ hiddenIn, hiddenOut, display: d.sub ? first + "\n" + fit(d.sub, width, font) : first });
      });
      if (state.level === "table") {
        // Personal data flows out of a dataset holding it, through the job, into outputs holding it.
        edges.forEach(([edge, source, target]) => {
          const fromDataset = source.startsWith("dataset:");
          const pii = fromDataset ? piiNodes.has(source) : piiNodes.has(target) && piiInputs.has(source);
          if (pii !== edge.hasClass("pii")) edge.toggleClass("pii", pii);
        });
      }
    });
    applyHighlights();
  }

  function applyHighlights() {
    const piiOn = ui.pii.checked;
    const riskOn = ui.risk.checked;
    cy.batch(() => {
      cy.elements().removeClass("pii-on risk-on faded-pii");
      if (piiOn) {
        cy.elements(".pii").addClass("pii-on");
        cy.elements().not(".pii").not(".compound").addClass("faded-pii");
      }
      if (riskOn) cy.nodes(".tainted, .atrisk").addClass("risk-on");
    });
  }

  // --- layout ------------------------------------------------------------------------------
  function unitSize(node) {
    if (node.hasClass("compound")) {
      const rows = node.children().length;
      // Children plus padding, and room above the box for the dataset's name.
      return { w: 190, h: Math.max(rows, 1) * 28 + 40 };
    }
    return node.hasClass("job") ? { w: JOB_W, h: JOB_H } : { w: CARD_W, h: CARD_H };
  }

  // Layered (Sugiyama-style) layout in linear time: longest-path ranks, a few
  // barycentre sweeps to cut crossings, tall layers wrapped into sub-columns.
  function layered() {
    const units = cy.nodes().filter((n) => !n.isChild());
    const index = new Map();
    units.forEach((u, i) => index.set(u.id(), i));
    const count = units.length;
    const succ = Array.from({ length: count }, () => new Set());
    const pred = Array.from({ length: count }, () => new Set());
    const unitOf = (node) => index.get(node.isChild() ? node.parent().id() : node.id());
    cy.edges().forEach((edge) => {
      const a = unitOf(edge.source());
      const b = unitOf(edge.target());
      if (a === undefined || b === undefined || a === b) return;
      succ[a].add(b);
      pred[b].add(a);
    });
    // Topological order (Kahn); cycles are broken at the node with the fewest open inputs.
    const indegree = pred.map((p) => p.size);
    const order = [];
    const done = new Uint8Array(count);
    let queue = [];
    for (let i = 0; i < count; i += 1) if (!indegree[i]) queue.push(i);
    while (order.length < count) {
      if (!queue.length) {
        let best = -1;
        for (let i = 0; i < count; i += 1) if (!done[i] && (best < 0 || indegree[i] < indegree[best])) best = i;
        queue.push(best);
        indegree[best] = 0;
      }
      const next = [];
      queue.forEach((u) => {
        if (done[u]) return;
        done[u] = 1;
        order.push(u);
        succ[u].forEach((v) => {
          if (!done[v] && --indegree[v] === 0) next.push(v);
        });
      });
      queue = next;
    }
    const position = new Int32Array(count);
    order.forEach((u, i) => { position[u] = i; });
    const rank = new Int32Array(count);
    order.forEach((u) => {
      succ[u].forEach((v) => {
        if (position[v] > position[u]) rank[v] = Math.max(rank[v], rank[u] + 1);
      });
    });
    // Pull sources right, next to what they feed, so side inputs do not stretch edges.
    for (let k = order.length - 1; k >= 0; k -= 1) {
      const u = order[k];
      if (pred[u].size || !succ[u].size) continue;
      let min = Infinity;
      succ[u].forEach((v) => { min = Math.min(min, rank[v]); });
      if (min !== Infinity) rank[u] = Math.max(rank[u], min - 1);
    }
    let maxRank = 0;
    for (let i = 0; i < count; i += 1) maxRank = Math.max(maxRank, rank[i]);
    const layers = Array.from({ length: maxRank + 1 }, () => []);
    order.forEach((u) => layers[rank[u]].push(u));
    const slot = new Float64Array(count);
    layers.forEach((layer) => layer.forEach((u, i) => { slot[u] = i; }));
    const sweep = (neighbours, from, to, step) => {
      for (let r = from; r !== to; r += step) {
        const layer = layers[r];
        const bary = new Map();
        layer.forEach((u) => {
          let sum = 0;
          let n = 0;
          neighbours[u].forEach((v) => { sum += slot[v]; n += 1; });
          bary.set(u, n ? sum / n : slot[u]);
        });
        layer.sort((a, b) => bary.get(a) - bary.get(b) || slot[a] - slot[b]);
        layer.forEach((u, i) => { slot[u] = i; });
      }
    };
    for (let iteration = 0; iteration < 4; iteration += 1) {
      sweep(pred, 1, maxRank + 1, 1);
      sweep(succ, maxRank - 1, -1, -1);
    }
    // Coordinates; a layer taller than the budget wraps into several sub-columns.
    const gapY = 14;
    const colGap = 70;
    const budget = Math.max(900, Math.sqrt(count) * 90);
    let x = 0;
    const placed = [];
    layers.forEach((layer) => {
      const sizes = layer.map((u) => unitSize(units[u]));
      const columns = [];
      let current = [];
      let height = 0;
      layer.forEach((u, i) => {
        if (current.length && height + sizes[i].h > budget) {
          columns.push({ items: current, height: height - gapY });
          current = [];
          height = 0;
        }
        current.push(i);
        height += sizes[i].h + gapY;
      });
      if (current.length) columns.push({ items: current, height: height - gapY });
      columns.forEach((column) => {
        const width = Math.max(...column.items.map((i) => sizes[i].w));
        let y = -column.height / 2;
        column.items.forEach((i) => {
          placed.push({ unit: units[layer[i]], x: x + width / 2, y: y + sizes[i].h / 2, h: sizes[i].h });
          y += sizes[i].h + gapY;
        });
        x += width + (columns.length > 1 ? 24 : 0);
      });
      x += colGap;
    });
    let bounds = null;
    placed.forEach(({ unit, x: ux, y: uy, h: uh }) => {
      const w = unitSize(unit).w;
      const box = { x1: ux - w / 2, x2: ux + w / 2, y1: uy - uh / 2, y2: uy + uh / 2 };
      bounds = bounds ? {
        x1: Math.min(bounds.x1, box.x1), x2: Math.max(bounds.x2, box.x2),
        y1: Math.min(bounds.y1, box.y1), y2: Math.max(bounds.y2, box.y2),
      } : box;
    });
    cy.batch(() => {
      placed.forEach(({ unit, x: ux, y: uy, h: uh }) => {
        if (unit.hasClass("compound")) {
          const children = unit.children().sort((a, b) => (a.data("label") < b.data("label") ? -1 : 1));
          let cyy = uy - uh / 2 + 28;
          children.forEach((child) => {
            child.position({ x: ux, y: cyy + 11 });
            cyy += 28;
          });
        } else {
          unit.position({ x: ux, y: uy });
        }
      });
    });
    return bounds;
  }

  let rankDir = "";
  function runLayout(focus) {
    const n = cy.nodes().length;
    const dagreReady = typeof cytoscapeDagre !== "undefined";
    const small = n <= DAGRE_MAX && !cy.nodes(".compound").length;
    if (dagreReady && forcedLayout !== "layered" && (small || forcedLayout === "dagre")) {
      // Left to right, or top to bottom when that draws this graph larger on this screen.
      const fit = () => {
        const box = cy.elements().boundingBox();
        return Math.min((cy.width() - 60) / Math.max(box.w, 1), (cy.height() - 60) / Math.max(box.h, 1));
      };
      if (!focus || !rankDir) {
        // Both directions laid out once; the left-to-right positions are put back when it
        // draws the graph (nearly) as large.
        dagre("LR");
        const leftRight = fit();
        const placed = {};
        cy.nodes().forEach((n) => { placed[n.id()] = { ...n.position() }; });
        dagre("TB");
        rankDir = leftRight >= fit() * 0.9 ? "LR" : "TB";
        if (rankDir === "LR") cy.nodes().positions((n) => placed[n.id()]);
      } else {
        dagre(rankDir);  // an expand keeps the direction the graph was drawn in
      }
      frame(null, focus);
    } else {
      frame(layered(), focus);
    }
  }

  function dagre(rankDir) {
    const wide = rankDir === "TB";
    cy.layout({
      name: "dagre", rankDir, nodeSep: wide ? 14 : 12, rankSep: wide ? 34 : 44, edgeSep: 8, fit: false, animate: false,
    }).run();
  }

  // Start from the whole graph: on a large one labels appear as you zoom in
  // (drawing none at first also keeps the first frame fast).
  // Below this zoom labels would be too small to read. Dropping them (rather
  // than letting Cytoscape skip drawing them) also spares measuring thousands of
  // labels for the first frame of a large graph.
  const LABEL_ZOOM = 7 / 12;
  let labelsShown = true;
  function syncLabels() {
    const show = cy.zoom() >= LABEL_ZOOM || cy.nodes().length <= DAGRE_MAX;
    if (show) {
      if (!labelsShown) cy.nodes(".nolabel").removeClass("nolabel");
      labelsShown = true;
      return;
    }
    const missing = cy.nodes().not(".compound").not(".nolabel");
    if (missing.length) missing.addClass("nolabel");
    labelsShown = false;
  }

  // ``bounds`` (from the layered layout) spares Cytoscape measuring every label.
  // The whole graph, as large as fits (at most 1.25×). Up to READABLE_NODES nodes it is
  // never drawn smaller than labels of 11 px: what does not fit then is panned to,
  // around ``focus`` (the start node, or the node just expanded).
  let clamped = false;
  function frame(bounds, focus, whole) {
    const box = bounds
      ? { x1: bounds.x1, y1: bounds.y1, w: Math.max(bounds.x2 - bounds.x1, 1), h: Math.max(bounds.y2 - bounds.y1, 1) }
      : cy.elements().boundingBox();
    const pad = 30;
    let zoom = Math.min((cy.width() - 2 * pad) / Math.max(box.w, 1), (cy.height() - 2 * pad) / Math.max(box.h, 1), 1.25);
    const readable = !whole && cy.nodes().not(".compound").length <= READABLE_NODES ? MIN_LABEL_PX / CARD_FONT : 0;
    let center = { x: box.x1 + box.w / 2, y: box.y1 + box.h / 2 };
    clamped = zoom < readable;
    if (clamped) {
      zoom = readable;
      const anchor = focus && focus.length ? focus : cy.getElementById(rootId);
      if (anchor && anchor.length) {
        // Keep the anchor in view, and as much of the graph as fits around it.
        const half = { x: (cy.width() / 2 - pad) / zoom, y: (cy.height() / 2 - pad) / zoom };
        const p = anchor.position();
        const clamp = (v, lo, hi) => (lo > hi ? (lo + hi) / 2 : Math.min(Math.max(v, lo), hi));
        center = { x: clamp(p.x, box.x1 + half.x, box.x1 + box.w - half.x), y: clamp(p.y, box.y1 + half.y, box.y1 + box.h - half.y) };
      }
    }
    cy.viewport({ zoom, pan: { x: cy.width() / 2 - center.x * zoom, y: cy.height() / 2 - center.y * zoom } });
    syncLabels();
  }

  // --- drawing -------------------------------------------------------------------------------
  function styles(large) {
    return [
      { selector: "node", style: {
        label: "data(display)", "font-size": 12, "font-family": LABEL_FONT,
        "text-valign": "center", "text-halign": "center", "text-wrap": "none",
        color: "#1b2330", "min-zoomed-font-size": 7, "border-width": 1.5, "background-color": "#ffffff",
      } },
      { selector: "node.dataset", style: {
        shape: large ? "rectangle" : "round-rectangle", width: CARD_W, height: CARD_H, "border-color": "#4a6fb5",
        "font-size": CARD_FONT, "text-wrap": "wrap", "text-max-width": CARD_W - 10, "line-height": 1.3,
      } },
      { selector: "node.job", style: {
        shape: large ? "rectangle" : "round-rectangle", width: JOB_W, height: JOB_H, "background-color": "#efeafb", "border-color": "#6b4fbb",
        "font-size": CARD_FONT, color: "#33246b",
      } },
      { selector: "node.compound", style: {
        shape: "round-rectangle", "background-color": "#f3f6fc", "border-color": "#4a6fb5", "text-valign": "top",
        "text-halign": "center", "font-weight": 600, padding: 8, "text-margin-y": -3, "min-zoomed-font-size": 6,
      } },
      { selector: "node.field", style: { shape: "round-rectangle", width: FIELD_W, height: 22, "border-color": "#9fb3d9", "font-size": FIELD_FONT } },
      { selector: "node.field.pii", style: { "border-color": "#c2410c" } },
      { selector: "node.root", style: { "border-width": 3.5, "border-color": "#1a56c4", "background-color": "#e7efff", "font-weight": 600 } },
      { selector: "node.failed", style: { "border-color": "#a1111c", "border-width": 2.5 } },
      { selector: "node.dropped", style: { "border-style": "dotted", color: "#586174" } },
      { selector: "edge", style: {
        width: 1.4, "line-color": "#a3adbf", "target-arrow-color": "#a3adbf", "target-arrow-shape": "triangle",
        "arrow-scale": 0.8, "curve-style": large ? "haystack" : "bezier", "haystack-radius": 0,
      } },
      { selector: "edge.masked", style: { "line-style": "dashed" } },
      { selector: ".faded-pii", style: { opacity: 0.28 } },
      { selector: "node.pii-on", style: { "background-color": "#fde9e0", "border-color": "#9c2c00", "border-width": 2.5 } },
      { selector: "edge.pii-on", style: { "line-color": "#c2410c", "target-arrow-color": "#c2410c", width: 2.6 } },
      { selector: "node.atrisk.risk-on", style: { "background-color": "#fff4e0", "border-color": "#b45309", "border-style": "dashed", "border-width": 2.5 } },
      { selector: "node.tainted.risk-on", style: { "background-color": "#fde2e4", "border-color": "#a1111c", "border-style": "solid", "border-width": 3.5 } },
      { selector: "node.diff-added", style: { "border-color": "#1e7b34", "background-color": "#e2f4e7", "border-width": 2.5 } },
      { selector: "node.diff-removed", style: { "border-color": "#b42318", "border-style": "dashed", opacity: 0.7 } },
      { selector: "edge.diff-added", style: { "line-color": "#1e7b34", "target-arrow-color": "#1e7b34", width: 2.6 } },
      { selector: "edge.diff-removed", style: { "line-color": "#b42318", "target-arrow-color": "#b42318", "line-style": "dashed", width: 2.2, opacity: 0.8 } },
      { selector: ".dim", style: { opacity: 0.18 } },
      { selector: "node.nolabel", style: { label: "" } },
      { selector: "node.match", style: { "border-color": "#f4b400", "border-width": 4, opacity: 1 } },
      { selector: ".path", style: { opacity: 1 } },
      { selector: "edge.path", style: { "line-color": "#1a56c4", "target-arrow-color": "#1a56c4", width: 2.6 } },
      { selector: "node:selected", style: { "overlay-color": "#1a56c4", "overlay-opacity": 0.14, "overlay-padding": 5 } },
    ];
  }

  function createCy(large) {
    if (typeof cytoscapeDagre !== "undefined") {
      try { cytoscape.use(cytoscapeDagre); } catch (err) { /* already registered */ }
    }
    cy = cytoscape({
      container: ui.canvas,
      elements: [],
      style: styles(large),
      layout: { name: "preset" },
      minZoom: 0.03,
      maxZoom: 3,
      boxSelectionEnabled: false,
      textureOnViewport: large,
      hideEdgesOnViewport: large,
      pixelRatio: large ? 1 : "auto",
    });
    cy.on("tap", "node", (event) => select(event.target));
    // The full name on hover (a card shows its last segment).
    cy.on("mouseover", "node", (event) => {
      const d = event.target.data();
      ui.canvas.title = d.kind === "field" ? `${d.namespace}:${d.name} · ${d.field}` : `${d.namespace}:${d.name}`;
    });
    cy.on("mouseout", "node", () => { ui.canvas.removeAttribute("title"); });
    let zoomTimer = null;
    cy.on("zoom", () => {
      clearTimeout(zoomTimer);
      zoomTimer = setTimeout(syncLabels, 120);
    });
    cy.on("dbltap", "node", (event) => {
      window.location.href = nodeUrl(event.target.data());
    });
    cy.on("tap", (event) => {
      if (event.target === cy) select(null);
    });
  }

  function draw(body) {
    const elements = toElements(body);
    const large = body.nodes.length > 400;
    // A large graph opens zoomed out, where labels are unreadable anyway: start
    // without them so the first frame measures none (syncLabels restores them).
    if (body.nodes.length > DAGRE_MAX) {
      elements.forEach((el) => {
        if (el.group === "nodes" && !el.data.compound) el.classes += " nolabel";
      });
    }
    if (!cy) createCy(large);
    else cy.style(styles(large));
    rootId = body.root;
    cy.batch(() => {
      cy.elements().remove();
      cy.add(elements);
    });
    labelsShown = body.nodes.length <= DAGRE_MAX;
    refreshMarks();
    runLayout();
    draws += 1;
    const selectedId = ui.panel.dataset.node;
    const keep = selectedId ? cy.getElementById(selectedId) : null;
    if (keep && keep.length) select(keep, true);
    else select(null);
    if (state.focus) applyFocus(cy.getElementById(state.focus));
    runFind();
    report(body);
  }

  function report(body) {
    const nodes = cy.nodes().not(".compound").length;
    const edges = cy.edges().length;
    ui.canvas.dataset.nodes = String(nodes);
    ui.canvas.dataset.edges = String(edges);
    ui.canvas.dataset.draws = String(draws);
    ui.canvas.dataset.edgeIds = "";
    let text = `${nodes} nodes · ${edges} edges · ${state.asOf ? "as of " + fmtInstant(state.asOf) : "now"}`;
    if (state.compare) {
      const added = cy.edges(".diff-added").length;
      const removed = cy.edges(".diff-removed").length;
      text += ` · compared with ${fmtInstant(state.compare)}: ${added} edges added, ${removed} removed`;
    }
    if (body.truncated) text += ` · cut at ${body.limit} nodes (nearest shown; expand nodes for more)`;
    if (nodes > 300) text += " · zoom in (wheel or pinch) to read labels";
    else if (clamped) text += " · drawn at a readable size: drag to see the rest, or Fit to see it whole";
    setStatus(text, body.truncated);
  }

  async function load() {
    const mine = ++requestSeq;
    setStatus("Loading the graph…");
    ui.canvas.setAttribute("aria-busy", "true");
    try {
      const body = await fetchGraph();
      if (mine !== requestSeq) return;
      performance.mark("graph-data-received");
      mergeInstants(body.instants);
      draw(body);
      performance.mark("graph-drawn");
      markReady();
    } catch (err) {
      setStatus(err.message, true);
    } finally {
      ui.canvas.setAttribute("aria-busy", "false");
    }
  }

  function markReady() {
    if (document.documentElement.dataset.graphReady) return;
    requestAnimationFrame(() => requestAnimationFrame(() => {
      window.__graphReadyAt = performance.now();
      document.documentElement.dataset.graphReady = "true";
    }));
  }

  // --- selection and the side panel ----------------------------------------------------------
  function badge(text, kind) {
    return h("span", { class: "badge " + kind }, text);
  }

  function select(node, quiet) {
    cy.nodes(":selected").unselect();
    ui.panel.replaceChildren();
    ui.panel.classList.toggle("open", Boolean(node && node.length));
    if (!node || !node.length) {
      delete ui.panel.dataset.node;
      ui.panel.append(
        h("h2", { id: "panel-h" }, "Select a node"),
        h("p", { class: "muted small" }, "Click a node, or focus the graph and use the arrow keys. Double-click opens its page."),
      );
      return;
    }
    node.select();
    const d = node.data();
    ui.panel.dataset.node = d.id;
    const kindLabel = d.compound ? "dataset" : d.kind === "field" ? "column" : d.kind;
    const pageLabel = d.kind === "job" ? "job" : "dataset";
    const badges = [];
    if (d.subject) badges.push(badge(typeof d.subject === "string" ? "identifies " + d.subject : "subject identifiers", "badge-subject"));
    if (d.pii) badges.push(badge(d.piiCategory ? "PII · " + d.piiCategory : "personal data", "badge-pii" + (d.propagated ? " badge-propagated" : "")));
    if (d.tainted) badges.push(badge("tainted", "badge-bad"));
    else if (d.atRisk) badges.push(badge("at risk", "badge-warn"));
    if (d.state) badges.push(badge("last run " + d.state.toLowerCase(), d.state === "FAILED" ? "badge-bad" : d.state === "COMPLETED" ? "badge-ok" : "badge-neutral"));
    if (d.dropped) badges.push(badge("dropped", "badge-neutral"));
    if (d.diff && d.diff !== "same") badges.push(badge(d.diff + " since " + fmtInstant(state.compare), d.diff === "added" ? "badge-ok" : "badge-bad"));
    const props = [h("dt", {}, "Namespace"), h("dd", { class: "mono" }, d.namespace)];
    if (d.kind === "field") props.push(h("dt", {}, "Dataset"), h("dd", { class: "mono" }, d.name));
    if (typeof d.distance === "number") {
      const where = d.distance === 0 ? "start" : d.distance < 0 ? `${-d.distance} upstream` : `${d.distance} downstream`;
      props.push(h("dt", {}, "Distance"), h("dd", {}, where));
    }
    if (!d.compound) {
      props.push(h("dt", {}, "Upstream"), h("dd", {}, `${d.degIn || 0}${d.hiddenIn ? ` (${d.hiddenIn} not drawn)` : ""}`));
      props.push(h("dt", {}, "Downstream"), h("dd", {}, `${d.degOut || 0}${d.hiddenOut ? ` (${d.hiddenOut} not drawn)` : ""}`));
    }
    const impactParams = new URLSearchParams({ node: d.id, level: d.kind === "field" ? "column" : "table" });
    if (state.asOf) impactParams.set("asOf", state.asOf);
    const actions = [
      h("a", { class: "btn", href: nodeUrl(d) }, "Open " + pageLabel + " page"),
      h("a", { class: "btn btn-secondary", href: config.impactUrl + "?" + impactParams.toString() }, "Impact"),
    ];
    if (d.id !== rootId) {
      actions.push(h("a", { class: "btn btn-secondary", href: pageLink({ node: d.id, compare: "" }) }, "Explore from here"));
    }
    if (d.hiddenIn) actions.push(h("button", { type: "button", class: "btn btn-secondary", onclick: () => expand(node, "upstream") }, `Expand upstream (+${d.hiddenIn})`));
    if (d.hiddenOut) actions.push(h("button", { type: "button", class: "btn btn-secondary", onclick: () => expand(node, "downstream") }, `Expand downstream (+${d.hiddenOut})`));
    if (d.id !== rootId && !d.compound && node.neighborhood("node").length) {
      actions.push(h("button", { type: "button", class: "btn btn-secondary", onclick: () => collapse(node) }, "Collapse beyond this node"));
    }
    const focused = state.focus === d.id;
    actions.push(h("button", { type: "button", class: "btn btn-secondary", "aria-pressed": focused ? "true" : "false", onclick: () => toggleFocus(node) }, focused ? "Clear path focus" : d.kind === "field" ? "Focus this column's path" : "Focus this node's path"));
    ui.panel.append(
      h("button", { type: "button", class: "panel-close", "aria-label": "Close the node panel", onclick: () => select(null) }, "×"),
      h("span", { class: "kind kind-" + (d.compound ? "dataset" : d.kind) }, kindLabel),
      h("h2", { id: "panel-h", class: "mono" }, d.kind === "field" ? d.field : d.name),
      h("div", { class: "panel-badges" }, badges),
      h("dl", { class: "props" }, props),
      h("div", { class: "panel-actions" }, actions),
    );
    if (!quiet) setStatus(`Selected ${kindLabel} ${d.kind === "field" ? d.field : d.name}: ${d.degIn || 0} upstream, ${d.degOut || 0} downstream.`);
  }

  // --- expand, collapse, focus ---------------------------------------------------------------
  async function expand(node, direction) {
    setStatus("Expanding " + node.data("label") + "…");
    try {
      const body = await fetchGraph({ node: node.id(), direction, depth: 1, compare: "", limit: 500 });
      const fresh = toElements({ ...body, root: rootId }).filter((el) => !cy.getElementById(el.data.id).length);
      // Distances came relative to the expanded node: make them relative to the start.
      const base = node.data("distance");
      fresh.forEach((el) => {
        if (el.group === "nodes" && typeof base === "number" && typeof el.data.distance === "number") {
          el.data.distance += base;
        }
      });
      cy.add(fresh);
      mergeInstants(body.instants);
      refreshMarks();
      runLayout(node);
      select(node, true);
      setStatus(`Added ${fresh.filter((el) => el.group === "nodes").length} nodes ${direction} of ${node.data("label")}.`);
      report({ truncated: body.truncated, limit: 500 });
    } catch (err) {
      setStatus(err.message, true);
    }
  }

  // Remove what is reachable from the start node only through ``node``.
  function collapse(node) {
    const root = cy.getElementById(rootId);
    const keep = new Set([node.id()]);
    const start = root.length ? (root.isChild() ? root.parent() : root) : null;
    const stack = start ? [start] : [];
    const owner = node.isChild() ? node.parent() : node;
    if (start) keep.add(start.id());
    while (stack.length) {
      const current = stack.pop();
      const around = current.isParent() ? current.children().neighborhood("node").add(current.children()) : current.neighborhood("node");
      around.forEach((next) => {
        const unit = next.isChild() ? next.parent() : next;
        [next, unit].forEach((el) => {
          if (keep.has(el.id()) || el.same(node) || (el.same(owner) && !node.same(owner))) return;
          keep.add(el.id());
          stack.push(el);
        });
      });
    }
    const gone = cy.nodes().filter((n) => !keep.has(n.id()) && !(n.isParent() && n.children().some((c) => keep.has(c.id()))));
    cy.remove(gone);
    cy.nodes(".compound").filter((n) => n.children().length === 0).remove();
    refreshMarks();
    runLayout();
    if (node.inside()) select(node, true);
    setStatus(`Collapsed ${gone.length} nodes beyond ${node.data("label")}.`);
    report({ truncated: false });
  }

  function applyFocus(node) {
    cy.elements().removeClass("dim path");
    if (!node || !node.length) return;
    const path = node.predecessors().add(node.successors()).add(node);
    const withParents = path.add(path.nodes().parents());
    cy.batch(() => {
      cy.elements().not(withParents).addClass("dim");
      path.addClass("path");
    });
  }

  function toggleFocus(node) {
    state.focus = state.focus === node.id() ? "" : node.id();
    applyFocus(state.focus ? node : null);
    syncUrl();
    select(node, true);
  }

  // --- find in graph -------------------------------------------------------------------------
  function runFind() {
    const q = ui.find.value.trim().toLowerCase();
    if (!q && !matches.length && !cy.$(".match").length) {
      ui.findStatus.textContent = "";
      return;
    }
    cy.batch(() => {
      cy.nodes().removeClass("match");
      if (!state.focus) cy.elements().removeClass("dim");
      matches = [];
      if (!q) return;
      matches = cy.nodes().filter((n) => String(n.data("label")).toLowerCase().includes(q)).toArray();
      matches.sort((a, b) => a.position("x") - b.position("x") || a.position("y") - b.position("y"));
      const hits = cy.collection(matches);
      hits.addClass("match");
      if (!state.focus) cy.elements().not(hits).not(hits.parents()).addClass("dim");
    });
    matchIndex = -1;
    ui.findStatus.textContent = q ? (matches.length ? `${matches.length} match${matches.length === 1 ? "" : "es"} · Enter for next` : "no match") : "";
  }

  function nextMatch(delta) {
    if (!matches.length) return;
    matchIndex = (matchIndex + delta + matches.length) % matches.length;
    const node = matches[matchIndex];
    cy.animate({ center: { eles: node }, zoom: Math.max(cy.zoom(), 0.9) }, { duration: 250 });
    select(node);
    ui.findStatus.textContent = `${matchIndex + 1} of ${matches.length}`;
  }

  // --- keyboard on the canvas ----------------------------------------------------------------
  function nearestBy(candidates, from) {
    let best = null;
    let bestDistance = Infinity;
    candidates.forEach((n) => {
      const dy = Math.abs(n.position("y") - from.position("y"));
      if (dy < bestDistance) { best = n; bestDistance = dy; }
    });
    return best;
  }

  function onKey(event) {
    if (!cy) return;
    const current = cy.nodes(":selected")[0] || null;
    const start = () => cy.getElementById(rootId);
    let next = null;
    switch (event.key) {
      case "ArrowRight": next = current ? nearestBy(current.outgoers("node"), current) : start(); break;
      case "ArrowLeft": next = current ? nearestBy(current.incomers("node"), current) : start(); break;
      case "ArrowUp":
      case "ArrowDown": {
        if (!current) { next = start(); break; }
        const column = cy.nodes().filter((n) => !n.isParent() && Math.abs(n.position("x") - current.position("x")) < 5)
          .sort((a, b) => a.position("y") - b.position("y"));
        const at = column.toArray().findIndex((n) => n.same(current));
        next = column[at + (event.key === "ArrowDown" ? 1 : -1)] || null;
        break;
      }
      case "Enter":
        if (current) window.location.href = nodeUrl(current.data());
        return;
      case "+":
      case "=":
        if (current) {
          if (current.data("hiddenOut")) expand(current, "downstream");
          else if (current.data("hiddenIn")) expand(current, "upstream");
        }
        event.preventDefault();
        return;
      case "-":
        if (current && current.id() !== rootId) collapse(current);
        event.preventDefault();
        return;
      case "f":
        if (current) toggleFocus(current);
        return;
      case "Escape":
        select(null);
        return;
      default:
        return;
    }
    event.preventDefault();
    if (next && next.length !== 0) {
      select(next);
      const pos = next.renderedPosition();
      if (pos.x < 40 || pos.y < 40 || pos.x > cy.width() - 40 || pos.y > cy.height() - 40) {
        cy.animate({ center: { eles: next } }, { duration: 200 });
      }
    }
  }

  // --- time slider and diff ------------------------------------------------------------------
  let timeTimer = null;
  let axisTimer = null;
  function onSlide() {
    const pos = Number(ui.slider.value);
    state.asOf = pos >= instants.length ? "" : instants[pos];
    if (state.compare && state.asOf && state.compare >= state.asOf) {
      const before = instants.filter((value) => value < state.asOf);
      state.compare = before.length ? before[before.length - 1] : "";
      ui.compareSlider.value = String(Math.max(positionOf(state.compare), 0));
    }
    limitCompare();
    showTimeLabels();
    clearTimeout(timeTimer);
    timeTimer = setTimeout(() => { syncUrl(); load(); }, 120);
  }

  function onCompare() {
    state.compare = instants[Number(ui.compareSlider.value)] || "";
    showTimeLabels();
    clearTimeout(timeTimer);
    timeTimer = setTimeout(() => { syncUrl(); load(); }, 120);
  }

  // The canvas, and the node panel beside it, take the window's height left below the
  // controls (which wrap onto more lines in a narrow window, and when "Compare with" shows
  // its slider); the stylesheet's minimum heights hold.
  function fitCanvas() {
    const top = ui.canvas.getBoundingClientRect().top + window.scrollY;
    const height = `${Math.round(window.innerHeight - top - 16)}px`;
    if (ui.canvas.style.height === height) return;
    ui.canvas.style.height = height;
    ui.panel.style.maxHeight = height;
    if (cy) cy.resize();
  }

  function onDiffToggle() {
    ui.compareBox.hidden = !ui.diff.checked;
    fitCanvas();
    if (ui.diff.checked) {
      // Compare with the state just before the change shown: the change before it, or
      // (shown the first change) a moment before the first.
      const shown = state.asOf ? positionOf(state.asOf) : instants.length - 1;
      const pick = shown - 1;
      ui.compareSlider.value = String(Math.max(pick, 0));
      if (pick >= 0) {
        state.compare = instants[pick];
      } else if (instants.length) {
        const first = state.asOf && state.asOf < instants[0] ? state.asOf : instants[0];
        state.compare = new Date(Date.parse(first) - 1).toISOString();
      } else {
        state.compare = "";
      }
    } else {
      state.compare = "";
    }
    showTimeLabels();
    syncUrl();
    load();
  }

  // --- wiring --------------------------------------------------------------------------------
  ui.slider.addEventListener("input", onSlide);
  window.addEventListener("resize", () => {
    clearTimeout(axisTimer);
    axisTimer = setTimeout(() => { drawAxis(); fitCanvas(); }, 150);
  });
  ui.compareSlider.addEventListener("input", onCompare);
  ui.diff.addEventListener("change", onDiffToggle);
  ui.now.addEventListener("click", () => {
    ui.slider.value = String(instants.length);
    onSlide();
  });
  ui.pii.addEventListener("change", applyHighlights);
  ui.risk.addEventListener("change", applyHighlights);
  ui.find.addEventListener("input", runFind);
  ui.find.addEventListener("keydown", (event) => {
    if (event.key === "Enter") {
      event.preventDefault();
      nextMatch(event.shiftKey ? -1 : 1);
    }
  });
  ui.canvas.addEventListener("keydown", onKey);
  $("btn-fit").addEventListener("click", () => {
    if (!cy) return;
    frame(null, null, true);
    ui.status.textContent = ui.status.textContent.replace(/ · drawn at a readable size:[^·]*$/, "");
  });
  $("btn-relayout").addEventListener("click", () => cy && runLayout());
  $("btn-png").addEventListener("click", () => {
    if (!cy) return;
    const link = h("a", { href: cy.png({ full: true, scale: 2, bg: "#ffffff" }), download: "lineage.png" });
    document.body.append(link);
    link.click();
    link.remove();
  });
  // The answer for the state shown, from the server (what the API's CSV and Mermaid give).
  ["csv", "mermaid"].forEach((format) => {
    $("btn-" + format).addEventListener("click", () => {
      const params = query({ compare: "", focus: "" });
      params.set("limit", String(config.limit));
      params.set("format", format);
      const link = h("a", { href: config.exportUrl + "?" + params.toString(), download: "" });
      document.body.append(link);
      link.click();
      link.remove();
    });
  });

  // Exposed for tests, benchmarks and the curious.
  window.lineageExplorer = {
    get cy() { return cy; },
    state,
    edgeIds: () => (cy ? cy.edges().map((e) => e.id()).sort() : []),
    nodeIds: () => (cy ? cy.nodes().not(".compound").map((n) => n.id()).sort() : []),
  };

  fitCanvas();
  load();
})();
