// profilerd's web view. Asks the daemon's /api/ routes for the folded
// stacks of the chosen window and draws them with d3-flame-graph (a diff
// against an earlier window, or a range dragged on the timeline, coloured
// as the Diff RPC colours it: red where the window has more, blue where it
// has fewer); draws the held history's timeline, on which a window (or the
// range to compare with) can be dragged; lists the window's processes and
// functions, and the peeks as they happen. Every error the daemon answers
// is shown as it says it (the listener's refusals included). The timeline
// is timeline.js's, the tables (functions, sandwich, threads, processes)
// tables.js's, a function's source heatmap source.js's, the peeks
// peeks.js's; all are loaded before this file.
"use strict";

const LIVE_REFRESH_MS = 5000;
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
  processesFailed: null,
  functionsSort: "self",
  // The function whose sandwich is shown.
  sandwich: null,
  // Which source heatmap load is the newest (source.js).
  sourceGeneration: 0,
  // What /api/status says of the daemon's sampling.
  daemon: null,
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
  const at = clock(range.to);
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
  // The thread chosen ("process-PID;name-TID"), when processes are.
  const thread = $("thread").value;
  if (thread && processes) params.set("tid", thread.split("-").pop());
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

// What the flame graph asks for: the lines a flame graph draws of
// `window`, grouped by thread when processes are chosen (so that one
// thread can be drawn alone; every thread is merged back by regroup).
function graphParams(window) {
  const params = reportParams(window, "folded", true);
  // Every thread, to offer each (regroup draws the one chosen).
  params.delete("tid");
  if ($("processes").value.trim()) {
    params.set("groupby", "thread");
    params.set("maxsections", "0");
  }
  return params;
}

// The folded lines `text` as the graph draws them, and the threads they
// hold (each "process;thread" with its samples, most first): lines grouped
// by thread keep their thread frame when that thread is chosen (the others
// left out), lose it when every thread is.
function regroup(text) {
  if (!$("processes").value.trim()) return { text, threads: [] };
  const chosen = $("thread").value;
  const threads = new Map();
  const kept = [];
  for (const line of text.split("\n")) {
    const first = line.indexOf(";");
    const second = line.indexOf(";", first + 1);
    const space = line.lastIndexOf(" ");
    if (first <= 0 || second <= first || space <= second) {
      if (!chosen) kept.push(line);
      continue;
    }
    const key = line.slice(0, second);
    threads.set(key, (threads.get(key) || 0) + (Number(line.slice(space + 1)) || 0));
    if (!chosen) kept.push(line.slice(0, first) + line.slice(second));
    else if (key === chosen) kept.push(line);
  }
  return { text: kept.join("\n"), threads: [...threads].sort((a, b) => b[1] - a[1]) };
}

// The height the graph may take: what is left of the screen below its
// top, so that a flame graph's root and its processes are seen without
// scrolling the page (a deep graph scrolls inside its box).
function fitGraph() {
  const box = $("flamegraph");
  const top = box.getBoundingClientRect().top + window.scrollY;
  box.style.maxHeight = `${Math.max(320, Math.floor(window.innerHeight - top - 24))}px`;
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
  // The function typed, as callers names it (names.js), or any frame
  // whose name holds the text; not a regular expression.
  chart.setSearchMatch((node, term) => searchMatches(node.data.name, term));
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
    labelFrames();
    offerSources();
  });
  return chart;
}

// A right-click on a frame opens its function's source heatmap, and
// the Source button that of the frame zoomed into.
function offerSources() {
  d3.selectAll("#flamegraph svg g.frame").on("contextmenu", (event, node) => {
    event.preventDefault();
    showSource(functionOfFrame(node.data.name));
  });
  const zoomed = view.zoomed && view.zoomed.at(-1);
  $("frame-source").hidden = !zoomed;
  $("frame-source").textContent = zoomed ? `Source of ${functionOfFrame(zoomed)}` : "Source";
}

