// profilerd's web view: its tables (loaded before app.js, which calls
// them): the window's functions (each with a button that opens its
// source heatmap, source.js's), the sandwich of one function (its callers
// and callees), the threads of the selected processes, and the window's
// processes of the selection.
"use strict";

const FUNCTIONS_SHOWN = 25;
// The processes the table lists at most; a line says how many more the
// filter finds.
const PROCESSES_SHOWN = 25;
// The callers and callees the sandwich lists at most, each.
const SANDWICH_SHOWN = 15;

// A row of `cells` (text, or [text, class]) in `body`.
function row(body, cells) {
  const line = document.createElement("tr");
  for (const cell of cells) {
    const [text, className] = Array.isArray(cell) ? cell : [cell, null];
    const element = document.createElement("td");
    element.textContent = String(text);
    if (className) element.className = className;
    line.append(element);
  }
  body.append(line);
  return line;
}

// A line spanning the table `body` belongs to, saying `text`.
function note(body, text, columns) {
  const line = document.createElement("tr");
  line.className = "note";
  const cell = document.createElement("td");
  cell.colSpan = columns;
  cell.textContent = text;
  line.append(cell);
  body.append(line);
  return line;
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
  let failed = null;
  try {
    ranked = JSON.parse(await fetchText(`/api/functions?${params}`));
  } catch (error) {
    ranked = { samples: 0, functions: [] };
    failed = error.message;
  }
  if (generation !== view.generation) return;
  const rows = ranked.functions;
  if (view.functionsSort === "name") rows.sort((a, b) => a.function.localeCompare(b.function));
  if (view.functionsSort === "module") rows.sort((a, b) => a.module.localeCompare(b.module));
  const counted = COUNTED[$("mode").value] || "samples";
  $("functions-unit").textContent =
    `Self: ${counted} in the function itself; total: with the functions it calls; ` +
    `the share is of the window's ${ranked.samples}. A click searches for the function and shows its callers and callees.`;
  const body = $("functions").querySelector("tbody");
  body.replaceChildren();
  const total = ranked.samples || 1;
  const share = (count) => `${count} (${((100 * count) / total).toFixed(1)}%)`;
  if (failed) note(body, `The daemon did not list the functions: ${failed}`, 5);
  else if (rows.length === 0) note(body, "No functions: the window holds no samples of the selection; choose a longer window or other processes.", 5);
  for (const ranked of rows) {
    // The module's file name; its whole path in the row's tooltip.
    const module = ranked.module.split("/").pop() || ranked.module;
    const line = row(body, [ranked.function, [module, "module"], share(ranked.self), share(ranked.total)]);
    line.title = ranked.module;
    // Kernel code and markers ("[lost: …]") have no source lines here.
    const cell = line.insertCell();
    if (ranked.module !== "[kernel]" && !ranked.function.startsWith("[")) cell.append(sourceButton(ranked.function));
    line.addEventListener("click", () => {
      $("search").value = ranked.function;
      search();
      showSandwich(ranked.function);
    });
  }
}

// The outermost frames of `tree` of the function `name` (names.js's rule:
// malloc finds __GI___libc_malloc; a recursive function's inner calls are
// counted in its outer one), each with its caller's name.
function outermost(tree, name) {
  const found = [];
  const walk = (node, caller) => {
    if (node !== tree && namesFunction(frameFunction(node.name), name)) {
      found.push({ node, caller });
      return;
    }
    for (const child of node.children) walk(child, node === tree ? "(the root)" : node.name);
  };
  walk(tree, null);
  return found;
}

// The sandwich of `name` in the drawn tree: its callers (with the samples
// through each) above, its callees below, as speedscope and Pyroscope show
// it. `name` empty: the sandwich is closed.
function showSandwich(name) {
  view.sandwich = name || null;
  $("sandwich-function").value = name || "";
  const panel = $("sandwich");
  const callers = $("sandwich-callers").querySelector("tbody");
  const callees = $("sandwich-callees").querySelector("tbody");
  callers.replaceChildren();
  callees.replaceChildren();
  panel.dataset.function = name || "";
  // Its tables only once a function is picked.
  for (const table of panel.querySelectorAll("table")) table.hidden = !name;
  $("sandwich-source").hidden = true;
  if (!name || !view.tree) {
    $("sandwich-summary").textContent = "Pick a function (type its name, or click it in the functions table) to see who calls it and what it calls.";
    return;
  }
  const found = outermost(view.tree, name);
  const frames = found.map((frame) => frame.node);
  const total = frames.reduce((sum, node) => sum + node.value, 0);
  const own = frames.reduce((sum, node) => sum + node.self, 0);
  const counted = COUNTED[$("mode").value] || "samples";
  if (frames.length === 0) {
    $("sandwich-summary").textContent =
      `No frame of ${name} is drawn in this window: check the name (a function's whole name, its last :: parts, or another of the C library's names of it), ` +
      "or choose a longer window or other processes.";
    return;
  }
  $("sandwich-summary").textContent =
    `${name}: ${total} ${counted} in it and what it calls (${own} in it alone), ` +
    `${((100 * total) / (view.tree.value || 1)).toFixed(1)}% of the window.`;
  $("sandwich-source").hidden = false;
  const byName = (pairs) => {
    const sums = new Map();
    for (const [key, count] of pairs) sums.set(key, (sums.get(key) || 0) + count);
    return [...sums].sort((a, b) => b[1] - a[1]);
  };
  const fill = (body, entries, what) => {
    if (entries.length === 0) note(body, what, 2);
    for (const [caller, count] of entries.slice(0, SANDWICH_SHOWN)) {
      const line = row(body, [caller, `${count} (${((100 * count) / (total || 1)).toFixed(1)}%)`]);
      line.dataset.name = caller;
      line.dataset.samples = String(count);
      line.addEventListener("click", () => showSandwich(caller));
    }
    if (entries.length > SANDWICH_SHOWN) note(body, `${entries.length - SANDWICH_SHOWN} more, each with fewer ${counted}`, 2);
  };
  fill(
    callers,
    byName(found.map((frame) => [frame.caller || "(the root)", frame.node.value])),
    `${name} is called by nothing drawn: it is where stacks start.`,
  );
  fill(
    callees,
    byName(frames.flatMap((node) => node.children.map((child) => [child.name, child.value]))),
    `${name} calls nothing drawn: its ${counted} are its own.`,
  );
}

