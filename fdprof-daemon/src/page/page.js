// fdprof daemon's live page: fills itself from /report.json (and the flamegraph from
// /flamegraph.svg) when it loads and again at every interval /api/v1/stream announces. Every
// name goes in as text (textContent), never as markup: comms and paths are anyone's to choose.
// The timeline on top draws /api/v1/timeline; a range selected on it (and a base range to
// compare with) goes into every request as from/to (base_from/base_to), and into the page's
// URL, so that a link reproduces the view. The page computes no figure of its own.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
let busy = false;
// The range chosen on the timeline and the base range compared with it: Unix ms, or null.
const chosen = { range: null, base: null };
// The timeline's points (kept intervals, oldest first), the captures, the keyboard's cursor.
let points = [];
let captureList = [];
let cursor = -1;

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
  if (chosen.range) {
    p.set("from", chosen.range.from);
    p.set("to", chosen.range.to);
  } else if ($("window").value) {
    p.set("seconds", $("window").value);
  }
  if ($("target").value) p.set("target", $("target").value);
  return p.toString();
}

// The ranges and the target as the page's own URL (the credential never: it is the cookie's).
function toUrl() {
  const p = new URLSearchParams();
  if ($("target").value) p.set("target", $("target").value);
  for (const [name, r] of [["", chosen.range], ["base_", chosen.base]]) {
    if (!r) continue;
    p.set(name + "from", r.from);
    p.set(name + "to", r.to);
  }
  const q = p.toString();
  history.replaceState(null, "", q ? "?" + q : location.pathname);
}

function fromUrl() {
  const p = new URLSearchParams(location.search);
  const pair = (a, b) => {
    const from = Number(p.get(a)), to = Number(p.get(b));
    return p.has(a) && p.has(b) && from < to ? { from, to } : null;
  };
  chosen.range = pair("from", "to");
  chosen.base = pair("base_from", "base_to");
  return p.get("target") || "";
}

function utc(ms) {
  return new Date(ms).toISOString().replace("T", " ").slice(0, 19) + " UTC";
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
    [s.name, s.calls, rate(s.calls, d), rate(s.allocs, d), rate(s.fds_closed, d), s.errors]);
  const hit = r.scan.next_fd_hit_rate;
  $("scan").textContent = `${r.scan.allocations} allocations, next_fd hit ${pct(hit)}`;
  rows($("scanhist").tBodies[0], r.scan.bits.buckets, (b) =>
    [b.low === b.high ? b.low : `${b.low}–${b.high}`, b.count]);
}

// In a frame of its own, so inferno's script runs (zoom, search, the frame under the pointer
// named with its wait and share), sandboxed: it reaches nothing of the page. Against the base
// range, the differential one. Reloaded only when what it shows changes.
function flamegraph() {
  const extra = { op: $("op").value, lock: $("lock").value };
  if (chosen.range && chosen.base) {
    extra.base_from = chosen.base.from;
    extra.base_to = chosen.base.to;
  }
  const url = "/flamegraph.svg?" + query(extra);
  $("zoom").href = url;
  if ($("flamegraph").getAttribute("src") !== url || !chosen.range) $("flamegraph").src = url;
}

async function targets() {
  const answer = await fetch("/api/v1/targets");
  if (!answer.ok) return;
  const names = await answer.json();
  const wanted = $("target").value || initialTarget;
  const options = [el("option", "all targets")];
  options[0].value = "";
  for (const n of names) {
    const o = el("option", n);
    o.value = n;
    options.push(o);
  }
  $("target").replaceChildren(...options);
  $("target").value = names.includes(wanted) ? wanted : "";
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
    flamegraph();
    await timeline();
    await comparison();
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
  captureList = c.captures;
  draw();
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

// --- The timeline ---------------------------------------------------------------------

function svg(tag, attrs, title) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (title !== undefined) {
    const t = document.createElementNS(SVG, "title");
    t.textContent = title;
    e.append(t);
  }
  return e;
}

async function timeline() {
  const target = $("target").value;
  const answer = await fetch("/api/v1/timeline" + (target ? "?target=" + encodeURIComponent(target) : ""));
  if (!answer.ok) return;
  points = (await answer.json()).points;
  draw();
}

function ends(p) {
  return p.start_unix_ms + p.duration_ms;
}

