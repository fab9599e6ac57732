// profilerd's web view: the source heatmap of one function (loaded before
// app.js, after tables.js): its source files with the samples of each line
// beside it (Self: taken at the line; Total: with the function at that
// line anywhere in the stack), each row coloured by its share of the
// hottest line's, lines without samples shown two around those with, the
// hottest line in view. The daemon reads the text only under its
// http_source_dirs; otherwise it says why, and the counts are shown by
// line number.
"use strict";

// A row's colour: the heat (its Self, against the hottest line's) as the
// opacity of one hue, light enough for the text to stay black.
const HEAT = [214, 64, 20];
const HEAT_MAX_ALPHA = 0.55;
// Total's bar, in the Total cell.
const TOTAL = [70, 110, 200];

// Without a Python frame's " (file:line)": the function's own name.
function functionOfFrame(name) {
  const python = /^(.*) \([^()]*:\d+\)$/.exec(name);
  return python ? python[1] : name;
}

// Opens the heatmap of `name` in the chosen window and selection.
async function showSource(name) {
  const dialog = $("source-view");
  const generation = ++view.sourceGeneration;
  const params = reportParams(chosenWindow().params, null);
  params.set("function", name);
  dialog.dataset.function = name;
  dialog.dataset.state = "loading";
  $("source-title").textContent = name;
  $("source-summary").textContent = "Loading…";
  $("source-files").replaceChildren();
  if (!dialog.open) dialog.showModal();
  let heat;
  try {
    heat = JSON.parse(await fetchText(`/api/source?${params}`));
  } catch (error) {
    if (generation !== view.sourceGeneration) return;
    $("source-summary").textContent = error.message;
    dialog.dataset.state = "error";
    return;
  }
  if (generation !== view.sourceGeneration) return;
  drawSource(heat);
  dialog.dataset.window = params.toString();
  dialog.dataset.state = "loaded";
  // For the tests: how many heatmaps were drawn.
  dialog.dataset.loads = String(Number(dialog.dataset.loads || 0) + 1);
}

// The heatmap `heat` (/api/source's answer) in the dialog.
function drawSource(heat) {
  const counted = COUNTED[$("mode").value] || "samples";
  const share = (count) => `${((100 * count) / (heat.window_samples || 1)).toFixed(1)}%`;
  const module = heat.module ? ` in ${heat.module.split("/").pop()}` : "";
  let hottest = "";
  if (heat.hottest) {
    const file = heat.hottest.file.split("/").pop();
    hottest = ` The hottest line is ${file}:${heat.hottest.line}, with ${heat.hottest.self} in it (marked ▶).`;
  }
  $("source-title").textContent = `${heat.function}${module}`;
  $("source-title").title = heat.module || "";
  $("source-summary").textContent =
    `${heat.samples} ${counted} with it in their stack (${share(heat.samples)} of the window), ` +
    `${heat.self} in it itself.${hottest} Self: ${counted} at the line (code inlined into it included); ` +
    `Total: with the function at that line anywhere in the stack; a row's colour deepens with its Self.`;
  const files = $("source-files");
  files.replaceChildren();
  const hottestSelf = Math.max(1, ...heat.files.flatMap((file) => file.rows.map((row) => row.self)));
  const hottestTotal = Math.max(1, ...heat.files.flatMap((file) => file.rows.map((row) => row.total)));
  for (const file of heat.files) files.append(sourceFile(file, heat.hottest, hottestSelf, hottestTotal));
  if (heat.addresses.length > 0) files.append(addressList(heat.addresses));
  const hot = files.querySelector("tr.hottest");
  if (hot) hot.scrollIntoView({ block: "center" });
}

