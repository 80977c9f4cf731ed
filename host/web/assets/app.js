// The flowbox web view: the runs page (/) and a run page (/runs/ID), drawn from the JSON API
// and kept live by polling (runs) and server-sent events (a run). Everything a script or a
// model wrote goes into the page as text (textContent), never as markup.
"use strict";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key === "onclick") node.addEventListener("click", value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

async function api(path) {
  const response = await fetch("/api" + path);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function duration(ms) {
  if (ms === null || ms === undefined) return "";
  if (ms < 1000) return ms + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
  return Math.floor(ms / 60000) + " min " + Math.round((ms % 60000) / 1000) + " s";
}

function when(unixMs) {
  return new Date(unixMs).toLocaleString();
}

function statusBadge(status) {
  return el("span", { class: "status " + status, "data-status": status }, status);
}

function pretty(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

const app = document.getElementById("app");
const where = document.getElementById("where");

// ---- the runs page ----

function runsPage() {
  where.textContent = "runs";
  document.title = "flowbox — runs";
  const search = el("input", { type: "search", placeholder: "search by name", id: "search" });
  const filter = el("select", { id: "filter" },
    ...["all", "running", "resumable", "succeeded", "failed"].map((s) => el("option", { value: s }, s)));
  const body = el("tbody", { id: "runs" });
  const damaged = el("p", { class: "error-text", id: "damaged" });
  app.replaceChildren(
    el("div", { class: "controls" }, search, filter),
    el("table", {},
      el("thead", {}, el("tr", {},
        el("th", {}, "name"), el("th", {}, "status"), el("th", {}, "started"),
        el("th", { class: "num" }, "duration"), el("th", { class: "num" }, "leaves"),
        el("th", { class: "num" }, "tokens"), el("th", {}, "thread"))),
      body),
    damaged);
  let threads = [];
  function draw() {
    const words = search.value.trim().toLowerCase();
    const wanted = filter.value;
    const rows = threads
      .filter((t) => wanted === "all" || t.status === wanted)
      .filter((t) => !words || (t.name || "").toLowerCase().includes(words))
      .map((t) => el("tr", { class: "row", "data-thread": t.thread_id,
          onclick: () => go("/runs/" + encodeURIComponent(t.thread_id)) },
        el("td", {}, t.name || "(unnamed)"), el("td", {}, statusBadge(t.status)),
        el("td", {}, when(t.created_unix_ms)), el("td", { class: "num" }, duration(t.duration_ms)),
        el("td", { class: "num" }, t.leaves), el("td", { class: "num" }, t.tokens),
        el("td", { class: "muted" }, t.thread_id)));
    body.replaceChildren(...rows);
    if (!rows.length) body.append(el("tr", {}, el("td", { colspan: 7, class: "muted" }, "no runs")));
  }
  search.addEventListener("input", draw);
  filter.addEventListener("change", draw);
  async function refresh() {
    try {
      const listing = await api("/threads");
      threads = listing.threads;
      damaged.textContent = listing.damaged.join("\n");
      draw();
    } catch (error) {
      damaged.textContent = String(error.message);
    }
  }
  refresh();
  const timer = setInterval(refresh, 1000);
  return () => clearInterval(timer);
}

// ---- a run page ----

function runPage(threadId) {
  where.textContent = "run " + threadId;
  document.title = "flowbox — " + threadId;
  const state = { leaves: new Map(), tree: { groups: new Map(), leaves: [] }, phases: [],
    phase: null, logs: [], selected: null, thread: null,
    // The timeline: the run's start and end (µs since the epoch), its rows in order, the
    // phases as they were entered, and the zoom (null: fit the run to the width).
    t0: null, t1: null, rows: [], rowOf: new Map(), rowByCall: new Map(), entered: [],
    pxPerMs: null };
  const header = el("div", { id: "run-header" });
  const phases = el("div", { class: "phases", id: "phases" });
  const tree = el("div", { id: "tree" });
  const logs = el("pre", { id: "logs" });
  const outcome = el("div", { id: "outcome" });
  const detail = el("div", { id: "detail" }, el("p", { class: "muted" }, "Click a leaf to see it."));
  const source = el("ol", { class: "source", id: "source" });
  const totals = el("div", { class: "totals", id: "totals" });
  const timeline = el("div", { class: "timeline", id: "timeline", tabindex: "0",
    "aria-label": "timeline: arrows move between leaves, + and - zoom, 0 fits" });
  const timelineInfo = el("span", { class: "muted", id: "timeline-info" });
  const zoom = (factor) => {
    state.pxPerMs = (state.pxPerMs || fitScale()) * factor;
    drawTimeline();
  };
  const tools = el("div", { class: "timeline-tools" },
    el("button", { id: "zoom-out", title: "zoom out (-)", onclick: () => zoom(0.5) }, "−"),
    el("button", { id: "zoom-in", title: "zoom in (+)", onclick: () => zoom(2) }, "+"),
    el("button", { id: "zoom-fit", title: "fit (0)", onclick: () => { state.pxPerMs = null; drawTimeline(); } }, "fit"),
    timelineInfo);
  app.replaceChildren(header, phases,
    el("section", {}, el("h2", {}, "timeline"), tools, timeline),
    el("div", { class: "layout" },
      el("div", {},
        el("section", {}, el("h2", {}, "leaves"), tree),
        el("section", {}, el("h2", {}, "outcome"), outcome, totals),
        el("section", {}, el("h2", {}, "log"), logs)),
      el("div", {},
        el("section", {}, el("h2", {}, "leaf"), detail),
        el("section", {}, el("h2", {}, "script"), source))));

  function drawHeader() {
    const t = state.thread;
    if (!t) return;
    const parts = [el("h2", {}, t.name || "(unnamed)", " ", statusBadge(t.status))];
    parts.push(el("div", { class: "muted" }, "thread " + t.thread_id + " · started " +
      when(t.created_unix_ms)));
    if (t.resume_command) {
      parts.push(el("p", {}, "Resume it with ", el("code", { class: "cmd", id: "resume" },
        t.resume_command)));
    }
    header.replaceChildren(...parts);
    const errorLine = t.outcome && t.outcome.error ? t.outcome.error.line : null;
    source.replaceChildren(...t.script.split("\n").map((line, n) =>
      el("li", { class: n + 1 === errorLine ? "error" : "", "data-line": n + 1 }, line)));
    if (t.outcome) {
      const o = t.outcome;
      outcome.replaceChildren(o.ok
        ? el("pre", { id: "result" }, JSON.stringify(o.result, null, 2))
        : el("div", { id: "error" },
            el("p", { class: "error-text" }, (o.error.exception || o.error.kind) + ": " +
              o.error.message),
            o.error.line ? el("p", {}, "at line " + o.error.line + " of the script") : null));
      const s = o.summary;
      totals.replaceChildren(el("span", {}, "leaves " + s.leaves),
        el("span", {}, "tokens " + s.tokens_spent), el("span", {}, "fuel " + s.fuel_used),
        el("span", {}, "duration " + duration(s.duration_ms)));
    } else {
      outcome.replaceChildren(el("p", { class: "muted" }, t.status === "resumable"
        ? "stopped before its end" : "running…"));
      totals.replaceChildren(el("span", {}, "leaves " + t.leaves), el("span", {}, "tokens " + t.tokens));
    }
  }

  function drawPhases() {
    const done = new Set();
    let seen = true;
    for (const p of state.phases) {
      if (p.title === state.phase) seen = false;
      if (seen && state.phase) done.add(p.title);
    }
    phases.replaceChildren(...state.phases.map((p) => el("span", {
      class: "phase" + (p.title === state.phase ? " current" : done.has(p.title) ? " done" : ""),
      title: p.detail || "" }, p.title)));
  }

  function leafNode(leaf) {
    const node = el("div", { class: "leaf " + leaf.status, "data-call": leaf.call_id,
        "data-status": leaf.status, onclick: () => select(leaf.call_id) },
      el("div", { class: "label" }, leaf.label),
      el("div", { class: "meta" }, leaf.status +
        (leaf.duration_ms !== undefined ? " · " + duration(leaf.duration_ms) : "") +
        (leaf.tokens !== undefined ? " · " + leaf.tokens + " tok" : "") +
        (leaf.replayed ? " · replayed" : "")));
    if (state.selected === leaf.call_id) node.classList.add("selected");
    return node;
  }

  // A node of the tree holds the leaves started at that place and the groups opened there.
  // A parallel is drawn as a fan: one hub, its branches side by side below it. A pipeline is
  // drawn as lanes: one row per item, one column per stage, each cell what that item did in
  // that stage. Groups from events recorded before kinds were are drawn as fans.
  function drawNode(node) {
    const out = [];
    for (const id of node.leaves) out.push(leafNode(state.leaves.get(id)));
    for (const [groupId, group] of [...node.groups].sort((a, b) => a[0] - b[0])) {
      out.push(group.kind === "pipeline" ? drawLanes(groupId, group) : drawFan(groupId, group));
    }
    return out;
  }

  function items(n) {
    return n + (n === 1 ? " item" : " items");
  }

  function drawFan(groupId, group) {
    const kind = group.kind || "group";
    const branches = [...group.slots].sort((a, b) => a[0] - b[0]).map(([index, slot]) =>
      el("div", { class: "branch", "data-branch": index }, ...drawNode(slot.node)));
    return el("div", { class: "group fan", "data-group": groupId, "data-kind": kind },
      el("div", { class: "hub" }, kind + " " + groupId + " · " + items(group.size)),
      el("div", { class: "branches" }, ...branches));
  }

  function drawLanes(groupId, group) {
    let stages = 0;
    for (const slot of group.slots.values()) stages = Math.max(stages, ...slot.stages.keys());
    const head = [el("div", { class: "lane-head" }, "item")];
    for (let stage = 1; stage <= stages; stage++) {
      head.push(el("div", { class: "lane-head" }, "stage " + stage));
    }
    const rows = [];
    for (const [index, slot] of [...group.slots].sort((a, b) => a[0] - b[0])) {
      const cells = [el("div", { class: "lane-item" }, "item " + index)];
      for (let stage = 1; stage <= stages; stage++) {
        const node = slot.stages.get(stage);
        cells.push(el("div", { class: "cell", "data-stage": stage },
          ...(node ? drawNode(node) : [])));
      }
      rows.push(el("div", { class: "lane", "data-item": index }, ...cells));
    }
    const grid = el("div", { class: "grid" }, el("div", { class: "lane head" }, ...head), ...rows);
    grid.style.setProperty("--stages", String(stages));
    return el("div", { class: "group lanes", "data-group": groupId, "data-kind": "pipeline" },
      el("div", { class: "hub" }, "pipeline " + groupId + " · " + items(group.size)), grid);
  }

  // ---- the timeline: a row per leaf (a pipeline item's stages side by side in one row),
  // grouped by phase and by group; a bar from start to end, the wait for a slot before it.

  const LABEL_PX = 180;

  function nowUs() {
    return state.t1 || Date.now() * 1000;
  }

  function fitScale() {
    const width = Math.max(200, timeline.clientWidth - LABEL_PX - 24);
    return width / Math.max(1, (nowUs() - state.t0) / 1000);
  }

  // The row a leaf is drawn in: its pipeline item's, or one of its own.
  function rowFor(leaf, path) {
    let key = "call " + leaf.call_id;
    const item = [...path].reverse().find((pos) => pos.kind === "pipeline");
    if (item) key = "pipeline " + item.group + " item " + item.index;
    let row = state.rowOf.get(key);
    if (!row) {
      const outer = path[0];
      row = { key, phase: leaf.phase, leaves: [], group: outer ? outer.group : 0,
        groupKind: outer ? outer.kind || "group" : null, groupSize: outer ? outer.size : 0,
        index: item ? item.index : outer ? outer.index : 0, order: state.rows.length,
        label: item ? "item " + item.index : leaf.label };
      state.rowOf.set(key, row);
      state.rows.push(row);
    }
    row.leaves.push(leaf.call_id);
    state.rowByCall.set(leaf.call_id, row);
    return row;
  }

  function niceStep(ms) {
    for (const step of [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000, 300000]) {
      if (step >= ms) return step;
    }
    return 600000;
  }

  function drawPhaseRail() {
    // Per phase: the leaves started in it, their tokens, and how long it lasted.
    const stats = new Map(state.entered.map((p) => [p.title, { leaves: 0, tokens: 0, failed: 0 }]));
    for (const leaf of state.leaves.values()) {
      const stat = stats.get(leaf.phase);
      if (!stat) continue;
      stat.leaves += 1;
      stat.tokens += leaf.tokens || 0;
      if (leaf.status === "failed") stat.failed += 1;
    }
    return state.entered.map((p, i) => {
      const end = i + 1 < state.entered.length ? state.entered[i + 1].at : nowUs();
      const stat = stats.get(p.title);
      return { title: p.title, text: p.title + " · " + stat.leaves + " leaves · " + stat.tokens +
        " tok" + (stat.failed ? " · " + stat.failed + " failed" : "") + " · " +
        duration(Math.round((end - p.at) / 1000)) };
    });
  }

  let timelinePending = false;
  function drawTimeline() {
    if (timelinePending) return;
    timelinePending = true;
    requestAnimationFrame(() => {
      timelinePending = false;
      renderTimeline();
    });
  }

  function renderTimeline() {
    if (state.t0 === null) {
      timeline.replaceChildren(el("p", { class: "muted" }, state.leaves.size
        ? "this run's events have no times (recorded by an older flowbox)" : "no leaves yet"));
      return;
    }
    const scale = state.pxPerMs || fitScale();
    const x = (us) => LABEL_PX + Math.max(0, (us - state.t0) / 1000) * scale;
    const end = nowUs();
    const spanMs = Math.max(1, (end - state.t0) / 1000);
    const inner = LABEL_PX + spanMs * scale + 24;
    const out = [];
    // The axis.
    const step = niceStep(90 / scale);
    const axis = el("div", { class: "tl-axis" });
    for (let t = 0; t <= spanMs - step / 2 || t === 0; t += step) {
      const tick = el("span", { class: "tl-tick" }, duration(t));
      tick.style.left = (LABEL_PX + t * scale) + "px";
      axis.append(tick);
    }
    out.push(axis);
    // Rows by phase (in the order entered; leaves before any phase first), then by group.
    const rail = new Map(drawPhaseRail().map((p) => [p.title, p.text]));
    const phaseOrder = [null, ...state.entered.map((p) => p.title)];
    const intervals = [];
    for (const phase of phaseOrder) {
      const rows = state.rows.filter((row) => row.phase === phase)
        .sort((a, b) => a.group - b.group || a.index - b.index || a.order - b.order);
      if (!rows.length && phase === null) continue;
      if (phase !== null) {
        out.push(el("div", { class: "tl-phase", "data-phase": phase }, rail.get(phase)));
      }
      let group = -1;
      for (const row of rows) {
        if (row.group !== group) {
          group = row.group;
          if (group) {
            out.push(el("div", { class: "tl-group", "data-group": group },
              row.groupKind + " " + group + " · " + row.groupSize + (row.groupSize === 1 ? " item" : " items")));
          }
        }
        const line = el("div", { class: "tl-row", "data-row": row.key },
          el("span", { class: "tl-label", title: row.label }, row.label));
        // Bars that overlap in one row (a parallel inside a pipeline's stage) get lanes.
        const laneEnds = [];
        for (const callId of row.leaves) {
          const leaf = state.leaves.get(callId);
          const from = leaf.start_us - leaf.waited_ms * 1000;
          let lane = laneEnds.findIndex((laneEnd) => laneEnd <= from);
          if (lane === -1) lane = laneEnds.length;
          laneEnds[lane] = leaf.end_us || Infinity;
          const top = 3 + lane * 15 + "px";
          if (leaf.waited_ms) {
            const wait = el("span", { class: "tl-wait", title: "waited " + duration(leaf.waited_ms) + " for a slot" });
            wait.style.left = x(leaf.start_us - leaf.waited_ms * 1000) + "px";
            wait.style.width = Math.max(1, leaf.waited_ms * scale) + "px";
            wait.style.top = top;
            line.append(wait);
          }
          const stop = leaf.end_us || end;
          intervals.push([leaf.start_us, stop]);
          const bar = el("span", { class: "tl-bar " + leaf.status + (leaf.replayed ? " replayed" : ""),
            "data-call": leaf.call_id, "data-status": leaf.status,
            title: leaf.label + " · " + leaf.status + " · " + duration(Math.round((stop - leaf.start_us) / 1000)) +
              (leaf.tokens !== undefined ? " · " + leaf.tokens + " tok" : ""),
            onclick: () => select(leaf.call_id) });
          bar.style.left = x(leaf.start_us) + "px";
          bar.style.width = Math.max(2, (stop - leaf.start_us) / 1000 * scale) + "px";
          bar.style.top = top;
          if (state.selected === leaf.call_id) bar.classList.add("selected");
          line.append(bar);
        }
        line.style.height = 3 + Math.max(1, laneEnds.length) * 15 + "px";
        out.push(line);
      }
    }
    for (const node of out) node.style.width = inner + "px";
    const scroll = timeline.scrollLeft;
    timeline.replaceChildren(...out);
    timeline.scrollLeft = scroll;
    // How many ran at once at most: the concurrency limit shows as the most bars overlapping.
    const edges = intervals.flatMap(([a, b]) => [[a, 1], [b, -1]]).sort((p, q) => p[0] - q[0] || p[1] - q[1]);
    let running = 0;
    let most = 0;
    for (const [, delta] of edges) {
      running += delta;
      most = Math.max(most, running);
    }
    timelineInfo.textContent = state.leaves.size + " leaves · at most " + most + " at once · " +
      duration(Math.round(spanMs));
    timelineInfo.dataset.most = String(most);
  }

  // Keyboard: up and down move between leaves in the timeline's order, + and - zoom, 0 fits.
  timeline.addEventListener("keydown", (event) => {
    if (event.key === "+" || event.key === "=") zoom(2);
    else if (event.key === "-") zoom(0.5);
    else if (event.key === "0") { state.pxPerMs = null; drawTimeline(); }
    else if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      const bars = [...timeline.querySelectorAll(".tl-bar")].map((bar) => Number(bar.dataset.call));
      if (!bars.length) return;
      const at = bars.indexOf(state.selected);
      const next = event.key === "ArrowDown" ? Math.min(bars.length - 1, at + 1) : Math.max(0, at - 1);
      select(bars[at === -1 ? 0 : next]);
      const bar = timeline.querySelector(`.tl-bar[data-call="${bars[at === -1 ? 0 : next]}"]`);
      if (bar) bar.scrollIntoView({ block: "nearest", inline: "nearest" });
    } else return;
    event.preventDefault();
  });

  let drawPending = false;
  function drawTree() {
    if (drawPending) return;
    drawPending = true;
    requestAnimationFrame(() => {
      drawPending = false;
      tree.replaceChildren(...drawNode(state.tree));
      if (!state.leaves.size) tree.append(el("p", { class: "muted" }, "no leaves yet"));
    });
  }

  function newNode() {
    return { groups: new Map(), leaves: [] };
  }

  // A leaf's path: for each enclosing group, the item it is in and, in a pipeline, the stage.
  function place(callId, path) {
    let node = state.tree;
    for (const pos of path) {
      if (!node.groups.has(pos.group)) {
        node.groups.set(pos.group, { kind: pos.kind, size: pos.size, slots: new Map() });
      }
      const group = node.groups.get(pos.group);
      if (!group.slots.has(pos.index)) {
        group.slots.set(pos.index, { node: newNode(), stages: new Map() });
      }
      const slot = group.slots.get(pos.index);
      if (group.kind === "pipeline") {
        const stage = pos.stage || 1;
        if (!slot.stages.has(stage)) slot.stages.set(stage, newNode());
        node = slot.stages.get(stage);
      } else {
        node = slot.node;
      }
    }
    node.leaves.push(callId);
  }

  function apply(event) {
    switch (event.type) {
      case "run_started":
        state.phases = event.phases || [];
        // A resumed run's timeline starts where its first run did.
        if (state.t0 === null && event.unix_us) state.t0 = event.unix_us;
        state.t1 = null;
        drawPhases();
        break;
      case "phase":
        state.phase = event.title;
        if (event.unix_us && !state.entered.some((p) => p.title === event.title)) {
          state.entered.push({ title: event.title, at: event.unix_us });
        }
        drawPhases();
        drawTimeline();
        break;
      case "log":
        state.logs.push(event.message);
        logs.textContent = state.logs.join("\n");
        break;
      case "leaf_started": {
        const fresh = !state.leaves.has(event.call_id);
        if (fresh) place(event.call_id, event.path || []);
        const leaf = { call_id: event.call_id, status: "running",
          label: event.label || event.prompt_preview, phase: state.phase,
          start_us: event.unix_us, waited_ms: event.waited_ms || 0 };
        state.leaves.set(event.call_id, leaf);
        if (event.unix_us) {
          if (state.t0 === null) state.t0 = event.unix_us;
          if (!state.rowByCall.has(event.call_id)) rowFor(leaf, event.path || []);
        }
        drawTree();
        drawTimeline();
        break;
      }
      case "leaf_finished": {
        const leaf = state.leaves.get(event.call_id);
        if (leaf) {
          Object.assign(leaf, { status: event.ok ? "done" : "failed", tokens: event.tokens,
            duration_ms: event.duration_ms, replayed: event.replayed, end_us: event.unix_us });
          drawTree();
          drawTimeline();
        }
        break;
      }
      case "run_finished":
        if (event.unix_us) state.t1 = event.unix_us;
        drawTimeline();
        refreshThread();
        break;
    }
  }

  async function select(callId) {
    state.selected = callId;
    drawTree();
    drawTimeline();
    const onTimeline = state.leaves.get(callId);
    detail.replaceChildren(el("p", { class: "muted" }, "Loading…"));
    try {
      const leaf = await api("/threads/" + encodeURIComponent(threadId) + "/leaves/" + callId);
      const items = [el("dt", {}, "status"), el("dd", { id: "leaf-status" }, leaf.status)];
      if (leaf.request) {
        const r = leaf.request;
        if (r.kind === "agent") {
          items.push(el("dt", {}, "label"), el("dd", {}, r.label || "-"),
            el("dt", {}, "prompt"), el("dd", {}, el("pre", { id: "leaf-prompt" }, pretty(r.prompt))),
            el("dt", {}, "instruction"), el("dd", {}, el("pre", {}, r.instruction || "-")),
            el("dt", {}, "profile"), el("dd", {}, r.model || r.agent_type || "default"),
            el("dt", {}, "tools"), el("dd", {}, (r.tools || []).join(", ") || "-"));
        } else {
          items.push(el("dt", {}, "tool"), el("dd", {}, r.name),
            el("dt", {}, "arguments"), el("dd", {}, el("pre", {}, pretty(r.arguments))));
        }
        items.push(el("dt", {}, "tools it called"),
          el("dd", {}, leaf.tools_called.join(", ") || "-"),
          el("dt", {}, "reply"),
          el("dd", {}, leaf.error
            ? el("pre", { id: "leaf-reply", class: "error-text" }, leaf.error.kind + ": " + leaf.error.message)
            : el("pre", { id: "leaf-reply" }, pretty(leaf.reply))),
          el("dt", {}, "usage"),
          el("dd", {}, leaf.input_tokens + " in · " + leaf.output_tokens + " out · " +
            duration(leaf.duration_ms)));
      } else {
        items.push(el("dt", {}, "prompt"),
          el("dd", {}, el("pre", { id: "leaf-prompt" }, leaf.started.prompt_preview)),
          el("dd", { class: "muted" }, "its reply appears when it finishes"));
      }
      if (onTimeline && onTimeline.start_us && state.t0 !== null) {
        const ran = onTimeline.end_us ? duration(Math.round((onTimeline.end_us - onTimeline.start_us) / 1000)) : "running";
        items.push(el("dt", {}, "on the timeline"), el("dd", { id: "leaf-when" },
          "started at +" + duration(Math.round((onTimeline.start_us - state.t0) / 1000)) +
          (onTimeline.waited_ms ? " after waiting " + duration(onTimeline.waited_ms) + " for a slot" : "") +
          " · ran " + ran + (onTimeline.phase ? " · in phase " + onTimeline.phase : "")));
      }
      detail.replaceChildren(el("dl", {}, ...items));
    } catch (error) {
      detail.replaceChildren(el("p", { class: "error-text" }, String(error.message)));
    }
  }

  async function refreshThread() {
    try {
      state.thread = await api("/threads/" + encodeURIComponent(threadId));
      drawHeader();
    } catch (error) {
      header.replaceChildren(el("p", { class: "error-text", id: "missing" }, String(error.message)));
    }
  }

  let stream = null;
  refreshThread().then(() => {
    if (!state.thread) return;
    drawTree();
    stream = new EventSource("/api/threads/" + encodeURIComponent(threadId) + "/stream");
    stream.onmessage = () => {};
    for (const type of ["run_started", "phase", "log", "leaf_started", "leaf_finished",
      "leaf_tool_called", "leaf_tool_finished", "tool_called", "tool_finished",
      "budget_warning", "run_finished"]) {
      stream.addEventListener(type, (message) => apply(JSON.parse(message.data)));
    }
    stream.addEventListener("end", () => { stream.close(); refreshThread(); });
  });
  const timer = setInterval(() => {
    if (state.thread && !state.thread.outcome) refreshThread();
  }, 2000);
  // While leaves run, their bars grow.
  const grow = setInterval(() => {
    if (state.t0 !== null && state.t1 === null &&
      [...state.leaves.values()].some((leaf) => leaf.status === "running")) drawTimeline();
  }, 250);
  const resize = () => { if (state.pxPerMs === null) drawTimeline(); };
  window.addEventListener("resize", resize);
  return () => {
    clearInterval(timer); clearInterval(grow); window.removeEventListener("resize", resize);
    if (stream) stream.close();
  };
}

// ---- routing ----

let leave = null;
function route() {
  if (leave) leave();
  const match = location.pathname.match(/^\/runs\/(.+)$/);
  leave = match ? runPage(decodeURIComponent(match[1])) : runsPage();
}

function go(path) {
  history.pushState(null, "", path);
  route();
}

document.getElementById("home").addEventListener("click", (e) => { e.preventDefault(); go("/"); });
window.addEventListener("popstate", route);
route();
