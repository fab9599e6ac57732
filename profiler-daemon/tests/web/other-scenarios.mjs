// The web view's smaller browser scenarios (see view.mjs, which runs
// them): a Python process's frames, function names as a person types them,
// a client the listener refuses, and another site's page asking the daemon
// for work.
import http from "node:http";

import { attribute, drawnFrames, eventually, fill, loaded, text, until } from "./page-tools.mjs";

// A Python process chosen: its Python frames are drawn with their file and
// line; the interpreter switch takes the interpreter's own frames out.
export async function python(page, args, seen) {
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


// A function named as a person types it (`name`: malloc) over process
// `pid`'s graph: the frames the search highlights, and the sandwich of the
// function (names.js's rule: malloc is Debian glibc's __GI___libc_malloc
// too).
export async function functionNames(page, args, seen) {
  await loaded(page);
  await fill(page, "#processes", String(args.pid));
  await page.$eval("#processes", (input) => input.dispatchEvent(new Event("change")));
  await until(
    page,
    (pid) => document.body.dataset.state === "loaded" && (document.body.dataset.window || "").includes(`pid=${pid}`),
    args.pid,
  );
  // A frame of the function drawn, by any of its names.
  const drawn = (name) =>
    [...document.querySelectorAll("#flamegraph svg g.frame")].some((element) =>
      namesFunction(frameFunction(d3.select(element).datum().data.name), name),
    );
  await until(page, drawn, args.name);
  seen.drawnNames = [...new Set((await drawnFrames(page)).map((frame) => frame.chain.at(-1)))];

  await fill(page, "#search", args.name);
  await until(page, () => document.getElementById("matched").dataset.share);
  seen.matched = await text(page, "#matched");
  seen.highlighted = [
    ...new Set(
      (await drawnFrames(page)).filter((frame) => frame.highlighted).map((frame) => frame.chain.at(-1)),
    ),
  ];

  await fill(page, "#sandwich-function", args.name);
  await page.$eval("#sandwich-function", (input) => {
    input.dispatchEvent(new Event("change"));
    input.blur();
  });
  await until(page, (name) => document.getElementById("sandwich").dataset.function === name, args.name);
  seen.sandwichSummary = await text(page, "#sandwich-summary");
  seen.sandwichCallers = await page.$$eval("#sandwich-callers tbody tr[data-name]", (rows) =>
    rows.map((row) => [row.dataset.name, Number(row.dataset.samples)]),
  );
}

export async function refused(page, args, seen) {
  await until(page, () => document.body.dataset.state === "error");
  seen.status = await text(page, "#status");
  seen.visible = await page.$eval("#status", (element) => element.checkVisibility());
}

// Serves, on a port of its own and under the name localhost (another site
// than the daemon's 127.0.0.1), a page that asks `daemon` to start work on
// process `pid` the ways any page can: an image, a script, fetches in
// no-cors mode, a form posted into a frame. Its address.
export async function anotherSite(daemon, pid, seen) {
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
export async function crossSite(page, args, seen) {
  const toDaemon = ([url]) => url.startsWith(args.daemon);
  await eventually(async () => seen.responses.filter(toDaemon).length + seen.failed.filter(toDaemon).length >= 6);
  seen.daemonAnswers = seen.responses.filter(toDaemon);
  seen.daemonFailures = seen.failed.filter(toDaemon);
  seen.daemonRequests = seen.requests.filter((url) => url.startsWith(args.daemon));
}
