// fdprof daemon's live page: fills itself from /report.json (and the flamegraph from
// /flamegraph.svg) when it loads and again at every interval /api/v1/stream announces. Every
// name goes in as text (textContent), never as markup: comms and paths are anyone's to choose.
"use strict";

const $ = (id) => document.getElementById(id);
let busy = false;

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function ns(n) {
  if (n === null || n === undefined) return "-";
  if (n >= 1e9) return (n / 1e9).toFixed(2) + " s";
  if (n >= 1e6) return (n / 1e6).toFixed(2) + " ms";
  if (n >= 1e3) return (n / 1e3).toFixed(1) + " µs";
  return Math.round(n) + " ns";
}

function pct(x) {
  return x === null || x === undefined ? "-" : (100 * x).toFixed(2) + "%";
}

function rate(count, durationNs) {
  return durationNs > 0 ? (count / (durationNs / 1e9)).toFixed(1) : "-";
}

function query(extra) {
  const p = new URLSearchParams(extra || {});
  if ($("window").value) p.set("seconds", $("window").value);
  if ($("target").value) p.set("target", $("target").value);
  return p.toString();
}

function rows(tbody, list, cells) {
  tbody.replaceChildren(...list.map((item) => {
    const tr = el("tr");
    for (const c of cells(item)) tr.append(el("td", c));
    return tr;
  }));
}

function facts(r) {
  const d = r.duration_ns;
  const items = [
    ["target", r.target.description],
    ["window", ns(d)],
    ["probe mode", r.mode],
    ...lockWaits(r, d),
    ["dropped", r.drops.total === 0 ? "nothing" : `${r.drops.total} (figures are lower bounds)`],
    ["fdprof's cost", `programs ${pct(r.own_cost.programs_cpu_share)}, daemon ${pct(r.own_cost.collector_cpu_share)} of a CPU`],
    ["steal", r.steal ? pct(r.steal.share) : "-"],
    ["fd syscalls traced", traced(r, d)],
  ];
  $("facts").replaceChildren(...items.flatMap(([k, v]) => [el("dt", k), el("dd", v)]));
}

// What saw the lock waits: where nothing could, the page says so instead of 0 waits.
function lockWaits(r, d) {
  const c = r.contention;
  if (c.source === "unavailable") {
    return [["lock waits", "unavailable on this kernel in this mode: no lock:contention_begin/end (5.19+), and the spinlock slow-path probe needs fentry or kprobe"]];
  }
  const items = [
    ["file_lock wait", `${ns(c.file_lock_wait_ns)} (${pct(d ? c.file_lock_wait_ns / d : null)} of a CPU)`],
    ["all lock waits", `${c.count} waits, ${ns(c.total_wait_ns)}`],
  ];
  if (c.source === "slow_path") items.push(["lock waits seen by", "the spinlock slow-path probe: spinlocks only, no mutex or rwsem (no lock:contention_begin/end before 5.19)"]);
  return items;
}

// The daemon at rest traces the fd syscalls only in windows: the figures below cover those.
function traced(r, d) {
  const t = r.full_tracing;
  if (!t) return r.fd_activity_recorded ? "throughout (--tier full)" : "never (--lock-only)";
  const n = t.windows.length;
  return `${ns(t.traced_ns)} of ${ns(d)} (${pct(d ? t.traced_ns / d : null)}), in ${n} window${n === 1 ? "" : "s"} of full tracing; at rest the rest of the time`;
}

function diagnosis(r) {
  const found = r.diagnosis.findings;
  if (found.length === 0) {
    $("diagnosis").replaceChildren(el("p", "nothing found in this window"));
    return;
  }
  $("diagnosis").replaceChildren(...found.map((f) => {
    const div = el("div", undefined, "finding");
    div.append(el("p", f.summary));
    div.append(el("p", `remedy: ${f.remedy.change} (${f.remedy.saving})`, "remedy"));
    return div;
  }));
}

function stacks(r) {
  $("stacks").replaceChildren(...r.top_stacks.slice(0, 10).map((s) => {
    const li = el("li");
    li.append(el("div", `${s.lock} ${s.operation}: ${s.count} waits, ${ns(s.total_wait_ns)}`));
    const frames = (list) => list.map((f) => f.function).join(" ← ");
    li.append(el("div", "k: " + frames(s.kernel_stack), "stack"));
    if (s.user_stack.length) li.append(el("div", "u: " + frames(s.user_stack), "stack"));
    return li;
  }));
}

