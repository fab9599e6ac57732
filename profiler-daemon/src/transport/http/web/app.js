// profilerd's web view. Asks the daemon's /api/ routes for the folded
// stacks of the chosen window and draws them with d3-flame-graph (a diff
// against an earlier window, or a range dragged on the timeline, coloured
// as the Diff RPC colours it: red where the window has more, blue where it
// has fewer); draws the held history's timeline, on which a window (or the
// range to compare with) can be dragged; lists the window's processes and
// functions, and the peeks as they happen. Every error the daemon answers
// is shown as it says it (the listener's refusals included).
"use strict";

const LIVE_REFRESH_MS = 5000;
// The peek list follows /api/peeks/events; it is also read this often in
// case the event stream is refused (each caller has a few streams).
const PEEKS_REFRESH_MS = 10000;
const FUNCTIONS_SHOWN = 25;
// What the process list counts in each mode (time off CPU counts as the
// sampling periods it makes, as the reports count it).
const COUNTED = { cpu: "samples", offcpu: "periods off CPU", wall: "samples and periods off CPU" };
// How long the flame graph takes to zoom.
const TRANSITION_MS = 250;
// A request the daemon has not answered in this long is given up, and
// said so (the next live refresh asks again).
const REQUEST_TIMEOUT_MS = 60000;

const $ = (id) => document.getElementById(id);
// d3-flame-graph's UMD bundle exports its chart as `default`.
const flamegraphChart = window.flamegraph.default || window.flamegraph;

const view = {
  chart: null,
  tree: null,
  generation: 0,
  liveTimer: null,
  // A window dragged on the timeline: { from, to } in Unix milliseconds.
  brushed: null,
  // The range to compare with, dragged on the timeline (same shape).
  base: null,
  // The names from the root to the frame zoomed into, kept across reloads.
  zoomed: null,
  // Whether the graph drawn is a diff.
  diffing: false,
  loads: 0,
  processes: [],
  functionsSort: "self",
  selectedPeek: null,
  peekIds: "",
};

// The chosen window as query parameters, and in words.
function chosenWindow() {
  const params = new URLSearchParams();
  if (view.brushed) return { ...rangeWindow(view.brushed), live: false };
  const range = Number($("range").value);
  const until = Number($("until").value);
  params.set("since", String(range + until));
  if (until > 0) params.set("until", String(until));
  const words = `the last ${$("range").selectedOptions[0].text} ending ${$("until").selectedOptions[0].text}`;
  return { params, words, live: until === 0 };
}

// A range dragged on the timeline as query parameters, and in words.
function rangeWindow(range) {
  const params = new URLSearchParams();
  params.set("from", String(Math.round(range.from)));
  params.set("to", String(Math.round(range.to)));
  const seconds = ((range.to - range.from) / 1000).toFixed(1);
  const at = new Date(range.to).toLocaleTimeString();
  return { params, words: `${seconds} s ending ${at}` };
}

// The same window moved back by `seconds`, as query parameters.
function earlierWindow(seconds) {
  const params = new URLSearchParams();
  if (view.brushed) {
    params.set("from", String(Math.round(view.brushed.from - seconds * 1000)));
    params.set("to", String(Math.round(view.brushed.to - seconds * 1000)));
  } else {
    const range = Number($("range").value);
    const until = Number($("until").value) + seconds;
    params.set("since", String(range + until));
    params.set("until", String(until));
  }
  return params;
}

// What the window is compared with (`diff`: the #diff choice): its query
// parameters and words, or null when there is nothing to compare with yet.
function baseWindow(diff) {
  if (diff === "range") return view.base ? rangeWindow(view.base) : null;
  if (diff === "before") return { params: earlierWindow(windowSeconds()), words: "the window before" };
  const seconds = Number(diff);
  return { params: earlierWindow(seconds), words: `the window ${seconds / 60} minutes earlier` };
}

// What a drag on the timeline chooses: the window, or (when comparing with
// a dragged range) the range to compare with.
function dragChooses() {
  if ($("diff").value !== "range") return "window";
  return document.querySelector('input[name="drag"]:checked').value;
}

