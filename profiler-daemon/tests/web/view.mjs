// Drives a browser, headless, through profilerd's web view for the
// end-to-end tests (profiler-daemon/tests/end_to_end/web_view.rs), and
// prints what it saw as one JSON object; the Rust test judges it. The
// browser is Debian's Chromium (over the DevTools protocol) or Debian's
// Firefox ESR (over WebDriver BiDi), both driven by puppeteer-core.
//
// node view.mjs SCENARIO JSON_ARGUMENTS
//   view:    { browser, url, hot, zoom, peekPid, history, screenshot }
//            loads /, waits for `hot` in the flame graph, sees it refresh
//            live, searches `hot`, zooms into the frame `zoom` and turns
//            the graph into an icicle, sends peekPid SIGUSR1 and waits for
//            its peek in the list, peeks with the page's button, drags a
//            past window on the timeline, compares it with the window
//            before and with a range dragged on the timeline.
//   refused: { browser, url }         loads / from a listener that
//            refuses this client and reads what the page says.
//   crossSite: { browser, daemon, pid }  serves, from another site
//            (http://localhost:PORT/, the daemon being at 127.0.0.1), a
//            page that asks the daemon to profile and to peek at pid (an
//            image, a script, fetches in no-cors mode, a form posted into a
//            frame) and records the daemon's answers.
// Every scenario records the page's Content-Security-Policy violations.
import { pathToFileURL } from "node:url";
import http from "node:http";
import path from "node:path";

// puppeteer-core as `cargo xtask test` installed it (npm ci of the lock
// file beside this script, into the target directory).
const modules = process.env.PROFILERD_TEST_NODE_MODULES;
if (!modules) throw new Error("PROFILERD_TEST_NODE_MODULES is not set: run the tests with cargo xtask test");
const { default: puppeteer } = await import(
  pathToFileURL(path.join(modules, "puppeteer-core", "lib", "esm", "puppeteer", "puppeteer-core.js")).href
);

const [scenario, argumentsJson] = process.argv.slice(2);
const args = JSON.parse(argumentsJson);
// How long to wait for what the page must show. A test daemon is a debug
// build sharing two cores with two browsers and spinning workloads: a
// report of its whole history can take 10 s there (100 ms in release).
const WAIT_MS = 60000;
const VIEWPORT = { width: 1400, height: 900 };

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
  if (scenario === "crossSite") args.url = await anotherSite(args.daemon, args.pid);
  await page.goto(args.url, { waitUntil: "load" });
  if (scenario === "view") await view(page);
  else if (scenario === "refused") await refused(page);
  else if (scenario === "crossSite") await crossSite(page);
  else if (scenario === "python") await python(page);
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

// Waits until `predicate(...values)`, run in the page, is true.
function until(page, predicate, ...values) {
  return untilWithin(WAIT_MS, page, predicate, ...values);
}