// An interval's time traced in full: all of it, part, or none (the daemon at rest).
function tier(p) {
  const all = p.duration_ms * 1e6;
  if (p.traced_in_full_ns >= all * 0.999) return "full";
  return p.traced_in_full_ns > 0 ? "part" : "rest";
}

function describe(p) {
  const wait = p.file_lock_wait_cpus === null ? "-" : pct(p.file_lock_wait_cpus);
  const calls = p.fd_syscalls_per_s === null ? "not traced" : `${p.fd_syscalls} fd syscalls (${p.fd_syscalls_per_s.toFixed(1)}/s)`;
  const traced = { full: "traced in full", part: "traced in full in part", rest: "at rest" }[tier(p)];
  return `${utc(p.start_unix_ms)}, ${p.duration_ms} ms: file_lock wait ${wait} of a CPU (${p.file_lock_waits} waits), ${calls}, ${traced}`;
}

// The time at horizontal position `x` of the view box (0 to 1000), and back.
function scale() {
  const t0 = points.length ? points[0].start_unix_ms : 0;
  const t1 = points.length ? ends(points[points.length - 1]) : 1;
  return {
    x: (ms) => ((ms - t0) / Math.max(t1 - t0, 1)) * 1000,
    ms: (x) => t0 + (x / 1000) * (t1 - t0),
    t0,
    t1,
  };
}

function draw() {
  const s = scale();
  const most = (f, floor) => Math.max(floor, ...points.map((p) => f(p) || 0));
  const wait = most((p) => p.file_lock_wait_cpus, 0.001);
  const calls = most((p) => p.fd_syscalls_per_s, 1);
  const marks = [svg("line", { x1: 0, x2: 1000, y1: 50, y2: 50, class: "axis" })];
  for (const p of points) {
    const x = s.x(p.start_unix_ms);
    const w = Math.max(s.x(ends(p)) - x, 0.5);
    const hw = (48 * (p.file_lock_wait_cpus || 0)) / wait;
    const hc = (48 * (p.fd_syscalls_per_s || 0)) / calls;
    const g = svg("g", { class: "mark " + tier(p) }, describe(p));
    g.append(
      svg("rect", { x, y: 0, width: w, height: 100, fill: "transparent" }),
      svg("rect", { x, y: 50 - hw, width: w, height: hw, class: "wait" }),
      svg("rect", { x, y: 50, width: w, height: hc, class: "calls" }),
    );
    marks.push(g);
  }
  for (const [r, cls] of [[chosen.base, "base"], [chosen.range, "selection"]]) {
    if (!r) continue;
    const x = Math.max(s.x(r.from), 0);
    const w = Math.min(s.x(r.to), 1000) - x;
    if (w > 0) marks.push(svg("rect", { x, y: 0, width: w, height: 100, class: cls }, `${cls === "base" ? "base range" : "range"} ${utc(r.from)} to ${utc(r.to)}`));
  }
  for (const c of captureList) {
    if (c.modified_unix_ms < s.t0 || c.modified_unix_ms > s.t1) continue;
    const a = svg("a", { href: "/captures/" + encodeURIComponent(c.name), class: "capture-link" });
    const x = s.x(c.modified_unix_ms);
    a.append(svg("line", { x1: x, x2: x, y1: 0, y2: 100, class: "capture" }, `capture ${c.name}, ${utc(c.modified_unix_ms)}`));
    marks.push(a);
  }
  if (cursor >= 0 && cursor < points.length) {
    const p = points[cursor];
    marks.push(svg("rect", { x: s.x(p.start_unix_ms), y: 0, width: Math.max(s.x(ends(p)) - s.x(p.start_unix_ms), 0.5), height: 100, class: "cursor" }));
  }
  $("timeline").replaceChildren(...marks);
  const shown = (r) => `${utc(r.from)} to ${utc(r.to)}`;
  $("range").textContent = chosen.range
    ? "range " + shown(chosen.range) + (chosen.base ? ", compared with the base range " + shown(chosen.base) : "")
    : chosen.base ? "base range " + shown(chosen.base) + ": select a range to compare with it" : "showing the window chosen above";
  $("window").disabled = chosen.range !== null;
}