// Writes each frame's name on its label at once. d3-flame-graph writes
// it only at the end of a transition, which a redraw, a zoom or a hidden
// tab (no animation frames) can keep from ever running: the frames were
// then drawn blank, as users saw icicles. Which labels show is still the
// chart's choice (frames under 35 pixels have none).
function labelFrames() {
  for (const frame of document.querySelectorAll("#flamegraph svg g.frame")) {
    const label = frame.querySelector("foreignObject div");
    const node = d3.select(frame).datum();
    if (!label || !node) continue;
    label.classList.add("d3-flame-graph-label");
    if (label.textContent !== node.data.name) label.textContent = node.data.name;
  }
}

function draw(tree, diffing) {
  $("legend").hidden = !diffing;
  fitGraph();
  const box = $("flamegraph");
  // The width inside the box's border and scroll bar.
  const width = Math.max(400, (box.clientWidth || 1000) - 16);
  // How far the graph was scrolled from its base, kept when the same kind
  // of graph is drawn again (a live refresh does not scroll it back).
  const inverted = $("icicle").checked;
  const scrolled = !view.chart || view.drawnInverted !== inverted ? 0 : inverted ? box.scrollTop : box.scrollHeight - box.clientHeight - box.scrollTop;
  view.drawnInverted = inverted;
  if (view.chart) view.chart.destroy();
  box.replaceChildren();
  if (tree.value === 0) {
    const empty = document.createElement("p");
    empty.className = "empty";
    empty.textContent = noticeWords(tree);
    box.append(empty);
    view.chart = null;
    return;
  }
  view.chart = makeChart(width).inverted(inverted);
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
  labelFrames();
  offerSources();
  // A flame graph is shown from its base (the root and the processes),
  // an icicle from its top, unless scrolled away from it.
  box.scrollTop = inverted ? scrolled : box.scrollHeight - box.clientHeight - scrolled;
}

// Why the window drew nothing, and what to do.
function emptyWords() {
  const selection = $("processes").value.trim();
  if (selection) {
    return (
      `No process matches “${selection}” in this window: no sample was taken of a process with that pid or command. ` +
      "Check the pid or command (the Processes box takes pids and commands, separated by spaces), " +
      "choose a longer window, or clear the box to see every process."
    );
  }
  return "The window holds no samples: choose a longer window, or one ending later.";
}

// What the page must say above the graph (and in its place when it is
// empty), or "": off-CPU time is not being recorded, or the selection
// matched nothing (see emptyWords).
function noticeWords(tree) {
  const mode = $("mode").value;
  const offcpu = view.daemon && view.daemon.offcpu;
  if (mode !== "cpu" && offcpu && !offcpu.recorded) {
    const shown = mode === "wall" ? "this wall-clock window holds CPU samples only" : "this off-CPU window holds nothing";
    if (offcpu.unavailable) {
      return `Off-CPU time cannot be recorded by this daemon, so ${shown}: ${offcpu.unavailable}. The cpu mode still works.`;
    }
    return (
      `Off-CPU time is not being recorded, so ${shown} (unless it was recorded then): the daemon's offcpu setting is 0, ` +
      "which records waits only while a profile, session, Top or peek asks for them. Set offcpu (a share of every wait, " +
      "e.g. 0.01) in its configuration and reload it, or profile with profilerctl profile --mode offcpu."
    );
  }
  return tree.value === 0 ? emptyWords() : "";
}

