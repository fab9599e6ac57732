// Drives Debian's Chromium, headless, through profilerd's web view for the
// end-to-end tests (profiler-daemon/tests/end_to_end/web_view.rs), and
// prints what it saw as one JSON object; the Rust test judges it.
//
// node view.mjs SCENARIO JSON_ARGUMENTS
//   view:    { url, hot, peekPid, history, screenshot }  loads /, waits for `hot`
//            in the flame graph, searches it, sends peekPid SIGUSR1 and
//            waits for its peek in the list, drags a past window on the
//            timeline.
//   refused: { url }                        loads / from a listener that
//            refuses this client and reads what the page says.
import { pathToFileURL } from "node:url";
import path from "node:path";

// playwright-core as `cargo xtask test` installed it (npm ci of the lock
// file beside this script, into the target directory).
const modules = process.env.PROFILERD_TEST_NODE_MODULES;
if (!modules) throw new Error("PROFILERD_TEST_NODE_MODULES is not set: run the tests with cargo xtask test");
const { chromium } = await import(pathToFileURL(path.join(modules, "playwright-core", "index.mjs")).href);

const [scenario, argumentsJson] = process.argv.slice(2);
const args = JSON.parse(argumentsJson);
const WAIT_MS = 30000;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--ignore-certificate-errors",
  ],
});
const seen = { scenario, console: [] };
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.on("console", (message) => seen.console.push(`${message.type()}: ${message.text()}`));
  page.on("pageerror", (error) => seen.console.push(`pageerror: ${error.message}`));
  // Every request the page makes, to show it asks nothing of the internet.
  seen.requests = [];
  page.on("request", (request) => seen.requests.push(request.url()));
  seen.responses = [];
  page.on("response", (response) => seen.responses.push([response.url(), response.status()]));
  await page.goto(args.url, { waitUntil: "load" });
  if (scenario === "view") await view(page);
  else if (scenario === "refused") await refused(page);
  else throw new Error(`no scenario ${scenario}`);
} catch (error) {
  seen.error = String(error && error.stack ? error.stack : error);
} finally {
  await browser.close();
}
console.log(JSON.stringify(seen));

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

async function view(page) {
  // The hot function, drawn from the daemon's samples.
  await page.waitForFunction(
    (hot) =>
      [...document.querySelectorAll("#flamegraph svg g title")].some((title) =>
        title.textContent.startsWith(hot),
      ),
    args.hot,
    { timeout: WAIT_MS },
  );
  seen.frames = (await drawnFrames(page)).filter((frame) => frame.chain.at(-1) === args.hot);
  seen.status = await page.textContent("#status");

  // A search highlights it and says its share.
  await page.fill("#search", args.hot);
  await page.waitForFunction(() => document.getElementById("matched").dataset.share, null, {
    timeout: WAIT_MS,
  });
  seen.matched = await page.textContent("#matched");
  seen.matchedShare = Number(await page.getAttribute("#matched", "data-share"));
  const frames = await drawnFrames(page);
  seen.highlighted = frames.filter((frame) => frame.highlighted).map((frame) => ({
    name: frame.chain.at(-1),
    fill: frame.fill,
  }));
  await page.waitForFunction(() => document.body.dataset.state === "loaded", null, { timeout: WAIT_MS });
  await page.screenshot({ path: args.screenshot, fullPage: true });

  // A peek triggered by kill -USR1 appears in the open page's list.
  const before = await page.locator(`#peeks li[data-pid="${args.peekPid}"]`).count();
  process.kill(args.peekPid, "SIGUSR1");
  await page.waitForFunction(
    ([pid, before]) => document.querySelectorAll(`#peeks li[data-pid="${pid}"]`).length > before,
    [args.peekPid, before],
    { timeout: WAIT_MS },
  );
  seen.peeksBefore = before;
  await page.locator(`#peeks li[data-pid="${args.peekPid}"]`).first().click();
  await page.waitForFunction(() => document.getElementById("peek-report").textContent.length > 0, null, {
    timeout: WAIT_MS,
  });
  seen.peekReport = await page.textContent("#peek-report");

  // The page's own button peeks at a process and shows its report.
  await page.fill("#peek-pid", String(args.peekPid));
  await page.click("#peek-button");
  await page.waitForFunction(
    ([pid, before]) =>
      document.getElementById("peek-report").textContent.startsWith("=") &&
      document.querySelectorAll(`#peeks li[data-pid="${pid}"]`).length > before + 1,
    [args.peekPid, before],
    { timeout: WAIT_MS },
  );
  seen.buttonPeekReport = await page.textContent("#peek-report");
  seen.buttonPeekSelected = await page.getAttribute("#peeks li.selected", "data-pid");

  // A past range dragged on the timeline reloads the graph. It is dragged
  // over the middle fifth of `history` seconds held, so that it ends long
  // enough ago for its spans to be merged at the store's resolution (the
  // test reads the same window again and must get the same samples), and
  // so that the window before it holds samples too.
  await page.waitForFunction((seconds) => Number(document.body.dataset.history) >= seconds, args.history, {
    timeout: 2 * WAIT_MS,
  });
  const timeline = await page.locator("#timeline svg").boundingBox();
  const windowBefore = await page.getAttribute("body", "data-window");
  const y = timeline.y + timeline.height / 3;
  await page.mouse.move(timeline.x + timeline.width * 0.4, y);
  await page.mouse.down();
  await page.mouse.move(timeline.x + timeline.width * 0.5, y, { steps: 8 });
  await page.mouse.move(timeline.x + timeline.width * 0.6, y, { steps: 8 });
  await page.mouse.up();
  await page.waitForFunction(
    () => document.body.dataset.state === "loaded" && document.body.dataset.window.includes("from="),
    null,
    { timeout: WAIT_MS },
  );
  seen.windowBefore = windowBefore;
  seen.pastWindow = await page.getAttribute("body", "data-window");
  seen.pastSamples = Number(await page.getAttribute("body", "data-samples"));
  seen.pastStatus = await page.textContent("#status");
  seen.pastHot = (await drawnFrames(page)).some((frame) => frame.chain.at(-1) === args.hot);
  seen.functions = await page.$$eval("#functions tbody tr", (rows) =>
    rows.map((row) => [...row.children].map((cell) => cell.textContent)),
  );
  seen.processes = await page.$$eval("#processes-table tbody tr", (rows) =>
    rows.map((row) => [...row.children].map((cell) => cell.textContent)),
  );
  await page.screenshot({ path: args.screenshot.replace(/\.png$/, "-past.png"), fullPage: true });
  seen.downloads = await page.$$eval("#downloads a", (links) =>
    links.map((link) => [link.dataset.format, link.getAttribute("href")]),
  );

  // A diff against the window before, in the differential colours.
  await page.selectOption("#diff", "before");
  await page.waitForFunction(
    () => document.body.dataset.state === "loaded" && document.getElementById("status").textContent.includes("compared with"),
    null,
    { timeout: WAIT_MS },
  );
  seen.diffStatus = await page.textContent("#status");
  seen.diffWindow = await page.getAttribute("body", "data-window");
  seen.baseWindow = await page.getAttribute("body", "data-base-window");
  seen.diffFills = (await drawnFrames(page)).filter((frame) => !frame.highlighted).map((frame) => frame.fill);
  await page.screenshot({ path: args.screenshot.replace(/\.png$/, "-diff.png"), fullPage: true });
}

async function refused(page) {
  await page.waitForFunction(() => document.body.dataset.state === "error", null, { timeout: WAIT_MS });
  seen.status = await page.textContent("#status");
  seen.visible = await page.isVisible("#status");
}