// A selection was made or cleared: the URL, the marks and every figure follow it.
function changed() {
  toUrl();
  draw();
  refresh();
}

// Dragging selects a range (with shift, the base range); a click, the interval under it.
// From the keyboard: ← → move over the intervals (shift extends), b makes the range the base,
// Esc clears.
function timelineInput(view) {
  let drag = null;
  const at = (e) => {
    const box = view.getBoundingClientRect();
    return scale().ms(((e.clientX - box.left) / Math.max(box.width, 1)) * 1000);
  };
  const interval = (ms) => points.findIndex((p) => p.start_unix_ms <= ms && ms < ends(p));
  view.addEventListener("pointerdown", (e) => {
    if (e.target.closest && e.target.closest("a")) return;
    e.preventDefault(); // no text selected while dragging, so focus by hand
    view.focus();
    drag = { from: at(e), base: e.shiftKey };
    view.setPointerCapture(e.pointerId);
  });
  view.addEventListener("pointerup", (e) => {
    if (!drag) return;
    let [from, to] = [drag.from, at(e)].sort((a, b) => a - b);
    const i = interval(from);
    if (to - from < (scale().t1 - scale().t0) / 500 && i >= 0) [from, to] = [points[i].start_unix_ms, ends(points[i])];
    chosen[drag.base ? "base" : "range"] = { from: Math.round(from), to: Math.round(to) };
    drag = null;
    changed();
  });
  view.addEventListener("keydown", (e) => {
    if (e.key === "Escape") {
      chosen.range = chosen.base = null;
      cursor = -1;
    } else if (e.key === "b" && chosen.range) {
      chosen.base = chosen.range;
      chosen.range = null;
    } else if ((e.key === "ArrowLeft" || e.key === "ArrowRight") && points.length) {
      const start = cursor < 0 ? points.length - 1 : cursor;
      cursor = Math.min(Math.max(start + (e.key === "ArrowLeft" ? -1 : 1), 0), points.length - 1);
      const p = points[cursor];
      const r = e.shiftKey && chosen.range ? chosen.range : { from: p.start_unix_ms, to: ends(p) };
      chosen.range = { from: Math.min(r.from, p.start_unix_ms), to: Math.max(r.to, ends(p)) };
    } else {
      return;
    }
    e.preventDefault();
    changed();
  });
}

// The base range against the range: what changed most, as the daemon compares them.
async function comparison() {
  const shown = chosen.range && chosen.base;
  $("comparison").hidden = !shown;
  if (!shown) return;
  const answer = await fetch("/api/v1/compare?" + query({ base_from: chosen.base.from, base_to: chosen.base.to }));
  if (!answer.ok) {
    $("changes").tBodies[0].replaceChildren(el("tr", (await answer.text()).trim()));
    return;
  }
  const c = await answer.json();
  const names = { lock_wait: "lock wait", lock_waits: "lock waits", syscall: "fd syscall calls", scan: "scan" };
  const value = (row, n) => (row.section === "lock_wait" ? ns(n) : n);
  const perS = (x) => (x === null ? "-" : x.toFixed(1));
  $("changes").tBodies[0].replaceChildren(...c.rows.map((row) => {
    const tr = el("tr");
    const sign = row.change > 0 ? "+" : row.change < 0 ? "−" : "";
    const change = el("td", `${sign}${value(row, Math.abs(row.change))} (${sign}${Math.abs(100 * row.relative).toFixed(0)}%)`, row.change < 0 ? "down" : row.change > 0 ? "up" : "");
    tr.append(el("td", names[row.section]), el("td", row.name), el("td", value(row, row.base)), el("td", value(row, row.new)), change, el("td", perS(row.base_per_s)), el("td", perS(row.new_per_s)));
    return tr;
  }));
}

let initialTarget = "";

function start() {
  initialTarget = fromUrl();
  for (const id of ["window", "op", "lock"]) $(id).addEventListener("change", refresh);
  $("target").addEventListener("change", () => {
    toUrl();
    refresh();
  });
  timelineInput($("timeline"));
  // The first fill from /report.json; the stream, which never ends, from a moment later (a
  // headless browser waits for the fetches under way before it deems the page loaded).
  targets().then(() => { toUrl(); }).then(refresh).then(captures).then(() => setTimeout(follow, 2000));
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