// Waits up to `ms` until `predicate(...values)`, run in the page, is true.
// Polled from here: puppeteer's waitForFunction makes its predicate from a
// string in the page, which the page's Content-Security-Policy (no eval)
// forbids in Firefox.
async function untilWithin(ms, page, predicate, ...values) {
  const end = Date.now() + ms;
  // Its value may be an element, which does not leave the page: only
  // whether it is truthy does.
  const holds = async () => {
    const value = await page.evaluateHandle(predicate, ...values);
    try {
      return await value.evaluate((value) => Boolean(value));
    } finally {
      await value.dispose();
    }
  };
  while (!(await holds())) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${predicate}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

function text(page, selector) {
  return page.$eval(selector, (element) => element.textContent);
}

function attribute(page, selector, name) {
  return page.$eval(selector, (element, name) => element.getAttribute(name), name);
}

function loaded(page) {
  return until(page, () => document.body.dataset.state === "loaded");
}

// Types `value` into the input `selector` in place of what it held.
async function fill(page, selector, value) {
  await page.$eval(selector, (input) => {
    input.value = "";
  });
  await page.type(selector, value);
}

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

// Waits until `condition()`, run here, is true.
async function eventually(condition) {
  const end = Date.now() + WAIT_MS;
  while (!(await condition())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${condition}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

// Drags on the timeline from `from` to `to`, fractions of its width.
async function dragOnTimeline(page, from, to) {
  const timeline = await (await page.$("#timeline svg")).boundingBox();
  const y = timeline.y + timeline.height / 3;
  await page.mouse.move(timeline.x + timeline.width * from, y);
  await page.mouse.down();
  await page.mouse.move(timeline.x + timeline.width * ((from + to) / 2), y, { steps: 8 });
  await page.mouse.move(timeline.x + timeline.width * to, y, { steps: 8 });
  await page.mouse.up();
}

// The cells of the table rows `selector`.
function rows(page, selector) {
  return page.$$eval(selector, (rows) => rows.map((row) => [...row.children].map((cell) => cell.textContent)));
}

// The names of the frames drawn, each with the names of its ancestors.
function drawnFrames(page) {
  return page.evaluate(() =>
    d3
      .selectAll("#flamegraph svg g.frame")
      .nodes()
      .map((element) => {
        const node = d3.select(element).datum();
        const chain = [];
        for (let at = node; at; at = at.parent) chain.unshift(at.data.name);
        const rect = element.querySelector("rect");
        return {
          chain,
          value: node.value,
          highlighted: Boolean(node.highlight),
          fill: rect && rect.getAttribute("fill"),
        };
      }),
  );
}

// A Python process chosen: its Python frames are drawn with their file and
// line; the interpreter switch takes the interpreter's own frames out.
async function python(page) {
  await loaded(page);
  await fill(page, "#processes", String(args.pid));
  await page.$eval("#processes", (input) => input.dispatchEvent(new Event("change")));
  const hotDrawn = (hot) =>
    [...document.querySelectorAll("#flamegraph svg g.frame")].some((element) =>
      d3.select(element).datum().data.name.startsWith(`${hot} (`),
    );
  await until(page, hotDrawn, args.hot);
  await loaded(page);
  const names = async () => [...new Set((await drawnFrames(page)).flatMap((frame) => frame.chain))];
  seen.withInterpreter = await names();
  seen.hotChains = (await drawnFrames(page))
    .filter((frame) => frame.chain.at(-1).startsWith(`${args.hot} (`))
    .map((frame) => frame.chain);
  // The labels drawn on the frames (as a user reads them), once written
  // (at the end of the graph's transition).
  const labelled = (hot) =>
    [...document.querySelectorAll("#flamegraph .d3-flame-graph-label")].some(
      (label) => label.style.display !== "none" && label.textContent.startsWith(`${hot} (`),
    );
  await until(page, labelled, args.hot);
  seen.labels = await page.evaluate(() =>
    [...document.querySelectorAll("#flamegraph .d3-flame-graph-label")]
      .filter((label) => label.style.display !== "none")
      .map((label) => label.textContent),
  );
  await page.screenshot({ path: args.screenshot, fullPage: false });
  await page.click("#interpreter");
  // Drawn from a report asked without the interpreter's frames.
  await until(page, () => (document.body.dataset.window || "").includes("interpreter=false"));
  await until(page, hotDrawn, args.hot);
  seen.withoutInterpreter = await names();
  seen.hotChainsWithout = (await drawnFrames(page))
    .filter((frame) => frame.chain.at(-1).startsWith(`${args.hot} (`))
    .map((frame) => frame.chain);
  seen.windowWithout = await attribute(page, "body", "data-window");
  seen.download = await attribute(page, '#downloads a[data-format="folded"]', "href");
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
  await page.screenshot({ path: args.screenshot, fullPage: true });

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
  await page.screenshot({ path: args.screenshot.replace(/\.png$/, "-zoom.png"), fullPage: true });
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
  await page.screenshot({ path: args.screenshot.replace(/\.png$/, "-past.png"), fullPage: true });
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
  await page.screenshot({ path: args.screenshot.replace(/\.png$/, "-diff.png"), fullPage: true });

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
  await page.screenshot({ path: args.screenshot.replace(/\.png$/, "-range.png"), fullPage: true });
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

async function refused(page) {
  await until(page, () => document.body.dataset.state === "error");
  seen.status = await text(page, "#status");
  seen.visible = await page.$eval("#status", (element) => element.checkVisibility());
}

// Serves, on a port of its own and under the name localhost (another site
// than the daemon's 127.0.0.1), a page that asks `daemon` to start work on
// process `pid` the ways any page can: an image, a script, fetches in
// no-cors mode, a form posted into a frame. Its address.
async function anotherSite(daemon, pid) {
  const asks = {
    session: `${daemon}/profile_start?pid=${pid}`,
    profile: `${daemon}/profile?duration=1&pprof=false&pid=${pid}`,
    peek: `${daemon}/api/peek?pid=${pid}`,
  };
  const page = `<!doctype html><title>another site</title>
<iframe name="sink"></iframe>
<form id="form" method="POST" action="${asks.peek}" target="sink"><input name="pid" value="${pid}"></form>
<script>
  const image = new Image();
  image.src = ${JSON.stringify(asks.session)};
  const script = document.createElement("script");
  script.src = ${JSON.stringify(asks.profile)};
  document.head.append(script);
  fetch(${JSON.stringify(asks.session)}, { mode: "no-cors" }).catch(() => {});
  fetch(${JSON.stringify(asks.peek)}, { method: "POST", mode: "no-cors" }).catch(() => {});
  fetch(${JSON.stringify(asks.peek)}, {
    method: "POST",
    mode: "no-cors",
    headers: { "Content-Type": "text/plain" },
    body: "{}",
  }).catch(() => {});
  document.getElementById("form").submit();
</script>`;
  const server = http.createServer((request, response) => {
    response.writeHead(200, { "Content-Type": "text/html; charset=utf-8" });
    response.end(page);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  // The browser's end of the scenario ends it; this server does not keep
  // node alive.
  server.unref();
  seen.asks = Object.values(asks);
  return `http://localhost:${server.address().port}/`;
}

// Waits until the page's six requests to the daemon (an image, a script,
// three fetches, a form) are over: answered, or failed (the browser blocks
// what the daemon's headers forbid it to show another site); records how.
async function crossSite(page) {
  const toDaemon = ([url]) => url.startsWith(args.daemon);
  await eventually(async () => seen.responses.filter(toDaemon).length + seen.failed.filter(toDaemon).length >= 6);
  seen.daemonAnswers = seen.responses.filter(toDaemon);
  seen.daemonFailures = seen.failed.filter(toDaemon);
  seen.daemonRequests = seen.requests.filter((url) => url.startsWith(args.daemon));
}
