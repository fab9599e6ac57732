// Drives a browser, headless, through profilerd's web view for the
// end-to-end tests (profiler-daemon/tests/end_to_end/web_view.rs), and
// prints what it saw as one JSON object; the Rust test judges it. The
// browser is Debian's Chromium (over the DevTools protocol) or Debian's
// Firefox ESR (over WebDriver BiDi), both driven by puppeteer-core.
//
// node view.mjs SCENARIO JSON_ARGUMENTS
//   view:    { browser, url, hot, zoom, peekPid, chainPid, caller,
//            sandwich, callee, thread, history, screenshots }
//            loads /, waits for `hot` in the flame graph, reads where the
//            root and the process frames lie on the first screen, turns
//            the graph into an icicle and counts its labels, sees it
//            refresh live, searches `hot`, zooms into the frame `zoom` and
//            turns the graph into an icicle, sends peekPid SIGUSR1 and
//            waits for its peek in the list, peeks with the page's button,
//            drags a past window on the timeline, compares it with the
//            window before and with a range dragged on the timeline; then
//            selects chainPid (the processes table, the sandwich of
//            `sandwich`), peekPid's thread named `thread`, a process that
//            does not exist, and the off-CPU mode. Screenshots of each
//            are written as SCREENSHOTS/BROWSER-MODE.png.
//   heatmap: { browser, url, pid, function, sourceFile, screenshots }
//            (heatmap.mjs) chooses process pid, opens the source heatmap
//            of `function` from the functions table, the sandwich and a
//            frame of the flame graph, and with sourceFile unreadable.
//   refused: { browser, url }         loads / from a listener that
//            refuses this client and reads what the page says.
//   crossSite: { browser, daemon, pid }  serves, from another site
//            (http://localhost:PORT/, the daemon being at 127.0.0.1), a
//            page that asks the daemon to profile and to peek at pid (an
//            image, a script, fetches in no-cors mode, a form posted into a
//            frame) and records the daemon's answers.
//   python:  { browser, url, pid, hot, screenshot }  chooses a Python
//            process and reads its frames with and without the
//            interpreter's (other-scenarios.mjs).
//   functionNames: { browser, url, pid, name }  chooses process pid,
//            searches the function `name` and shows its sandwich
//            (other-scenarios.mjs).
// Every scenario records the page's Content-Security-Policy violations.
// The helpers the scenarios share are page-tools.mjs's.
import { pathToFileURL } from "node:url";
import path from "node:path";

import { heatmap } from "./heatmap.mjs";
import { anotherSite, crossSite, functionNames, python, refused } from "./other-scenarios.mjs";
import {
  WAIT_MS,
  attribute,
  drawnFrames,
  eventually,
  fill,
  loaded,
  rows,
  text,
  until,
  untilWithin,
} from "./page-tools.mjs";

// puppeteer-core as `cargo xtask test` installed it (npm ci of the lock
// file beside this script, into the target directory).
const modules = process.env.PROFILERD_TEST_NODE_MODULES;
if (!modules) throw new Error("PROFILERD_TEST_NODE_MODULES is not set: run the tests with cargo xtask test");
const { default: puppeteer } = await import(
  pathToFileURL(path.join(modules, "puppeteer-core", "lib", "esm", "puppeteer", "puppeteer-core.js")).href
);

const [scenario, argumentsJson] = process.argv.slice(2);
const args = JSON.parse(argumentsJson);
// The screen the page must fit its graph's base in.
const VIEWPORT = { width: 1600, height: 1000 };

// Each browser as Debian installs it.
const BROWSERS = {
  chromium: {
    browser: "chrome",
    executablePath: "/usr/bin/chromium",
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  },
  firefox: {
    browser: "firefox",
    executablePath: "/usr/bin/firefox-esr",
    args: [],
    // No update checks, telemetry or other calls home.
    extraPrefsFirefox: {
      "app.update.enabled": false,
      "network.captive-portal-service.enabled": false,
      "network.connectivity-service.enabled": false,
      "datareporting.policy.dataSubmissionEnabled": false,
      "toolkit.telemetry.enabled": false,
    },
  },
};
const chosen = BROWSERS[args.browser];
if (!chosen) throw new Error(`no browser ${args.browser}: chromium or firefox`);