// Asks the daemon whether it records off-CPU time (for noticeWords);
// what it cannot say is left unsaid.
async function loadDaemonStatus() {
  try {
    view.daemon = JSON.parse(await fetchText("/api/status"));
  } catch {
    view.daemon = null;
  }
  // For the tests: what the notices were written from.
  document.body.dataset.offcpuRecorded = String(Boolean(view.daemon && view.daemon.offcpu.recorded));
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
  const params = graphParams(chosen.params);
  const diff = $("diff").value;
  if (quietly) document.body.dataset.state = "loading";
  else setStatus("Loading…", "loading");
  const against = diff ? baseWindow(diff) : null;
  let tree;
  let threads;
  let base = null;
  let baseParams = null;
  try {
    const [text] = await Promise.all([fetchText(`/api/query?${params}`), loadDaemonStatus()]);
    const drawn = regroup(text);
    tree = foldedTree(drawn.text);
    threads = drawn.threads;
    if (against) {
      baseParams = graphParams(against.params);
      base = foldedTree(regroup(await fetchText(`/api/query?${baseParams}`)).text);
    }
  } catch (error) {
    if (generation === view.generation) setStatus(error.message, "error");
    return;
  }
  // What a newer load asked for is not overwritten by an older answer.
  if (generation !== view.generation) return;
  listThreads(threads);
  if (baseParams) document.body.dataset.baseWindow = baseParams.toString();
  if (base) markDelta(tree, base);
  view.tree = tree;
  view.diffing = Boolean(base);
  // Above a graph drawn; an empty one says it in its place.
  const notice = tree.value > 0 ? noticeWords(tree) : "";
  $("notice").textContent = notice;
  $("notice").hidden = !notice;
  draw(tree, Boolean(base));
  showSandwich(view.sandwich);
  listFunctionNames(tree);
  await Promise.all([
    loadFunctions(chosen.params, generation),
    loadProcesses(chosen.params, generation),
    loadTimeline(generation),
  ]);
  if (generation !== view.generation) return;
  let compared = "";
  if (base) compared = `, compared with ${base.value} samples of ${against.words} (red: more, blue: fewer, scaled to the same total)`;
  else if (diff) compared = "; drag on the timeline the range to compare with";
  setStatus(
    `${tree.value} samples, ${chosen.words}, ` +
      `${$("processes").value.trim() || "every process"}${$("thread").value ? ` (thread ${$("thread").value.split(";")[1]})` : ""}, ` +
      `${$("mode").value}${compared} (loaded ${clock(Date.now())})`,
    "loaded",
  );
  document.body.dataset.samples = String(tree.value);
  document.body.dataset.window = params.toString();
  document.body.dataset.loads = String(++view.loads);
}

// The names the sandwich offers as one types: the drawn functions of
// most samples.
function listFunctionNames(tree) {
  const totals = new Map();
  const walk = (node) => {
    for (const child of node.children) {
      totals.set(child.name, (totals.get(child.name) || 0) + child.value);
      walk(child);
    }
  };
  walk(tree);
  const list = $("function-names");
  list.replaceChildren();
  for (const [name] of [...totals].sort((a, b) => b[1] - a[1]).slice(0, 300)) {
    const option = document.createElement("option");
    option.value = name;
    list.append(option);
  }
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
  labelFrames();
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

// A control changed: a window chosen by length replaces a dragged one.
function changed(event) {
  if (event && ["range", "until"].includes(event.target.id)) view.brushed = null;
  // Another selection: its threads are others.
  if (!event || event.target.id === "processes") $("thread").value = "";
  reload();
}

function start() {
  // The forms are never sent: their controls act as they change. (The
  // Content-Security-Policy allows no inline handler, hence here.)
  for (const form of document.querySelectorAll("form")) {
    form.addEventListener("submit", (event) => event.preventDefault());
  }
  for (const id of ["range", "until", "mode", "diff", "processes", "interpreter", "thread"]) {
    $(id).addEventListener("change", changed);
  }
  $("reload").addEventListener("click", () => reload());
  $("search").addEventListener("input", search);
  $("icicle").addEventListener("change", () => view.tree && draw(view.tree, view.diffing));
  $("reset-zoom").addEventListener("click", () => {
    view.zoomed = null;
    if (view.chart) view.chart.resetZoom();
    offerSources();
  });
  $("frame-source").addEventListener("click", () => view.zoomed && showSource(functionOfFrame(view.zoomed.at(-1))));
  $("sandwich-source-button").addEventListener("click", () => view.sandwich && showSource(functionOfFrame(view.sandwich)));
  startSource();
  for (const choice of document.querySelectorAll('input[name="drag"]')) {
    choice.addEventListener("change", () => loadTimeline(view.generation));
  }
  $("peek-button").addEventListener("click", peekNow);
  $("process-filter").addEventListener("input", showProcesses);
  $("sandwich-function").addEventListener("change", () => showSandwich($("sandwich-function").value.trim()));
  // The graph is drawn again to the new width, and fits the new height.
  let resized = null;
  window.addEventListener("resize", () => {
    clearTimeout(resized);
    resized = setTimeout(() => view.tree && draw(view.tree, view.diffing), 200);
  });
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
