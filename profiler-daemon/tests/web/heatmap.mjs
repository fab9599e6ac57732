// The source heatmap scenario of the web view's browser tests (view.mjs
// runs it; web_view_heatmap.rs judges what it saw): process `pid` chosen,
// the heatmap of `function` is opened from the functions table's Source
// button, from the sandwich and by a right-click on its flame graph frame,
// read row by row, and opened again with `sourceFile` made unreadable to
// other users (the daemon then shows the counts by line number, and why).
// Screenshots: SCREENSHOTS/BROWSER-heatmap.png and -heatmap-withheld.png.
import fs from "node:fs";
import path from "node:path";

import { attribute, fill, loaded, until } from "./page-tools.mjs";

export async function heatmap(page, args, seen) {
  await loaded(page);
  await fill(page, "#processes", String(args.pid));
  await page.$eval("#processes", (input) => {
    input.dispatchEvent(new Event("change"));
    input.blur();
  });
  const listed = (pid, name) =>
    document.body.dataset.state === "loaded" &&
    (document.body.dataset.window || "").includes(`pid=${pid}`) &&
    [...document.querySelectorAll("#functions tbody tr")].some((row) => row.cells[0].textContent === name);
  await until(page, listed, args.pid, args.function);

  // The functions table's Source button, clicked as a user clicks it.
  await opening(page, args.function, () => clickSourceButton(page, args.function));
  seen.table = await readHeatmap(page);
  await screenshot(page, args, "heatmap");
  await page.keyboard.press("Escape");
  await until(page, () => !document.getElementById("source-view").open);
  seen.closedByEscape = true;

  // The sandwich's Source button.
  await fill(page, "#sandwich-function", args.function);
  await page.$eval("#sandwich-function", (input) => {
    input.dispatchEvent(new Event("change"));
    input.blur();
  });
  await until(page, () => !document.getElementById("sandwich-source").hidden);
  await opening(page, args.function, () => page.click("#sandwich-source-button"));
  seen.sandwich = await readHeatmap(page);
  await page.click("#source-close");
  await until(page, () => !document.getElementById("source-view").open);

  // A right-click on the function's frame in the flame graph.
  const frame = await page.evaluateHandle(
    (name) =>
      [...document.querySelectorAll("#flamegraph svg g.frame")]
        .find((element) => d3.select(element).datum().data.name === name)
        .querySelector("rect"),
    args.function,
  );
  await opening(page, args.function, () => frame.asElement().click({ button: "right" }));
  seen.frame = await readHeatmap(page);
  await page.keyboard.press("Escape");
  await until(page, () => !document.getElementById("source-view").open);

  // The source file closed to other users: the counts by line number,
  // and the daemon's reason.
  fs.chmodSync(args.sourceFile, 0o600);
  try {
    await opening(page, args.function, () => clickSourceButton(page, args.function));
    seen.withheld = await readHeatmap(page);
    await screenshot(page, args, "heatmap-withheld");
  } finally {
    fs.chmodSync(args.sourceFile, 0o644);
  }
  seen.dialogWindow = await attribute(page, "#source-view", "data-window");
}

// Clicks the Source button of `name`'s row in the functions table (as
// drawn now: a live refresh draws the table again).
async function clickSourceButton(page, name) {
  for (let tries = 1; ; tries++) {
    const button = await page.evaluateHandle(
      (name) =>
        [...document.querySelectorAll("#functions tbody tr")]
          .find((row) => row.cells[0].textContent === name)
          .querySelector("button.source-button"),
      name,
    );
    try {
      await button.asElement().click();
      return;
    } catch (error) {
      // Drawn again between finding and clicking it: found again.
      if (tries >= 5 || !String(error).includes("detached")) throw error;
    }
  }
}

// Does `open` and waits until the heatmap of `name` is drawn (again).
async function opening(page, name, open) {
  const before = Number((await attribute(page, "#source-view", "data-loads")) || 0);
  await open();
  await until(
    page,
    (name, before) => {
      const dialog = document.getElementById("source-view");
      return dialog.open && dialog.dataset.function === name && Number(dialog.dataset.loads || 0) > before;
    },
    name,
    before,
  );
}

// What the heatmap shows: its title and summary, each file's heading,
// reason and rows, and where its hottest row is on the screen.
function readHeatmap(page) {
  return page.evaluate(() => {
    const dialog = document.getElementById("source-view");
    const box = document.getElementById("source-box").getBoundingClientRect();
    const hot = dialog.querySelector("tr.hottest");
    const rect = hot && hot.getBoundingClientRect();
    return {
      visible: dialog.checkVisibility(),
      function: dialog.dataset.function,
      title: document.getElementById("source-title").textContent,
      summary: document.getElementById("source-summary").textContent,
      files: [...dialog.querySelectorAll(".source-file")].map((section) => ({
        path: section.dataset.path,
        heading: section.querySelector("h3").textContent,
        textShown: section.dataset.textShown,
        withheld: section.querySelector(".withheld")?.textContent ?? null,
        rows: [...section.querySelectorAll("tbody tr")].map((row) =>
          row.classList.contains("gap")
            ? { gap: row.textContent }
            : {
                line: Number(row.dataset.line),
                self: Number(row.dataset.self),
                total: Number(row.dataset.total),
                text: row.cells[3] ? row.cells[3].textContent : "",
                background: getComputedStyle(row).backgroundColor,
                hottest: row.classList.contains("hottest"),
              },
        ),
      })),
      hottest: hot && {
        line: Number(hot.dataset.line),
        top: rect.top,
        bottom: rect.bottom,
        boxTop: box.top,
        boxBottom: box.bottom,
        viewport: [window.innerWidth, window.innerHeight],
        fontSize: parseFloat(getComputedStyle(hot).fontSize),
      },
    };
  });
}

async function screenshot(page, args, mode) {
  await page.screenshot({ path: path.join(args.screenshots, `${args.browser}-${mode}.png`) });
}
