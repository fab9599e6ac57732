// profilerd's web view: the peeks, listed as they happen, each report
// readable (loaded before app.js, which starts them).
"use strict";

// The peek list follows /api/peeks/events; it is also read this often in
// case the event stream is refused (each caller has a few streams).
const PEEKS_REFRESH_MS = 10000;

async function refreshPeeks() {
  let peeks;
  try {
    peeks = JSON.parse(await fetchText("/peeks"));
  } catch {
    return;
  }
  const ids = peeks.map((peek) => peek.id).join(",");
  if (ids === view.peekIds) return;
  view.peekIds = ids;
  const list = $("peeks");
  list.replaceChildren();
  for (const peek of peeks.slice().reverse()) {
    const item = document.createElement("li");
    item.dataset.id = peek.id;
    item.dataset.pid = String(peek.pid);
    // The time of day as the rest of the page writes it (the date and
    // the zone in the tooltip).
    const at = Date.parse(peek.triggered);
    item.textContent = `${Number.isNaN(at) ? peek.triggered : clock(at)}: ${peek.title}`;
    item.title = peek.triggered;
    if (peek.id === view.selectedPeek) item.classList.add("selected");
    item.addEventListener("click", () => showPeek(peek.id));
    list.append(item);
  }
}

async function showPeek(id) {
  view.selectedPeek = id;
  for (const item of $("peeks").children) {
    item.classList.toggle("selected", item.dataset.id === id);
  }
  try {
    $("peek-report").textContent = await fetchText(`/peeks/${encodeURIComponent(id)}`);
  } catch (error) {
    $("peek-report").textContent = error.message;
  }
}

async function peekNow() {
  const pid = $("peek-pid").value.trim();
  if (!/^\d+$/.test(pid)) {
    $("peek-report").textContent = "Give the pid of the process to peek at.";
    return;
  }
  $("peek-report").textContent = `Peeking at ${pid} for 1 s…`;
  // The header tells the daemon this is the page's own request: a form on
  // another site's page cannot send it.
  const response = await fetch(`/api/peek?pid=${pid}`, {
    method: "POST",
    headers: { "X-Profilerd-Request": "1" },
  });
  if (!response.ok) {
    $("peek-report").textContent = await refusal(response);
    return;
  }
  const { id } = await response.json();
  await refreshPeeks();
  await showPeek(id);
}
