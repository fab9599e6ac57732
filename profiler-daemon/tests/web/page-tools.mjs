// What the web view's browser scenarios (view.mjs, heatmap.mjs,
// other-scenarios.mjs) do to the page and read of it: waiting for what it
// must show, reading and typing into its elements, its tables and the
// frames of its flame graph.

// How long to wait for what the page must show. A test daemon is a debug
// build sharing two cores with two browsers, spinning workloads and other
// builds, whose deep stacks it samples too: a report of its whole history
// can take 30 s there (100 ms in release), and a load of the page asks
// for four.
export const WAIT_MS = 120000;

// Waits until `predicate(...values)`, run in the page, is true.
export function until(page, predicate, ...values) {
  return untilWithin(WAIT_MS, page, predicate, ...values);
}

// Waits up to `ms` until `predicate(...values)`, run in the page, is true.
// Polled from here: puppeteer's waitForFunction makes its predicate from a
// string in the page, which the page's Content-Security-Policy (no eval)
// forbids in Firefox.
export async function untilWithin(ms, page, predicate, ...values) {
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

export function text(page, selector) {
  return page.$eval(selector, (element) => element.textContent);
}

export function attribute(page, selector, name) {
  return page.$eval(selector, (element, name) => element.getAttribute(name), name);
}

export function loaded(page) {
  return until(page, () => document.body.dataset.state === "loaded");
}

// Types `value` into the input `selector` in place of what it held.
export async function fill(page, selector, value) {
  await page.$eval(selector, (input) => {
    input.value = "";
  });
  await page.type(selector, value);
}

// Waits until `condition()`, run here, is true.
export async function eventually(condition) {
  const end = Date.now() + WAIT_MS;
  while (!(await condition())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${condition}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

// The cells of the table rows `selector`.
export function rows(page, selector) {
  return page.$$eval(selector, (rows) => rows.map((row) => [...row.children].map((cell) => cell.textContent)));
}

// The names of the frames drawn, each with the names of its ancestors.
export function drawnFrames(page) {
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