// One file of the heatmap: its path, why its text is withheld (if it
// is), and its rows, a "⋮" where lines are left out.
function sourceFile(file, hottest, hottestSelf, hottestTotal) {
  const section = document.createElement("section");
  section.className = "source-file";
  section.dataset.path = file.path;
  section.dataset.textShown = String(file.text_shown);
  const heading = document.createElement("h3");
  heading.textContent = file.path;
  section.append(heading);
  if (file.withheld) {
    const reason = document.createElement("p");
    reason.className = "withheld";
    reason.textContent = file.withheld;
    section.append(reason);
  }
  if (file.lines_past_end.length > 0) {
    const past = document.createElement("p");
    past.className = "hint";
    past.textContent = `Lines ${file.lines_past_end.join(", ")} have samples but are past the file's end: it changed since the program was built.`;
    section.append(past);
  }
  const table = document.createElement("table");
  table.className = "heatmap";
  const head = table.createTHead().insertRow();
  for (const title of ["Self", "Total", "Line", file.text_shown ? "Source" : ""]) {
    const cell = document.createElement("th");
    cell.textContent = title;
    head.append(cell);
  }
  const body = table.createTBody();
  let previous = null;
  for (const row of file.rows) {
    if (previous !== null && row.line > previous + 1) {
      const gap = body.insertRow();
      gap.className = "gap";
      const cell = gap.insertCell();
      cell.colSpan = 4;
      const skipped = row.line - previous - 1;
      cell.textContent = file.text_shown ? `⋮ ${skipped} ${skipped === 1 ? "line" : "lines"}` : "⋮";
    }
    previous = row.line;
    body.append(sourceRow(row, file, hottest, hottestSelf, hottestTotal));
  }
  section.append(table);
  return section;
}

// One line: Self, Total (with a bar of its share of the most), its number
// and text, coloured by its heat.
function sourceRow(row, file, hottest, hottestSelf, hottestTotal) {
  const line = document.createElement("tr");
  line.dataset.line = String(row.line);
  line.dataset.self = String(row.self);
  line.dataset.total = String(row.total);
  const cells = [row.self || "", row.total || "", row.line, row.text === null ? "" : row.text];
  for (const [index, text] of cells.entries()) {
    const cell = line.insertCell();
    cell.textContent = String(text);
    cell.className = ["self", "total", "number", "text"][index];
  }
  if (row.self > 0) {
    const heat = row.self / hottestSelf;
    line.style.backgroundColor = `rgba(${HEAT.join(", ")}, ${(0.06 + heat * (HEAT_MAX_ALPHA - 0.06)).toFixed(3)})`;
  }
  if (row.total > 0) {
    const width = Math.max(2, Math.round((100 * row.total) / hottestTotal));
    const bar = `rgba(${TOTAL.join(", ")}, 0.3)`;
    line.cells[1].style.backgroundImage = `linear-gradient(to right, ${bar} ${width}%, transparent ${width}%)`;
  }
  if (hottest && hottest.file === file.path && hottest.line === row.line) {
    line.classList.add("hottest");
    line.cells[2].textContent = `▶ ${row.line}`;
    line.title = "the hottest line";
  }
  return line;
}

// The function's samples at addresses without line information.
function addressList(addresses) {
  const section = document.createElement("section");
  section.className = "source-file";
  const heading = document.createElement("h3");
  heading.textContent = "Addresses without line information (built without -g; objdump -d shows the instructions)";
  section.append(heading);
  const table = document.createElement("table");
  table.className = "heatmap";
  const body = table.createTBody();
  for (const address of addresses) row(body, [address.self, address.address]);
  section.append(table);
  return section;
}

// A "Source" button that opens the heatmap of `name`.
function sourceButton(name) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "source-button";
  button.textContent = "Source";
  button.title = `${name}'s source, with the samples of each line`;
  button.addEventListener("click", (event) => {
    event.stopPropagation();
    showSource(name);
  });
  return button;
}

function startSource() {
  $("source-close").addEventListener("click", () => $("source-view").close());
  // A click on the backdrop (outside the dialog's box) closes it too.
  $("source-view").addEventListener("click", (event) => {
    if (event.target === $("source-view")) $("source-view").close();
  });
}
