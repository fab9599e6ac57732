// profilerd's web view: the timeline of the held history (loaded before
// app.js, which calls loadTimeline), and the one way the page writes a
// time of day (24-hour, as the axis does).
"use strict";

// The timeline's height, and the room its axes take.
const TIMELINE = { height: 96, left: 58, right: 28, bottom: 16, top: 6 };

// A time of day as the whole page writes it: 24-hour, with seconds.
const clockFormat = d3.timeFormat("%H:%M:%S");
function clock(ms) {
  return clockFormat(new Date(ms));
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

// What the timeline's bars count, per second, in the chosen mode (the
// timeline's tooltip says it whole); and as the y axis writes it, short
// enough for its height.
function timelineUnit() {
  return `${COUNTED[$("mode").value] || "samples"}/s`;
}
const AXIS_UNIT = { cpu: "samples/s", offcpu: "periods/s", wall: "samples+periods/s" };

// The held history's samples per second (of the chosen processes, in the
// chosen mode), with a y axis in that unit and a brush to choose a window.
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
  const { height, left, right, bottom, top } = TIMELINE;
  const base = height - bottom;
  box.replaceChildren();
  if (spans.length === 0) {
    $("timeline-note").textContent = "The daemon holds no samples yet: wait a few seconds, it drains every second or so.";
    return;
  }
  const start = spans[0].start_ms;
  const end = Math.max(spans[spans.length - 1].end_ms, timeline.now_ms);
  document.body.dataset.timeline = `${start},${end}`;
  const x = d3.scaleLinear().domain([start, end]).range([left, width - right]);
  // Bins of at least a second, at most one per 3 pixels, up to the last
  // drain (the time since holds no samples yet).
  const held = spans[spans.length - 1].end_ms;
  const plotted = width - right - left;
  const count = Math.max(1, Math.min(Math.floor(((held - start) / (end - start)) * (plotted / 3)), Math.ceil((held - start) / 1000)));
  const bins = binned(spans, start, held, count);
  const y = d3
    .scaleLinear()
    .domain([0, d3.max(bins, (bin) => bin.rate) || 1])
    .nice(3)
    .range([base, top]);
  const unit = timelineUnit();
  const svg = d3.select(box).append("svg").attr("width", width).attr("height", height);
  box.title =
    `${$("mode").selectedOptions[0].text}: ${unit} of ${$("processes").value.trim() || "every process"} ` +
    "in the history the daemon holds; drag to choose a window";
  svg
    .selectAll("rect.bar")
    .data(bins)
    .join("rect")
    .attr("class", "bar")
    .attr("x", (bin) => x(bin.start_ms))
    .attr("width", (bin) => Math.max(1, x(bin.end_ms) - x(bin.start_ms) - 0.5))
    .attr("y", (bin) => y(bin.rate))
    .attr("height", (bin) => base - y(bin.rate))
    .append("title")
    .text((bin) => `${clock(bin.start_ms)}–${clock(bin.end_ms)}: ${bin.rate.toFixed(0)} ${unit}`);
  svg
    .append("g")
    .attr("class", "x-axis")
    .attr("transform", `translate(0,${base})`)
    .call(d3.axisBottom(d3.scaleTime().domain([new Date(start), new Date(end)]).range([left, width - right])).ticks(8).tickFormat(clockFormat));
  svg
    .append("g")
    .attr("class", "y-axis")
    .attr("transform", `translate(${left},0)`)
    .call(d3.axisLeft(y).ticks(3).tickFormat((rate) => (rate >= 1000 ? d3.format("~s")(rate) : d3.format("~g")(rate))));
  // The unit, written along the y axis.
  svg
    .append("text")
    .attr("class", "y-unit")
    .attr("transform", `translate(11,${(base + top) / 2}) rotate(-90)`)
    .attr("text-anchor", "middle")
    .text(AXIS_UNIT[$("mode").value] || unit);
  const brush = d3
    .brushX()
    .extent([
      [left, top],
      [width - right, base],
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
      .attr("y", top)
      .attr("height", base - top);
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