// The length of the chosen window in seconds.
function windowSeconds() {
  if (view.brushed) return (view.brushed.to - view.brushed.from) / 1000;
  return Number($("range").value);
}

// The query string of a report of `window` in `format` (none: the
// selection alone), of the chosen processes and mode; `drawn`: the folded
// lines a flame graph draws.
function reportParams(window, format, drawn) {
  const params = new URLSearchParams(window);
  const processes = $("processes").value.trim();
  for (const word of processes.split(/[\s,]+/).filter(Boolean)) {
    params.append(/^\d+$/.test(word) ? "pid" : "comm", word);
  }
  params.set("mode", $("mode").value);
  if (!format) return params;
  params.set("format", format);
  // Python frames come with their file and line (the daemon's default).
  if (!$("interpreter").checked) params.set("interpreter", "false");
  if (format === "folded" && !processes) params.set("groupby", "process");
  if (drawn) params.set("drawn", "true");
  return params;
}

function setStatus(text, state) {
  $("status").textContent = text;
  document.body.dataset.state = state;
}

// The daemon's own words for a refused request.
async function refusal(response) {
  const text = (await response.text()).trim();
  return `${response.status} ${response.statusText}: ${text}`;
}

// The body of a request, or an Error carrying the daemon's words.
async function fetchText(url) {
  let response;
  try {
    response = await fetch(url, { signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
  } catch (error) {
    if (error.name === "TimeoutError") {
      throw new Error(`The daemon did not answer ${url} in ${REQUEST_TIMEOUT_MS / 1000} s.`);
    }
    throw new Error(`The daemon did not answer ${url}: ${error}`);
  }
  if (!response.ok) throw new Error(await refusal(response));
  return response.text();
}

// Folded lines ("a;b;c 12") as the tree d3-flame-graph draws; each node
// also keeps its own samples (`self`).
function foldedTree(text) {
  const root = { name: "all", value: 0, self: 0, children: [] };
  const index = new Map([[root, new Map()]]);
  for (const line of text.split("\n")) {
    const space = line.lastIndexOf(" ");
    if (space <= 0) continue;
    const count = Number(line.slice(space + 1));
    if (!Number.isFinite(count) || count <= 0) continue;
    root.value += count;
    let node = root;
    for (const name of line.slice(0, space).split(";")) {
      const children = index.get(node);
      let child = children.get(name);
      if (!child) {
        child = { name, value: 0, self: 0, children: [] };
        children.set(name, child);
        index.set(child, new Map());
        node.children.push(child);
      }
      child.value += count;
      node = child;
    }
    node.self += count;
  }
  return root;
}

// Marks each node of `tree` with its change in own samples from `base`
// (scaled to the same total), which the differential colours read.
function markDelta(tree, base) {
  const scale = base.value > 0 ? tree.value / base.value : 0;
  const baseChildren = (node) => new Map((node ? node.children : []).map((child) => [child.name, child]));
  const walk = (node, baseNode) => {
    node.delta = node.self - (baseNode ? baseNode.self * scale : 0);
    const bases = baseChildren(baseNode);
    for (const child of node.children) walk(child, bases.get(child.name));
  };
  walk(tree, base);
}

// The window's functions with the most self (or total) samples, from the
// daemon (the flame graph's lines leave out what is too narrow to draw).
// Each loader writes only if no newer load has begun (`generation`).
async function loadFunctions(window, generation = view.generation) {
  const params = reportParams(window, null);
  const by = view.functionsSort === "total" ? "total" : "self";
  params.set("by", by);
  params.set("limit", String(FUNCTIONS_SHOWN));
  let ranked;
  try {
    ranked = JSON.parse(await fetchText(`/api/functions?${params}`));
  } catch (error) {
    ranked = { samples: 0, functions: [] };
  }
  if (generation !== view.generation) return;
  const rows = ranked.functions;
  if (view.functionsSort === "name") rows.sort((a, b) => a.function.localeCompare(b.function));
  const body = $("functions").querySelector("tbody");
  body.replaceChildren();
  const total = ranked.samples || 1;
  const share = (count) => `${count} (${((100 * count) / total).toFixed(1)}%)`;
  for (const row of rows) {
    const line = document.createElement("tr");
    for (const text of [row.function, share(row.self), share(row.total)]) {
      const cell = document.createElement("td");
      cell.textContent = text;
      line.append(cell);
    }
    line.title = row.module;
    line.addEventListener("click", () => {
      $("search").value = row.function;
      search();
    });
    body.append(line);
  }
}

// The names from the root to `node` of the drawn tree.
function namesTo(node) {
  const names = [];
  for (let at = node; at; at = at.parent) names.unshift(at.data.name);
  return names;
}

function makeChart(width) {
  const chart = flamegraphChart()
    .width(width)
    .cellHeight(18)
    .minFrameSize(2)
    .transitionDuration(TRANSITION_MS)
    .sort(true)
    .title("")
    .setDetailsElement($("details"));
  chart.setSearchHandler((results, sum, total) => {
    if (!$("search").value) {
      $("matched").textContent = "";
      return;
    }
    // Of the frame zoomed into, when zoomed.
    const share = total > 0 ? (100 * sum) / total : 0;
    const of = view.zoomed ? `the samples under ${view.zoomed.at(-1)}` : "samples";
    $("matched").textContent = `matched: ${share.toFixed(1)}% of ${of} in ${results.length} frames`;
    $("matched").dataset.share = share.toFixed(1);
  });
  // A click zooms into a frame; the zoom is kept when the graph is drawn
  // again (a live refresh, the icicle switch).
  chart.onClick((node) => {
    view.zoomed = node.parent ? namesTo(node) : null;
  });
  return chart;
}

function draw(tree, diffing) {
  const width = Math.max(400, $("flamegraph").clientWidth || 1000);
  if (view.chart) view.chart.destroy();
  $("flamegraph").replaceChildren();
  view.chart = makeChart(width).inverted($("icicle").checked);
  if (diffing) {
    view.chart.computeDelta(true).setColorMapper(window.flamegraph.colorMapper.differentialColorMapper);
  }
  d3.select("#flamegraph").datum(tree).call(view.chart);
  if (view.zoomed) {
    const path = view.zoomed.join("\n");
    const node = d3
      .selectAll("#flamegraph svg g.frame")
      .data()
      .find((node) => namesTo(node).join("\n") === path);
    if (node) {
      // Drawn zoomed at once, not zooming in again on every refresh.
      view.chart.transitionDuration(0);
      view.chart.zoomTo(node);
      view.chart.transitionDuration(TRANSITION_MS);
    } else {
      view.zoomed = null;
    }
  }
  search();
}

// Loads the chosen window; a live refresh (`quietly`) keeps the last status
// line until the new one comes. Whatever fails is said, never left loading.
async function load(quietly) {
  const generation = ++view.generation;
  try {
    await loadWindow(generation, quietly);
  } catch (error) {
    if (generation === view.generation) setStatus(`The page failed to draw the window: ${error.message}`, "error");
  }
}

async function loadWindow(generation, quietly) {
  const chosen = chosenWindow();
  const params = reportParams(chosen.params, "folded", true);
  const diff = $("diff").value;
  if (quietly) document.body.dataset.state = "loading";
  else setStatus("Loading…", "loading");
  const against = diff ? baseWindow(diff) : null;
  let tree;
  let base = null;
  try {
    const text = await fetchText(`/api/query?${params}`);
    tree = foldedTree(text);
    if (against) {
      const baseParams = reportParams(against.params, "folded", true);
      base = foldedTree(await fetchText(`/api/query?${baseParams}`));
      document.body.dataset.baseWindow = baseParams.toString();
    }
  } catch (error) {
    if (generation === view.generation) setStatus(error.message, "error");
    return;
  }
  if (generation !== view.generation) return;
  if (base) markDelta(tree, base);
  view.tree = tree;
  view.diffing = Boolean(base);
  draw(tree, Boolean(base));
  await Promise.all([
    loadFunctions(chosen.params, generation),
    loadProcesses(chosen.params, generation),
    loadTimeline(generation),
  ]);
  if (generation !== view.generation) return;
  let compared = "";
  if (base) compared = `, compared with ${base.value} samples of ${against.words} (red: more, blue: fewer)`;
  else if (diff) compared = "; drag on the timeline the range to compare with";
  setStatus(
    `${tree.value} samples, ${chosen.words}, ` +
      `${$("processes").value.trim() || "every process"}, ${$("mode").value}${compared} ` +
      `(loaded ${new Date().toLocaleTimeString()})`,
    "loaded",
  );
  document.body.dataset.samples = String(tree.value);
  document.body.dataset.window = params.toString();
  document.body.dataset.loads = String(++view.loads);
}

function search() {
  if (!view.chart) return;
  const term = $("search").value;
  if (term) view.chart.search(term);
  else {
    view.chart.clear();
    $("matched").textContent = "";
    delete $("matched").dataset.share;
  }
}

// The samples of `spans` spread over `bins` equal bins from `start` to
// `end` (each span's in proportion to its overlap with each), as rates
// per second: spans are cut where drains happened, and a span of a few
// milliseconds holding a sample or two would otherwise draw a spike.
function binned(spans, start, end, bins) {
  const width = (end - start) / bins;
  const counts = new Float64Array(bins);
  const binOf = (ms) => Math.min(bins - 1, Math.max(0, Math.floor((ms - start) / width)));
  for (const span of spans) {
    const length = span.end_ms - span.start_ms;
    if (length <= 0) {
      counts[binOf(span.start_ms)] += span.samples;
      continue;
    }
    for (let bin = binOf(span.start_ms); bin <= binOf(span.end_ms); bin++) {
      const from = Math.max(span.start_ms, start + bin * width);
      const to = Math.min(span.end_ms, start + (bin + 1) * width);
      if (to > from) counts[bin] += (span.samples * (to - from)) / length;
    }
  }
  return Array.from(counts, (count, bin) => ({
    start_ms: start + bin * width,
    end_ms: start + (bin + 1) * width,
    rate: count / (width / 1000),
  }));
}

// The held history's samples per second (of the chosen processes, in the
// chosen mode), with a brush to choose a window.
async function loadTimeline(generation) {
  let timeline;
  try {
    timeline = JSON.parse(await fetchText(`/api/timeline?${reportParams(new URLSearchParams(), null)}`));
  } catch (error) {
    $("timeline-note").textContent = error.message;
    return;
  }
  if (generation !== view.generation) return;
  const spans = timeline.spans;
  const box = $("timeline");
  const width = Math.max(300, box.clientWidth || 1000);
  const height = 70;
  box.replaceChildren();
  if (spans.length === 0) {
    $("timeline-note").textContent = "The daemon holds no samples yet.";
    return;
  }
  const start = spans[0].start_ms;
  const end = Math.max(spans[spans.length - 1].end_ms, timeline.now_ms);
  document.body.dataset.timeline = `${start},${end}`;
  const x = d3.scaleLinear().domain([start, end]).range([0, width]);
  // Bins of at least a second, at most one per 3 pixels, up to the last
  // drain (the time since holds no samples yet).
  const held = spans[spans.length - 1].end_ms;
  const count = Math.max(1, Math.min(Math.floor(((held - start) / (end - start)) * (width / 3)), Math.ceil((held - start) / 1000)));
  const bins = binned(spans, start, held, count);
  const y = d3.scaleLinear().domain([0, d3.max(bins, (bin) => bin.rate) || 1]).range([height - 14, 0]);
  const svg = d3.select(box).append("svg").attr("width", width).attr("height", height);
  box.title =
    `${$("mode").selectedOptions[0].text} samples per second of ${$("processes").value.trim() || "every process"} ` +
    "in the history the daemon holds; drag to choose a window";
  svg
    .selectAll("rect.bar")
    .data(bins)
    .join("rect")
    .attr("class", "bar")
    .attr("x", (bin) => x(bin.start_ms))
    .attr("width", (bin) => Math.max(1, x(bin.end_ms) - x(bin.start_ms) - 0.5))
    .attr("y", (bin) => y(bin.rate))
    .attr("height", (bin) => height - 14 - y(bin.rate))
    .append("title")
    .text((bin) => `${new Date(bin.start_ms).toLocaleTimeString()}: ${bin.rate.toFixed(0)} samples/s`);
  svg
    .append("g")
    .attr("transform", `translate(0,${height - 14})`)
    .call(d3.axisBottom(d3.scaleTime().domain([new Date(start), new Date(end)]).range([0, width])).ticks(8));
  const brush = d3
    .brushX()
    .extent([
      [0, 0],
      [width, height - 14],
    ])
    .on("end", (event) => {
      if (!event.sourceEvent) return;
      const range = event.selection ? event.selection.map((pixel) => x.invert(pixel)) : null;
      const chosen = range ? { from: range[0], to: range[1] } : null;
      if (dragChooses() === "base") view.base = chosen;
      else view.brushed = chosen;
      reload();
    });
  // The range a drag does not choose now is marked, not draggable: the
  // window while the range compared with is dragged, that range (when it
  // is compared with) while the window is.
  const target = dragChooses();
  const comparing = $("diff").value === "range";
  const marked = target === "base" ? view.brushed : comparing ? view.base : null;
  if (marked) {
    svg
      .append("rect")
      .attr("class", target === "base" ? "window-mark" : "base-mark")
      .attr("x", x(marked.from))
      .attr("width", Math.max(1, x(marked.to) - x(marked.from)))
      .attr("y", 0)
      .attr("height", height - 14);
  }
  const brushed = svg.append("g").attr("class", `brush ${target}`).call(brush);
  const dragged = target === "base" ? view.base : view.brushed;
  if (dragged) brushed.call(brush.move, [x(dragged.from), x(dragged.to)]);
  $("drag-target").hidden = $("diff").value !== "range";
  if (target === "base") {
    $("timeline-note").textContent = view.base
      ? "The range compared with (blue): drag again to move it."
      : "Drag the range to compare with.";
  } else {
    $("timeline-note").textContent = view.brushed
      ? "A dragged window: click outside it on the timeline to go back to the last minutes."
      : "Drag on the timeline to choose a window.";
  }
}

async function loadProcesses(window, generation) {
  let processes;
  try {
    const params = new URLSearchParams(window);
    params.set("mode", $("mode").value);
    processes = JSON.parse(await fetchText(`/api/processes?${params}`));
  } catch (error) {
    processes = [];
  }
  if (generation !== view.generation) return;
  view.processes = processes;
  const options = $("process-list");
  options.replaceChildren();
  for (const process of view.processes.slice(0, 200)) {
    const option = document.createElement("option");
    option.value = String(process.pid);
    option.label = `${process.command} (uid ${process.uid}) ${process.cgroup}`;
    options.append(option);
  }
  showProcesses();
}

function showProcesses() {
  $("processes-table").querySelector("th:last-child").textContent = COUNTED[$("mode").value] || "samples";
  const filter = $("process-filter").value.trim().toLowerCase();
  const body = $("processes-table").querySelector("tbody");
  body.replaceChildren();
  const matching = view.processes.filter((process) =>
    !filter ||
    [String(process.pid), process.command, `uid ${process.uid}`, String(process.uid), process.cgroup].some((text) =>
      text.toLowerCase().includes(filter),
    ),
  );
  for (const process of matching.slice(0, 100)) {
    const line = document.createElement("tr");
    line.dataset.pid = String(process.pid);
    for (const text of [process.pid, process.command, process.uid, process.cgroup, process.threads, process.samples]) {
      const cell = document.createElement("td");
      cell.textContent = String(text);
      line.append(cell);
    }
    line.addEventListener("click", () => {
      $("processes").value = String(process.pid);
      $("peek-pid").value = String(process.pid);
      changed();
    });
    body.append(line);
  }
}

function scheduleLive() {
  clearInterval(view.liveTimer);
  view.liveTimer = null;
  if (chosenWindow().live) {
    view.liveTimer = setInterval(() => {
      if (document.body.dataset.state !== "loading") load(true);
    }, LIVE_REFRESH_MS);
  }
}

function reload() {
  updateDownloads();
  scheduleLive();
  load();
}

function updateDownloads() {
  const window = chosenWindow().params;
  const extensions = { pprof: "pb.gz", folded: "folded", speedscope: "speedscope.json", flamegraph: "svg" };
  for (const link of document.querySelectorAll("#downloads a")) {
    const format = link.dataset.format;
    link.href = `/api/query?${reportParams(window, format)}`;
    link.download = `profilerd.${extensions[format]}`;
  }
}

async function refreshPeeks() {
  let peeks;
  try {
    peeks = JSON.parse(await fetchText("/peeks"));
  } catch {
    return;
  }
  const ids = peeks.map((peek) => peek.id).join(",");
  if (ids === view.peekIds) return;
  view.peekIds = ids;
  const list = $("peeks");
  list.replaceChildren();
  for (const peek of peeks.slice().reverse()) {
    const item = document.createElement("li");
    item.dataset.id = peek.id;
    item.dataset.pid = String(peek.pid);
    item.textContent = `${peek.triggered}: ${peek.title}`;
    if (peek.id === view.selectedPeek) item.classList.add("selected");
    item.addEventListener("click", () => showPeek(peek.id));
    list.append(item);
  }
}

async function showPeek(id) {
  view.selectedPeek = id;
  for (const item of $("peeks").children) {
    item.classList.toggle("selected", item.dataset.id === id);
  }
  try {
    $("peek-report").textContent = await fetchText(`/peeks/${encodeURIComponent(id)}`);
  } catch (error) {
    $("peek-report").textContent = error.message;
  }
}

async function peekNow() {
  const pid = $("peek-pid").value.trim();
  if (!/^\d+$/.test(pid)) {
    $("peek-report").textContent = "Give the pid of the process to peek at.";
    return;
  }
  $("peek-report").textContent = `Peeking at ${pid} for 1 s…`;
  // The header tells the daemon this is the page's own request: a form on
  // another site's page cannot send it.
  const response = await fetch(`/api/peek?pid=${pid}`, {
    method: "POST",
    headers: { "X-Profilerd-Request": "1" },
  });
  if (!response.ok) {
    $("peek-report").textContent = await refusal(response);
    return;
  }
  const { id } = await response.json();
  await refreshPeeks();
  await showPeek(id);
}

// A control changed: a window chosen by length replaces a dragged one.
function changed(event) {
  if (event && ["range", "until"].includes(event.target.id)) view.brushed = null;
  reload();
}

function start() {
  // The forms are never sent: their controls act as they change. (The
  // Content-Security-Policy allows no inline handler, hence here.)
  for (const form of document.querySelectorAll("form")) {
    form.addEventListener("submit", (event) => event.preventDefault());
  }
  for (const id of ["range", "until", "mode", "diff", "processes", "interpreter"]) {
    $(id).addEventListener("change", changed);
  }
  $("reload").addEventListener("click", () => reload());
  $("search").addEventListener("input", search);
  $("icicle").addEventListener("change", () => view.tree && draw(view.tree, view.diffing));
  $("reset-zoom").addEventListener("click", () => {
    view.zoomed = null;
    if (view.chart) view.chart.resetZoom();
  });
  for (const choice of document.querySelectorAll('input[name="drag"]')) {
    choice.addEventListener("change", () => loadTimeline(view.generation));
  }
  $("peek-button").addEventListener("click", peekNow);
  $("process-filter").addEventListener("input", showProcesses);
  for (const header of $("functions").querySelectorAll("th")) {
    header.addEventListener("click", () => {
      view.functionsSort = header.dataset.sort;
      loadFunctions(chosenWindow().params);
    });
  }
  reload();
  refreshPeeks();
  const peekEvents = new EventSource("/api/peeks/events");
  peekEvents.addEventListener("peek", refreshPeeks);
  setInterval(refreshPeeks, PEEKS_REFRESH_MS);
}

start();