function fdTable(r) {
  const d = r.duration_ns;
  rows($("syscalls").tBodies[0], r.syscalls, (s) =>
    [s.name, rate(s.calls, d), rate(s.allocs, d), rate(s.fds_closed, d), s.errors]);
  const hit = r.scan.next_fd_hit_rate;
  $("scan").textContent = `${r.scan.allocations} allocations, next_fd hit ${pct(hit)}`;
  rows($("scanhist").tBodies[0], r.scan.bits.buckets, (b) =>
    [b.low === b.high ? b.low : `${b.low}–${b.high}`, b.count]);
}

async function flamegraph() {
  const url = "/flamegraph.svg?" + query({ op: $("op").value, lock: $("lock").value });
  $("zoom").href = url;
  const answer = await fetch(url);
  if (!answer.ok) {
    $("flamegraph").replaceChildren(el("p", (await answer.text()).trim()));
    return;
  }
  // Shown inline as a picture: its script and handlers (zoom, search) stay with the link. The
  // handlers go before parsing (a parsed one is refused by the page's policy, loudly).
  const text = (await answer.text()).replace(/\son[a-z]+="[^"]*"/g, "");
  const doc = new DOMParser().parseFromString(text, "image/svg+xml");
  for (const s of doc.querySelectorAll("script")) s.remove();
  $("flamegraph").replaceChildren(document.importNode(doc.documentElement, true));
}

async function targets() {
  const answer = await fetch("/api/v1/targets");
  if (!answer.ok) return;
  const names = await answer.json();
  const chosen = $("target").value;
  const options = [el("option", "all targets")];
  options[0].value = "";
  for (const n of names) {
    const o = el("option", n);
    o.value = n;
    options.push(o);
  }
  $("target").replaceChildren(...options);
  $("target").value = names.includes(chosen) ? chosen : "";
}

async function refresh() {
  if (busy) return;
  busy = true;
  try {
    const answer = await fetch("/report.json?" + query());
    if (!answer.ok) {
      $("status").textContent = (await answer.text()).trim();
      return;
    }
    const r = await answer.json();
    facts(r);
    diagnosis(r);
    rows($("contention").tBodies[0], r.contention.by_lock_operation, (c) => [
      c.lock, c.operation, rate(c.count, r.duration_ns),
      pct(r.duration_ns ? c.total_wait_ns / r.duration_ns : null),
      ns(c.avg_wait_ns), ns(c.p99_wait_ns), ns(c.max_wait_ns), pct(c.share_of_lock)]);
    stacks(r);
    fdTable(r);
    await flamegraph();
    $("status").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    $("status").textContent = "cannot read the daemon: " + e;
  } finally {
    busy = false;
  }
}

// The flight recorder's captures (--capture-on), newest first, each a link to its recording.
async function captures() {
  const list = $("captures");
  const answer = await fetch("/captures");
  if (!answer.ok) {
    list.replaceChildren(el("li", (await answer.text()).trim()));
    return;
  }
  const c = await answer.json();
  if (c.captures.length === 0) {
    list.replaceChildren(el("li", "none yet, in " + c.dir));
    return;
  }
  list.replaceChildren(...c.captures.slice().reverse().map((x) => {
    const a = el("a", x.name);
    a.href = "/captures/" + encodeURIComponent(x.name);
    const li = el("li");
    li.append(a, el("span", ` ${Math.ceil(x.bytes / 1024)} KiB, written ${new Date(x.modified_unix_ms).toLocaleString()}`));
    return li;
  }));
}

function start() {
  for (const id of ["target", "window", "op", "lock"]) $(id).addEventListener("change", refresh);
  // The first fill from /report.json; the stream, which never ends, from a moment later (a
  // headless browser waits for the fetches under way before it deems the page loaded).
  targets().then(refresh).then(captures).then(() => setTimeout(follow, 2000));
  setInterval(targets, 10000);
}

function follow() {
  const stream = new EventSource("/api/v1/stream");
  stream.addEventListener("interval", () => {
    if (!$("pause").checked) refresh();
  });
  stream.addEventListener("capture", captures);
}

document.addEventListener("DOMContentLoaded", start);