const browser = await puppeteer.launch({
  ...chosen,
  headless: true,
  acceptInsecureCerts: true,
  defaultViewport: VIEWPORT,
});
const seen = { scenario, browser: await browser.version(), console: [] };
// The page's requests not answered yet, and when each was made.
const pending = new Map();
try {
  const page = await browser.newPage();
  page.on("console", (message) => seen.console.push(`${message.type()}: ${message.text()}`));
  page.on("pageerror", (error) => seen.console.push(`pageerror: ${error.message}`));
  // Every request the page makes, to show it asks nothing of the internet,
  // and (until answered) when it was made.
  seen.requests = [];
  page.on("request", (request) => {
    seen.requests.push(request.url());
    pending.set(request, Date.now());
  });
  seen.responses = [];
  page.on("response", (response) => seen.responses.push([response.url(), response.status()]));
  // How long each of the daemon's answers took.
  seen.timings = [];
  page.on("requestfinished", (request) => {
    seen.timings.push([request.url().replace(/^.*\/\/[^/]*/, ""), Date.now() - pending.get(request)]);
    pending.delete(request);
  });
  seen.failed = [];
  page.on("requestfailed", (request) => {
    seen.failed.push([request.url(), request.failure() && request.failure().errorText]);
    pending.delete(request);
  });
  // What the page's Content-Security-Policy blocked.
  await page.evaluateOnNewDocument(() => {
    window.cspViolations = [];
    document.addEventListener("securitypolicyviolation", (event) =>
      window.cspViolations.push(`${event.violatedDirective}: ${event.blockedURI} ${event.sample}`),
    );
  });
  if (scenario === "crossSite") args.url = await anotherSite(args.daemon, args.pid, seen);
  await page.goto(args.url, { waitUntil: "load" });
  if (scenario === "view") await view(page);
  else if (scenario === "refused") await refused(page, args, seen);
  else if (scenario === "crossSite") await crossSite(page, args, seen);
  else if (scenario === "python") await python(page, args, seen);
  else if (scenario === "heatmap") await heatmap(page, args, seen);
  else if (scenario === "functionNames") await functionNames(page, args, seen);
  else throw new Error(`no scenario ${scenario}`);
  seen.cspViolations = await page.evaluate(() => window.cspViolations);
} catch (error) {
  seen.error = String(error && error.stack ? error.stack : error);
  seen.pendingAtError = [...pending].map(([request, at]) => [request.url(), `${Date.now() - at} ms`]);
  // What the page said when it failed.
  const page = (await browser.pages()).at(-1);
  seen.pageAtError = await page
    .evaluate(() => ({
      state: document.body.dataset.state,
      status: document.getElementById("status").textContent,
      peekReport: document.getElementById("peek-report").textContent.slice(0, 2000),
    }))
    .catch((error) => String(error));
} finally {
  await browser.close();
}
console.log(JSON.stringify(seen));

// The fifth of the timeline (as fractions of its width) to drag as a past
// window: the middle one, or the nearest earlier one in which the window
// and the window before it each hold, well inside, the middle of a span of
// the held history with samples. (A window reads the spans whose middle it
// holds; a daemon starved of CPU, as a debug build beside two browsers can
// be, drains late and holds spans longer than a fifth.)
async function pastFifth(page) {
  const [start, end] = (await attribute(page, "body", "data-timeline")).split(",").map(Number);
  const { spans } = await page.evaluate(async () => (await fetch("/api/timeline")).json());
  const middles = spans.filter((span) => span.samples > 0).map((span) => (span.start_ms + span.end_ms) / 2);
  const at = (fraction) => start + fraction * (end - start);
  const holds = (from, to) => {
    const margin = (to - from) / 5;
    return middles.some((middle) => middle > from + margin && middle < to - margin);
  };
  for (let from = 0.4; from >= 0.2; from -= 0.02) {
    const [a, b] = [at(from), at(from + 0.2)];
    if (holds(a, b) && holds(2 * a - b, a)) return [from, from + 0.2];
  }
  throw new Error(`no fifth of the timeline and the fifth before it both hold samples: ${JSON.stringify(spans)}`);
}