// The threads of the selected processes, read from the graph's lines
// grouped by thread ("process-PID;thread-TID;…"), for the thread choice.
function listThreads(threads) {
  const choice = $("thread");
  const chosen = choice.value;
  choice.replaceChildren();
  const every = document.createElement("option");
  every.value = "";
  every.textContent = threads.length ? `every thread (${threads.length})` : "every thread";
  choice.append(every);
  for (const [key, samples] of threads) {
    const [process, thread] = key.split(";");
    const option = document.createElement("option");
    option.value = key;
    option.textContent = `${thread} of ${process} (${samples})`;
    choice.append(option);
  }
  choice.value = threads.some(([key]) => key === chosen) ? chosen : "";
  $("thread-choice").hidden = !$("processes").value.trim();
}

async function loadProcesses(window, generation) {
  let processes;
  let failed = null;
  try {
    // Of the selection, as the graph is.
    processes = JSON.parse(await fetchText(`/api/processes?${reportParams(window, null)}`));
  } catch (error) {
    processes = [];
    failed = error.message;
  }
  if (generation !== view.generation) return;
  view.processes = processes;
  view.processesFailed = failed;
  // The choices offered as one types a selection: every process, so they
  // are kept from the last window read without one.
  if (!$("processes").value.trim()) {
    const options = $("process-list");
    options.replaceChildren();
    for (const process of processes.slice(0, 200)) {
      const option = document.createElement("option");
      option.value = String(process.pid);
      option.label = `${process.command} (uid ${process.uid}) ${process.cgroup}`;
      options.append(option);
    }
  }
  showProcesses();
}

function showProcesses() {
  $("processes-table").querySelector("th:last-child").textContent = COUNTED[$("mode").value] || "samples";
  const filter = $("process-filter").value.trim().toLowerCase();
  const body = $("processes-table").querySelector("tbody");
  body.replaceChildren();
  const matching = view.processes.filter(
    (process) =>
      !filter ||
      [String(process.pid), process.command, `uid ${process.uid}`, String(process.uid), process.cgroup].some((text) =>
        text.toLowerCase().includes(filter),
      ),
  );
  const selection = $("processes").value.trim();
  if (view.processesFailed) note(body, `The daemon did not list the processes: ${view.processesFailed}`, 6);
  else if (view.processes.length === 0 && selection) {
    note(body, `No process matching “${selection}” was sampled in this window: clear the Processes box to list every process.`, 6);
  } else if (view.processes.length === 0) note(body, "No process was sampled in this window: choose a longer one.", 6);
  else if (matching.length === 0) note(body, `None of the ${view.processes.length} processes matches the filter “${filter}”.`, 6);
  for (const process of matching.slice(0, PROCESSES_SHOWN)) {
    const line = row(body, [process.pid, process.command, process.uid, process.cgroup, process.threads, process.samples]);
    line.dataset.pid = String(process.pid);
    line.addEventListener("click", () => {
      $("processes").value = String(process.pid);
      $("peek-pid").value = String(process.pid);
      changed();
    });
  }
  const more = matching.length - PROCESSES_SHOWN;
  if (more > 0) {
    note(body, `${more} more, each with fewer ${COUNTED[$("mode").value] || "samples"}: type in the filter above to find one.`, 6).classList.add(
      "more",
    );
  }
  const count = view.processes.length;
  const of = selection ? ` of the selection “${selection}”` : "";
  $("processes-summary").textContent = `${count} ${count === 1 ? "process" : "processes"}${of} sampled in the window, most ${COUNTED[$("mode").value] || "samples"} first.`;
}
