// The admin page dlock-serve answers at `/`: one self-contained document (no CDN, no build
// step) over the JSON API of docs/http-api.md. Keys and owners are arbitrary bytes from other
// programs, so they only ever reach the page as text (textContent), never as markup.

#include "cli/admin_page.hpp"

namespace dlock::cli {

const char* const kAdminPage = R"page(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>dlock locks</title>
<style>
  body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #1b1f24; background: #f5f6f8; }
  header { background: #1b1f24; color: #fff; padding: 10px 16px; display: flex; gap: 16px; align-items: baseline; }
  header h1 { font-size: 17px; margin: 0; }
  header .muted { color: #aab2bd; }
  main { display: grid; grid-template-columns: minmax(0, 3fr) minmax(340px, 1fr); gap: 16px; padding: 16px; }
  section { background: #fff; border: 1px solid #d7dce2; border-radius: 6px; padding: 12px 14px; margin-bottom: 16px; }
  h2 { font-size: 15px; margin: 0 0 8px; }
  .toolbar { display: flex; gap: 8px; align-items: center; margin-bottom: 8px; }
  #prefix { flex: 1; padding: 6px 8px; font-size: 14px; }
  table { width: 100%; border-collapse: collapse; }
  th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid #edf0f3; vertical-align: top; }
  th { font-weight: 600; color: #57606a; }
  td.key, #detail-key { font-family: ui-monospace, SFMono-Regular, monospace; overflow-wrap: anywhere; }
  td.num { text-align: right; font-variant-numeric: tabular-nums; }
  /* Owners run to 128 bytes without a space (name@host:pid...): the owner column takes what the
     others leave, cut with an ellipsis (the full text is its title), so keys never wrap. */
  #list { overflow-x: auto; }  /* only on a narrow window, with long keys and tokens */
  #locks td { white-space: nowrap; }
  /* Eight columns, the mode among them, fit beside the audit panel at 1280 px. */
  #locks th, #locks td { padding: 5px 6px; }
  #locks td.mode { font-size: 12px; line-height: 20px; color: #57606a; }
  /* The owner takes the room left and shows all of itself, over several lines if it must, broken
     after its separators (NAME@ HOST: PID. THREAD/ RANDOM) where it can. */
  #locks td.owner { width: 100%; min-width: 12ch; white-space: normal; overflow-wrap: anywhere; }
  #locks td.acquired { white-space: normal; min-width: 10ch; }  /* the date above the time */
  .clip { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; min-width: 0; }
  #locks td.key .clip { display: inline-block; max-width: 28ch; vertical-align: bottom; }
  /* The audit panel is narrow: each entry is one line of short fields, long keys and names cut
     (their title has them), and its reason on a line of its own below. */
  #audit table { font-size: 13px; }
  #audit thead, #audit tbody { display: block; }
  #audit tr { display: grid; grid-template-columns: 7.3em minmax(0, 1fr) minmax(0, 1.5fr) 4.2em;
              border-bottom: 1px solid #edf0f3; }
  #audit th, #audit td { padding: 4px 5px; border-bottom: 0; overflow-wrap: anywhere; }
  #audit th { overflow-wrap: normal; }
  #audit th.reason, #audit th.token { display: none; }
  /* Tokens run to 19 digits: a line of their own, below the entry, and the reason below that. */
  #audit td.token { grid-column: 1 / -1; padding-top: 0; text-align: left; color: #57606a; }
  #audit td.token::before { content: "token "; }
  #audit td.reason { grid-column: 1 / -1; padding-top: 0; overflow-wrap: break-word; }
  #audit td.by, #audit td.key { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
  #audit td.at { overflow-wrap: normal; }  /* date above time */
  td.ttl { white-space: nowrap; font-variant-numeric: tabular-nums; }
  td.ttl.low { color: #b42318; font-weight: 600; }
  #locks tbody tr { cursor: pointer; }
  #locks tbody tr:hover { background: #f0f4ff; }
  #locks tbody tr.selected { background: #dfe8ff; }
  dl { display: grid; grid-template-columns: auto 1fr; gap: 2px 12px; margin: 8px 0 12px; }
  dt { color: #57606a; }
  dd { margin: 0; word-break: break-all; }
  #detail-ttl { word-break: normal; }  /* a sentence where the lease is the session */
  label { display: block; margin: 6px 0; color: #57606a; }
  textarea, #by { display: block; width: 100%; box-sizing: border-box; margin-top: 2px; font: inherit; padding: 5px; }
  button { font: inherit; padding: 5px 10px; }
  button.danger { background: #b42318; color: #fff; border: 0; border-radius: 4px; padding: 7px 14px; }
  button.danger:disabled { background: #e3a8a1; }
  #message { margin: 0 0 12px; }
  #message:empty { display: none; }
  #message.error, #status.error { color: #b42318; }
  .empty { color: #57606a; padding: 12px 8px; }
  .badge { display: inline-block; margin-left: 6px; padding: 0 6px; border-radius: 9px; font-size: 12px;
           background: #fff1d6; color: #8a4b00; border: 1px solid #f0c36d; white-space: nowrap; }
  #locks tbody tr.evicted td { color: #6e7781; }
  label.check { display: flex; gap: 6px; align-items: flex-start; color: #1b1f24; }
  label.check input { margin-top: 3px; }
</style>
</head>
<body>
<header><h1>dlock</h1><span class="muted" id="backend"></span><span class="muted" id="status"></span></header>
<main>
  <div>
    <section id="list">
      <div class="toolbar">
        <input id="prefix" type="search" placeholder="Search keys by prefix" aria-label="Key prefix" autofocus>
        <span id="count"></span>
        <button id="first-page" type="button">First page</button>
        <button id="next-page" type="button">Next page</button>
      </div>
      <table id="locks">
        <thead><tr><th>Key</th><th>Owner</th><th>Mode</th><th>Holds</th><th>Token</th><th>Acquired (UTC)</th><th>Waiters</th><th class="ttl">Time left</th></tr></thead>
        <tbody></tbody>
      </table>
      <div class="empty" id="no-locks" hidden>No held locks here.</div>
    </section>
  </div>
  <aside>
    <section id="detail" hidden>
      <h2 id="detail-key"></h2>
      <dl>
        <dt>Owner</dt><dd id="detail-owner"></dd>
        <dt>Mode</dt><dd id="detail-mode"></dd>
        <dt>Fencing token</dt><dd id="detail-token"></dd>
        <dt>Holds</dt><dd id="detail-holds"></dd>
        <dt>Acquired (UTC)</dt><dd id="detail-acquired"></dd>
        <dt>Waiters</dt><dd id="detail-waiters"></dd>
        <dt>Queue</dt><dd id="detail-queue"></dd>
        <dt>Time left</dt><dd id="detail-ttl"></dd>
        <dt>State</dt><dd id="detail-state"></dd>
      </dl>
      <label>Reason, for the audit log<textarea id="reason" rows="2"></textarea></label>
      <label>Your name<input id="by" autocomplete="name"></label>
      <label class="check"><input id="immediate" type="checkbox"><span>Free the key at once, without the lock
        delay: the next holder may start while this one still runs</span></label>
      <button id="force-release" class="danger" type="button" disabled>Force-release</button>
    </section>
    <p id="message" role="status"></p>
    <section id="audit">
      <h2>Audit log</h2>
      <table>
        <thead><tr><th>When (UTC)</th><th>By</th><th>Key</th><th title="Force-released with the lock delay">Delay</th><th class="token">Token</th><th class="reason">Reason</th></tr></thead>
        <tbody></tbody>
      </table>
    </section>
  </aside>
</main>
<script>
"use strict";
const $ = (selector) => document.querySelector(selector);
const pageSize = 50;
let pageStart = "";     // list after this key ("" = from the first)
let nextAfter = null;   // the key the next page starts after, if any
let selected = null;    // the holder shown in #detail
let token = sessionStorage.getItem("dlock-token") || "";
const leases = new Map();  // holder -> its lease, as leaseOf() makes it
// Where the lease is the holder's session (the store's capabilities say so: zookeeper://,
// mysql:// mode=session), a lock's ttl_left_ms is how long the key may stay held after that
// session ends: it does not count down while the holder lives.
let sessionLeases = false;

// A key may have several holders, each a row of its own: a holder is its key and its token.
function holderId(lock) {
  return lock.key + "\n" + lock.token;
}

async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers);
  if (token) headers.Authorization = "Bearer " + token;
  const response = await fetch(path, Object.assign({}, options, { headers }));
  if (response.status === 401) {
    const given = prompt("This dlock serve needs its access token:");
    if (given) { token = given; sessionStorage.setItem("dlock-token", given); }
    throw new Error("the server asked for its access token");
  }
  const body = await response.json().catch(() => ({}));
  return { status: response.status, body };
}

function formatLeft(ms) {
  if (ms <= 0) return "expired";
  if (ms < 1000) return Math.floor(ms) + "ms";
  if (ms < 60000) return (Math.floor(ms / 100) / 10).toFixed(1) + "s";
  const s = Math.floor(ms / 1000);
  if (s < 3600) return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
  return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
}

// A session's length: "10s", "2.5s", "1m30s".
function formatSession(ms) {
  return formatLeft(ms).replace(/\.0s$/, "s");
}

// A lock's ttl_left_ms, read at `fetchedAt` (performance.now()).
function leaseOf(lock, fetchedAt) {
  return { ttl: lock.ttl_left_ms, deadline: fetchedAt + lock.ttl_left_ms };
}

// A lease as shown at `now`: its text for the list, the sentence that explains it (the list's
// title, the detail's text; none for a countdown) and whether it is about to run out.
function timeLeft(lease, now) {
  if (sessionLeases) {
    const span = formatSession(lease.ttl);
    return { text: "session " + span, title: "held while its holder's session lives, and at most " + span +
             " after that session ends", low: false };
  }
  const left = lease.deadline - now;
  return { text: formatLeft(left), title: "", low: left < 10000 };
}

// The backend gives the time since the acquisition by its own clock; the page turns it into
// a time of day, which is as exact as this computer's clock. Unknown where the store keeps none.
function formatAcquired(heldForMs) {
  if (heldForMs === null || heldForMs === undefined) return "unknown";
  return new Date(Date.now() - heldForMs).toISOString().slice(0, 19).replace("T", " ");
}

// Only stores that queue waiters (redis://) know how many there are.
function formatWaiters(waiters) {
  return waiters === null || waiters === undefined ? "\u2013" : String(waiters);
}

// Force-released with the lock delay: the key stays closed until its holder stops. The list
// has room for a word, the detail for the sentence.
const evictedText = "evicted, waiting for its holder to stop";
function evictedBadge(text) {
  const badge = document.createElement("span");
  badge.className = "badge";
  badge.textContent = text;
  badge.title = evictedText;
  return badge;
}

function cell(row, className, text) {
  const td = row.insertCell();
  td.className = className;
  td.textContent = text;
  return td;
}

// A cell whose text may be cut with an ellipsis: the full text is its title. Returns the element
// beside which more may go (a badge).
function clippedCell(row, className, text) {
  const td = cell(row, className, "");
  td.title = text;
  const line = td.appendChild(document.createElement("div"));
  const clip = line.appendChild(document.createElement("span"));
  clip.className = "clip";
  clip.textContent = text;
  return line;
}

// The whole owner, which may break onto more lines only after its separators (@ : . /), unless a
// part is longer than the column.
function ownerCell(row, owner) {
  const td = cell(row, "owner", "");
  for (const part of owner.split(/(?<=[@:./])/)) {
    td.append(part, document.createElement("wbr"));
  }
  return td;
}

function showStatus(text, isError) {
  $("#status").textContent = text;
  $("#status").className = isError ? "error" : "muted";
}

function say(text, isError) {
  $("#message").textContent = text;
  $("#message").className = isError ? "error" : "";
}

function tick() {
  const now = performance.now();
  for (const td of document.querySelectorAll("#locks td.ttl")) {
    const shown = timeLeft(leases.get(holderId(td.parentElement.dataset)), now);
    td.textContent = shown.text;
    td.title = shown.title;
    td.classList.toggle("low", shown.low);
  }
  if (selected) {
    const shown = timeLeft(selected.lease, now);
    $("#detail-ttl").textContent = shown.title || shown.text;
  }
}

let listRequests = 0;  // a refresh started before a search must not overwrite its result
async function refreshLocks() {
  const request = ++listRequests;
  const query = new URLSearchParams({ prefix: $("#prefix").value, after: pageStart, limit: pageSize });
  try {
    const { status, body } = await api("/api/locks?" + query);
    if (request !== listRequests) return;
    if (status !== 200) throw new Error(body.error || "HTTP " + status);
    const fetchedAt = performance.now();
    const tbody = $("#locks tbody");
    const rows = document.createDocumentFragment();
    leases.clear();
    for (const lock of body.locks) {
      leases.set(holderId(lock), leaseOf(lock, fetchedAt));
      const row = document.createElement("tr");
      row.dataset.key = lock.key;
      row.dataset.token = String(lock.token);
      row.classList.toggle("selected", Boolean(selected && holderId(selected) === holderId(lock)));
      row.classList.toggle("evicted", lock.evicted === true);
      clippedCell(row, "key", lock.key);
      const owner = ownerCell(row, lock.owner);
      if (lock.evicted) owner.appendChild(evictedBadge("evicted"));
      cell(row, "mode", lock.mode);
      cell(row, "holds num", String(lock.hold_count));
      cell(row, "token num", String(lock.token));
      cell(row, "acquired", formatAcquired(lock.held_for_ms));
      cell(row, "waiters num", formatWaiters(lock.waiters));
      cell(row, "ttl", "");
      row.addEventListener("click", () => select(lock));
      rows.appendChild(row);
    }
    tbody.replaceChildren(rows);
    nextAfter = body.next_after;
    $("#next-page").disabled = !nextAfter;
    $("#first-page").disabled = pageStart === "";
    $("#count").textContent = body.locks.length + (body.locks.length === 1 ? " lock" : " locks") +
        (nextAfter ? ", more on the next page" : "");
    $("#no-locks").hidden = body.locks.length > 0;
    if (selected && leases.has(holderId(selected))) selected.lease = leases.get(holderId(selected));
    showStatus("updated " + new Date().toLocaleTimeString(), false);
    tick();
  } catch (error) {
    showStatus("cannot list locks: " + error.message, true);
  }
}

async function refreshAudit() {
  try {
    const { status, body } = await api("/api/audit?limit=20");
    if (status !== 200) return;
    const rows = document.createDocumentFragment();
    for (const entry of body.entries) {
      const row = document.createElement("tr");
      row.dataset.key = entry.key;
      cell(row, "at", String(entry.at).replace("T", " ").replace("Z", ""));
      cell(row, "by", entry.by).title = entry.by;
      cell(row, "key", entry.key).title = entry.key;
      cell(row, "delay", entry.lock_delay === undefined ? "\u2013" : entry.lock_delay ? "yes" : "no");
      cell(row, "token num", String(entry.token));
      cell(row, "reason", entry.reason);
      rows.appendChild(row);
    }
    $("#audit tbody").replaceChildren(rows);
  } catch (error) {
    // The list's status line already says what is wrong.
  }
}

function showDetail(lock) {
  $("#detail").hidden = false;
  $("#detail-key").textContent = lock.key;
  $("#detail-owner").textContent = lock.owner;
  $("#detail-mode").textContent = lock.mode;
  $("#detail-token").textContent = String(lock.token);
  $("#detail-holds").textContent = String(lock.hold_count);
  $("#detail-acquired").textContent = formatAcquired(lock.held_for_ms);
  $("#detail-waiters").textContent = formatWaiters(lock.waiters);
  // Stores that keep their queue in order (zookeeper://) name the waiting owners, first first.
  $("#detail-queue").textContent = lock.queue && lock.queue.length ? lock.queue.join(", ") : "\u2013";
  $("#detail-state").replaceChildren(lock.evicted ? evictedBadge(evictedText) : "held");
  tick();
}

async function select(lock) {
  selected = { key: lock.key, owner: lock.owner, token: lock.token,
               lease: leases.get(holderId(lock)) || leaseOf(lock, performance.now()) };
  for (const row of document.querySelectorAll("#locks tbody tr")) {
    row.classList.toggle("selected", holderId(row.dataset) === holderId(lock));
  }
  showDetail(lock);
  say("", false);
  const { status, body } = await api("/api/lock?" + new URLSearchParams({ key: lock.key }));
  if (!selected || holderId(selected) !== holderId(lock)) return;
  const current = status === 200 ? body.holders.find((holder) => holder.token === lock.token) : undefined;
  if (current) {
    selected = { key: current.key, owner: current.owner, token: current.token,
                 lease: leaseOf(current, performance.now()) };
    showDetail(current);
  } else if (status === 200 || status === 404) {
    say(lock.key + " is no longer held by " + lock.owner + ".", false);
  }
}

async function forceRelease() {
  if (!selected) return;
  const lock = selected;
  const reason = $("#reason").value.trim();
  if (!reason) return;
  const immediate = $("#immediate").checked;
  const after = immediate
      ? " The key is free at once: the next holder may start while this one still runs."
      : " The key stays closed until it has stopped, at the latest when its lease runs out.";
  if (!confirm("Force-release " + lock.key + ", held by " + lock.owner + " (token " + lock.token +
               ")? Its holder loses the lock at its next renewal." + after)) {
    return;
  }
  $("#force-release").disabled = true;
  try {
    const { status, body } = await api("/api/force-release", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      // Its token: only the holder shown is evicted, not one that took the key since.
      body: JSON.stringify({ key: lock.key, token: lock.token, reason, by: $("#by").value.trim(), lock_delay: !immediate }),
    });
    if (status === 200) {
      const released = body.released[0];
      say("Released " + released.key + " (token " + released.token + ", held by " + released.owner + ")" +
          (immediate ? ": the key is free." : ": the key opens once its holder has stopped."), false);
      selected = null;
      $("#detail").hidden = true;
      $("#reason").value = "";
      $("#immediate").checked = false;
    } else if (status === 404) {
      say(lock.key + " was no longer held by " + lock.owner + ": nothing released.", false);
    } else {
      say("Not released: " + (body.error || "HTTP " + status), true);
    }
  } catch (error) {
    say("Not released: " + error.message, true);
  } finally {
    $("#force-release").disabled = !$("#reason").value.trim();
    refreshLocks();
    refreshAudit();
  }
}

let searchTimer = 0;
$("#prefix").addEventListener("input", () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(() => { pageStart = ""; refreshLocks(); }, 200);
});
$("#next-page").addEventListener("click", () => { if (nextAfter) { pageStart = nextAfter; refreshLocks(); } });
$("#first-page").addEventListener("click", () => { pageStart = ""; refreshLocks(); });
$("#reason").addEventListener("input", () => { $("#force-release").disabled = !$("#reason").value.trim(); });
$("#force-release").addEventListener("click", forceRelease);

// The store's capabilities before the first list: they decide what its time left means.
const health = api("/healthz").then(({ body }) => {
  $("#backend").textContent = body.backend ? body.backend + "://" : "";
  sessionLeases = Boolean(body.capabilities && body.capabilities.lease_is_the_session);
  $("#locks th.ttl").title = sessionLeases
      ? "This store's locks last as long as their holder's session: a key is freed when its holder " +
        "releases it, or at most this long after the holder's session ends"
      : "";
}).catch(() => {});
health.then(refreshLocks);
refreshAudit();
setInterval(tick, 250);
setInterval(refreshLocks, 2000);
setInterval(refreshAudit, 5000);
</script>
</body>
</html>
)page";

}  // namespace dlock::cli