// Drags on the timeline from `from` to `to`, fractions of its width (of
// the area its times are drawn on, right of its y axis).
async function dragOnTimeline(page, from, to) {
  // In view: the peeks (below the graph) may have scrolled it away.
  await page.evaluate(() => window.scrollTo(0, 0));
  const timeline = await (await page.$("#timeline .brush .overlay")).boundingBox();
  const y = timeline.y + timeline.height / 3;
  await page.mouse.move(timeline.x + timeline.width * from, y);
  await page.mouse.down();
  await page.mouse.move(timeline.x + timeline.width * ((from + to) / 2), y, { steps: 8 });
  await page.mouse.move(timeline.x + timeline.width * to, y, { steps: 8 });
  await page.mouse.up();
}

// A screenshot of what the page shows now (the first screen, or the
// whole page), as SCREENSHOTS/BROWSER-MODE.png.
async function screenshot(page, mode, fullPage = false) {
  await page.screenshot({ path: path.join(args.screenshots, `${args.browser}-${mode}.png`), fullPage });
}

// Where the root frame and the frames under it (the processes) are drawn,
// on the screen as it is scrolled now, and the screen's size.
function baseRects(page) {
  return page.evaluate(() => {
    const rect = (element) => {
      const box = element.querySelector("rect").getBoundingClientRect();
      return { name: d3.select(element).datum().data.name, top: box.top, bottom: box.bottom, left: box.left, right: box.right };
    };
    const frames = [...document.querySelectorAll("#flamegraph svg g.frame")];
    return {
      viewport: [window.innerWidth, window.innerHeight],
      scrollY: window.scrollY,
      pageHeight: document.documentElement.scrollHeight,
      root: frames.filter((element) => d3.select(element).datum().depth === 0).map(rect),
      processes: frames.filter((element) => d3.select(element).datum().depth === 1).map(rect),
    };
  });
}

// The frames wide enough for a label (d3-flame-graph labels those of 35
// pixels or more) and the labels drawn on them, read from the page.
function labelCounts(page) {
  return page.evaluate(() => {
    const frames = [...document.querySelectorAll("#flamegraph svg g.frame")].filter(
      (element) => Number(element.querySelector("rect").getAttribute("width")) >= 35,
    );
    const labels = frames
      .map((element) => element.querySelector(".d3-flame-graph-label"))
      .filter((label) => label && label.style.display !== "none" && label.textContent.trim() && label.getBoundingClientRect().width > 0);
    return { wide: frames.length, labelled: labels.length, texts: labels.slice(0, 12).map((label) => label.textContent) };
  });
}

// Waits (a few seconds at most: its transition) until every wide frame is
// labelled; the counts either way.
async function labelsOnceDrawn(page) {
  await untilWithin(5000, page, () => {
    const frames = [...document.querySelectorAll("#flamegraph svg g.frame")].filter(
      (element) => Number(element.querySelector("rect").getAttribute("width")) >= 35,
    );
    return frames.length > 0 && frames.every((element) => element.querySelector(".d3-flame-graph-label").textContent.trim());
  }).catch(() => {});
  return labelCounts(page);
}

async function view(page) {
  // The hot function, drawn from the daemon's samples.
  await until(
    page,
    (hot) => [...document.querySelectorAll("#flamegraph svg g title")].some((title) => title.textContent.startsWith(hot)),
    args.hot,
  );
  seen.frames = (await drawnFrames(page)).filter((frame) => frame.chain.at(-1) === args.hot);
  seen.status = await text(page, "#status");
  await loaded(page);

  // The timeline's axes: times of day, 24-hour as the status line's, and
  // the rate it plots with its unit.
  seen.timelineAxes = await page.evaluate(() => ({
    times: [...document.querySelectorAll("#timeline .x-axis .tick text")].map((tick) => tick.textContent),
    rates: [...document.querySelectorAll("#timeline .y-axis .tick text")].map((tick) => tick.textContent),
    unit: document.querySelector("#timeline .y-unit")?.textContent,
  }));

  // The first screen shows the graph's base: the root and the processes.
  seen.firstScreen = await baseRects(page);
  seen.flameLabels = await labelsOnceDrawn(page);
  await screenshot(page, "flame");
  await screenshot(page, "flame-page", true);
  // The icicle, on the page as it first came, labels its frames too.
  await page.click("#icicle");
  await until(page, () => document.querySelector("#flamegraph svg g.frame"));
  seen.icicleLabels = await labelsOnceDrawn(page);
  seen.icicleScreen = await baseRects(page);
  await screenshot(page, "icicle");
  await page.click("#icicle");
  await until(page, () => document.querySelector("#flamegraph svg g.frame"));

  // A window ending now is loaded again without being asked.
  await loaded(page);
  const loads = Number(await attribute(page, "body", "data-loads"));
  await until(page, (loads) => Number(document.body.dataset.loads) > loads, loads);
  seen.liveStatus = await text(page, "#status");

  // A search highlights it and says its share.
  await fill(page, "#search", args.hot);
  await until(page, () => document.getElementById("matched").dataset.share);
  seen.matched = await text(page, "#matched");
  seen.matchedShare = Number(await attribute(page, "#matched", "data-share"));
  const frames = await drawnFrames(page);
  seen.highlighted = frames.filter((frame) => frame.highlighted).map((frame) => ({
    name: frame.chain.at(-1),
    fill: frame.fill,
  }));
  await loaded(page);
  await screenshot(page, "search");

  // A click on a frame zooms into it (it spans the graph's width), and the
  // zoom outlives a live refresh; the icicle switch turns the graph upside
  // down; Reset zoom shows everything again.
  seen.widthBefore = await frameWidth(page, args.zoom);
  await page.evaluate((name) => {
    const frame = [...document.querySelectorAll("#flamegraph svg g.frame")].find(
      (element) => d3.select(element).datum().data.name === name,
    );
    frame.dispatchEvent(new MouseEvent("click", { bubbles: true }));
  }, args.zoom);
  await eventually(async () => (await frameWidth(page, args.zoom)) > 0.99);
  const afterZoom = Number(await attribute(page, "body", "data-loads"));
  await until(page, (loads) => Number(document.body.dataset.loads) > loads, afterZoom);
  seen.zoomWidth = await frameWidth(page, args.zoom);
  seen.zoomMatched = await text(page, "#matched");
  seen.rootTopBefore = await rootTop(page);
  await page.click("#icicle");
  await until(page, () => document.querySelector("#flamegraph svg g.frame"));
  seen.rootTopIcicle = await rootTop(page);
  await eventually(async () => (await frameWidth(page, args.zoom)) > 0.99);
  seen.zoomWidthIcicle = await frameWidth(page, args.zoom);
  await screenshot(page, "icicle-zoom");
  await page.click("#icicle");
  await page.click("#reset-zoom");
  await eventually(async () => (await frameWidth(page, args.zoom)) < 0.99);
  seen.widthReset = await frameWidth(page, args.zoom);

  // A peek triggered by kill -USR1 appears in the open page's list.
  const peekItems = `#peeks li[data-pid="${args.peekPid}"]`;
  const before = (await page.$$(peekItems)).length;
  process.kill(args.peekPid, "SIGUSR1");
  await until(
    page,
    (selector, before) => document.querySelectorAll(selector).length > before,
    peekItems,
    before,
  );
  seen.peeksBefore = before;
  // Clicked in the page, at once: the list is drawn again as peeks come.
  await page.$eval(peekItems, (item) => item.click());
  await until(page, () => document.getElementById("peek-report").textContent.length > 0);
  seen.peekReport = await text(page, "#peek-report");

  // The page's own button peeks at a process and shows its report.
  await fill(page, "#peek-pid", String(args.peekPid));
  await page.click("#peek-button");
  await until(
    page,
    (selector, before) =>
      document.getElementById("peek-report").textContent.startsWith("=") &&
      document.querySelectorAll(selector).length > before + 1,
    peekItems,
    before,
  );
  seen.buttonPeekReport = await text(page, "#peek-report");
  seen.buttonPeekSelected = await attribute(page, "#peeks li.selected", "data-pid");

  // A past range dragged on the timeline reloads the graph. It is dragged
  // over a fifth of `history` seconds held, so that it ends long enough ago
  // for its spans to be merged at the store's resolution (the test reads
  // the same window again and must get the same samples), and so that the
  // window before it holds samples too.
  await untilWithin(
    2 * WAIT_MS,
    page,
    (seconds) => {
      const [start, end] = (document.body.dataset.timeline || "0,0").split(",").map(Number);
      return end - start >= seconds * 1000;
    },
    args.history,
  );
  await loaded(page);
  seen.windowBefore = await attribute(page, "body", "data-window");
  const [from, to] = await pastFifth(page);
  seen.dragged = [from, to];
  await dragOnTimeline(page, from, to);
  await until(page, () => document.body.dataset.state === "loaded" && document.body.dataset.window.includes("from="));
  seen.pastWindow = await attribute(page, "body", "data-window");
  seen.pastSamples = Number(await attribute(page, "body", "data-samples"));
  seen.pastStatus = await text(page, "#status");
  seen.pastHot = (await drawnFrames(page)).some((frame) => frame.chain.at(-1) === args.hot);
  seen.functions = await rows(page, "#functions tbody tr");
  seen.processes = await rows(page, "#processes-table tbody tr");
  await screenshot(page, "timeline-window");
  await screenshot(page, "timeline-window-page", true);
  seen.downloads = await page.$$eval("#downloads a", (links) =>
    links.map((link) => [link.dataset.format, link.getAttribute("href")]),
  );

  // A diff against the window before, in the differential colours.
  const compared = () =>
    document.body.dataset.state === "loaded" && document.getElementById("status").textContent.includes("compared with");
  await page.select("#diff", "before");
  await until(page, compared);
  seen.diffStatus = await text(page, "#status");
  seen.diffWindow = await attribute(page, "body", "data-window");
  seen.baseWindow = await attribute(page, "body", "data-base-window");
  seen.diffFills = await differentialFills(page);
  seen.diffLegend = await page.$eval("#legend", (legend) => !legend.hidden && legend.checkVisibility() && legend.textContent);
  await screenshot(page, "diff");

  // A diff against a range dragged on the timeline (among the earliest
  // held, before the window): the window stays, the range compared with is
  // the dragged one.
  await page.select("#diff", "range");
  await until(
    page,
    () => document.body.dataset.state === "loaded" && !document.getElementById("drag-target").hidden,
  );
  seen.rangeAsked = await text(page, "#status");
  await dragOnTimeline(page, 0.02, 0.08);
  await until(
    page,
    (before) =>
      document.body.dataset.state === "loaded" &&
      document.getElementById("status").textContent.includes("compared with") &&
      document.body.dataset.baseWindow !== before,
    seen.baseWindow,
  );
  seen.rangeStatus = await text(page, "#status");
  seen.rangeWindow = await attribute(page, "body", "data-window");
  seen.rangeBaseWindow = await attribute(page, "body", "data-base-window");
  seen.rangeFills = await differentialFills(page);
  seen.rangeMarks = await page.$$eval("#timeline .window-mark, #timeline .brush.base .selection", (marks) =>
    marks.map((mark) => [mark.getAttribute("class"), Number(mark.getAttribute("x")), Number(mark.getAttribute("width"))]),
  );
  await screenshot(page, "diff-range");
  await selections(page);
}

// Loads the page's choice `id` set to `value` (an input typed into, or a
// select chosen), and waits until the page is loaded with `words` in the
// window it asked for.
async function choose(page, id, value, words) {
  const before = Number(await attribute(page, "body", "data-loads"));
  if (await page.$eval(`#${id}`, (element) => element.tagName === "SELECT")) await page.select(`#${id}`, value);
  else {
    await fill(page, `#${id}`, value);
    // Left, as a user leaves it: the browser's own change (on leaving
    // an input typed into) comes now, not when the next one is typed into.
    await page.$eval(`#${id}`, (input) => {
      input.dispatchEvent(new Event("change"));
      input.blur();
    });
  }
  await until(
    page,
    (before, words) =>
      document.body.dataset.state === "loaded" &&
      Number(document.body.dataset.loads) > before &&
      (document.body.dataset.window || "").includes(words),
    before,
    words,
  );
}

// The choices of processes, threads and mode, in the past window dragged:
// the tables follow the selection, the sandwich reads the selection's
// graph, a thread is drawn alone, a selection of nothing and an off-CPU
// mode recorded by nobody say so.
async function selections(page) {
  await choose(page, "diff", "", "from=");
  await choose(page, "processes", String(args.chainPid), `pid=${args.chainPid}`);
  seen.selectedProcesses = await rows(page, "#processes-table tbody tr");
  seen.selectedWindow = await attribute(page, "body", "data-window");

  // The sandwich of the workload's middle function: its caller and callee.
  await fill(page, "#sandwich-function", args.sandwich);
  await page.$eval("#sandwich-function", (input) => {
    input.dispatchEvent(new Event("change"));
    input.blur();
  });
  await until(page, (name) => document.getElementById("sandwich").dataset.function === name, args.sandwich);
  const sandwichRows = (selector) =>
    page.$$eval(selector, (rows) => rows.map((row) => [row.dataset.name, Number(row.dataset.samples)]));
  seen.sandwichCallers = await sandwichRows("#sandwich-callers tbody tr[data-name]");
  seen.sandwichCallees = await sandwichRows("#sandwich-callees tbody tr[data-name]");
  seen.sandwichSummary = await text(page, "#sandwich-summary");
  // On the first screen, beside the graph, as a user sees it.
  await page.evaluate(() => window.scrollTo(0, 0));
  await loaded(page);
  await screenshot(page, "sandwich");

  // One thread of the peeked process, alone.
  await choose(page, "processes", String(args.peekPid), `pid=${args.peekPid}`);
  seen.threadOptions = await page.$$eval("#thread option", (options) => options.map((option) => [option.value, option.textContent]));
  const thread = seen.threadOptions.find(([value]) => value.split(";")[1]?.startsWith(`${args.thread}-`));
  if (!thread) throw new Error(`no thread ${args.thread} offered: ${JSON.stringify(seen.threadOptions)}`);
  const loads = Number(await attribute(page, "body", "data-loads"));
  await page.select("#thread", thread[0]);
  await until(page, (loads) => document.body.dataset.state === "loaded" && Number(document.body.dataset.loads) > loads, loads);
  seen.threadStatus = await text(page, "#status");
  seen.threadChains = (await drawnFrames(page)).map((frame) => frame.chain);
  seen.threadFunctions = (await rows(page, "#functions tbody tr")).map((row) => row[0]);
  seen.threadWindow = await attribute(page, '#downloads a[data-format="folded"]', "href");
  await screenshot(page, "thread");

  // A selection that matches no process.
  await choose(page, "processes", "no-such-command", "comm=no-such-command");
  seen.noMatch = {
    notice: await text(page, "#notice"),
    noticeShown: await page.$eval("#notice", (element) => element.checkVisibility()),
    graph: await text(page, "#flamegraph"),
    processes: await rows(page, "#processes-table tbody tr"),
  };
  await screenshot(page, "empty");

  // Every process again, in the off-CPU mode.
  await choose(page, "processes", "", "from=");
  await choose(page, "mode", "offcpu", "mode=offcpu");
  seen.offcpuRecorded = await attribute(page, "body", "data-offcpu-recorded");
  // Above the graph, or in its place when it is empty.
  seen.offcpuNotice = await page.evaluate(() => {
    const notice = document.getElementById("notice");
    return notice.checkVisibility() ? notice.textContent : document.getElementById("flamegraph").textContent;
  });
  await screenshot(page, "offcpu");
}

// The fills of the frames drawn that the search does not highlight.
async function differentialFills(page) {
  return (await drawnFrames(page)).filter((frame) => !frame.highlighted).map((frame) => frame.fill);
}

// The width of the first frame named `name`, as a share of the graph's.
function frameWidth(page, name) {
  return page.evaluate((name) => {
    const svg = document.querySelector("#flamegraph svg");
    const frame = [...svg.querySelectorAll("g.frame")].find((element) => d3.select(element).datum().data.name === name);
    if (!frame) return 0;
    return Number(frame.querySelector("rect").getAttribute("width")) / Number(svg.getAttribute("width"));
  }, name);
}

// How far down the graph the root frame is drawn, as a share of its height.
function rootTop(page) {
  return page.evaluate(() => {
    const svg = document.querySelector("#flamegraph svg");
    const root = [...svg.querySelectorAll("g.frame")].find((element) => !d3.select(element).datum().parent);
    const top = root.getBoundingClientRect().top - svg.getBoundingClientRect().top;
    return top / svg.getBoundingClientRect().height;
  });
}
