// The timeline of a run, shared by the web view's run page and the MCP App view of
// `flowbox mcp`: a row per leaf (a pipeline item's stages side by side in one row, a parallel
// inside a stage in lanes of that row), grouped by phase and by group, a bar from each leaf's
// start to its end after the wait for its concurrency slot, a mark on the bars of leaves whose
// model requests were sent again after a failure, drawn from the run's events. Also
// the small helpers both pages use. Everything a script or a model wrote is put in as text.
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

function duration(ms) {
  if (ms === null || ms === undefined) return "";
  if (ms < 1000) return ms + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
  return Math.floor(ms / 60000) + " min " + Math.round((ms % 60000) / 1000) + " s";
}

// Dollars for people: cents where they count, two significant digits below a cent.
function dollars(usd) {
  return "$" + (usd < 0.01 ? usd.toPrecision(2) : usd.toFixed(2));
}

// How many model requests were sent again, for people.
function retries(count) {
  return count === 1 ? "1 request sent again" : count + " requests sent again";
}

// A timeline fed with a run's events (`apply`): `element` is its controls and rows;
// `onSelect(callId)` is called when a bar is clicked or the arrow keys move to it.
function makeTimeline(onSelect) {
  const state = { t0: null, t1: null, last: null, phase: null, leaves: new Map(), rows: [],
    rowOf: new Map(), rowByCall: new Map(), entered: [], pxPerMs: null, selected: null };
  const container = el("div", { class: "timeline", id: "timeline", tabindex: "0",
    "aria-label": "timeline: arrows move between leaves, + and - zoom, 0 fits" });
  const info = el("span", { class: "muted", id: "timeline-info" });
  const zoom = (factor) => {
    state.pxPerMs = (state.pxPerMs || fitScale()) * factor;
    draw();
  };
  const tools = el("div", { class: "timeline-tools" },
    el("button", { id: "zoom-out", title: "zoom out (-)", onclick: () => zoom(0.5) }, "−"),
    el("button", { id: "zoom-in", title: "zoom in (+)", onclick: () => zoom(2) }, "+"),
    el("button", { id: "zoom-fit", title: "fit (0)", onclick: () => { state.pxPerMs = null; draw(); } }, "fit"),
    info);

  const LABEL_PX = 180;

  function nowUs() {
    return state.t1 || Date.now() * 1000;
  }

  function fitScale() {
    const width = Math.max(200, container.clientWidth - LABEL_PX - 24);
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
    const stats = new Map(state.entered.map((p) => [p.title,
      { leaves: 0, tokens: 0, failed: 0, retries: 0, usd: null }]));
    for (const leaf of state.leaves.values()) {
      const stat = stats.get(leaf.phase);
      if (!stat) continue;
      stat.leaves += 1;
      stat.tokens += leaf.tokens || 0;
      if (leaf.cost_usd !== undefined && leaf.cost_usd !== null) stat.usd = (stat.usd || 0) + leaf.cost_usd;
      if (leaf.status === "failed") stat.failed += 1;
      stat.retries += leaf.retries;
    }
    return state.entered.map((p, i) => {
      const end = i + 1 < state.entered.length ? state.entered[i + 1].at : nowUs();
      const stat = stats.get(p.title);
      return { title: p.title, text: p.title + " · " + stat.leaves + " leaves · " + stat.tokens +
        " tok" + (stat.usd === null ? "" : " · " + dollars(stat.usd)) +
        (stat.failed ? " · " + stat.failed + " failed" : "") + (stat.retries ? " · " + retries(stat.retries) : "") + " · " +
        duration(Math.round((end - p.at) / 1000)) };
    });
  }

  let timelinePending = false;
  function draw() {
    if (timelinePending) return;
    timelinePending = true;
    requestAnimationFrame(() => {
      timelinePending = false;
      render();
    });
  }

  function render() {
    if (state.t0 === null) {
      container.replaceChildren(el("p", { class: "muted" }, state.leaves.size
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
              (leaf.tokens !== undefined ? " · " + leaf.tokens + " tok" : "") +
              (leaf.retries ? " · " + retries(leaf.retries) : ""),
            onclick: () => onSelect(leaf.call_id) });
          bar.style.left = x(leaf.start_us) + "px";
          bar.style.width = Math.max(2, (stop - leaf.start_us) / 1000 * scale) + "px";
          bar.style.top = top;
          if (state.selected === leaf.call_id) bar.classList.add("selected");
          line.append(bar);
          if (leaf.retries) {
            // A notch over the bar's start: its model requests were sent again.
            const mark = el("span", { class: "tl-retry", "data-call": leaf.call_id,
              "data-retries": leaf.retries, title: retries(leaf.retries) });
            mark.style.left = x(leaf.start_us) + "px";
            mark.style.top = lane * 15 + "px";
            line.append(mark);
          }
        }
        line.style.height = 3 + Math.max(1, laneEnds.length) * 15 + "px";
        out.push(line);
      }
    }
    for (const node of out) node.style.width = inner + "px";
    const scroll = container.scrollLeft;
    container.replaceChildren(...out);
    container.scrollLeft = scroll;
    // How many ran at once at most: the concurrency limit shows as the most bars overlapping.
    const edges = intervals.flatMap(([a, b]) => [[a, 1], [b, -1]]).sort((p, q) => p[0] - q[0] || p[1] - q[1]);
    let running = 0;
    let most = 0;
    for (const [, delta] of edges) {
      running += delta;
      most = Math.max(most, running);
    }
    info.textContent = state.leaves.size + " leaves · at most " + most + " at once · " +
      duration(Math.round(spanMs));
    info.dataset.most = String(most);
  }

  // Keyboard: up and down move between leaves in the timeline's order, + and - zoom, 0 fits.
  container.addEventListener("keydown", (event) => {
    if (event.key === "+" || event.key === "=") zoom(2);
    else if (event.key === "-") zoom(0.5);
    else if (event.key === "0") { state.pxPerMs = null; draw(); }
    else if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      const bars = [...container.querySelectorAll(".tl-bar")].map((bar) => Number(bar.dataset.call));
      if (!bars.length) return;
      const at = bars.indexOf(state.selected);
      const next = event.key === "ArrowDown" ? Math.min(bars.length - 1, at + 1) : Math.max(0, at - 1);
      onSelect(bars[at === -1 ? 0 : next]);
      const bar = container.querySelector(`.tl-bar[data-call="${bars[at === -1 ? 0 : next]}"]`);
      if (bar) bar.scrollIntoView({ block: "nearest", inline: "nearest" });
    } else return;
    event.preventDefault();
  });

  function apply(event) {
    if (event.unix_us) state.last = Math.max(state.last || 0, event.unix_us);
    switch (event.type) {
      case "run_started":
        // A resumed run's timeline starts where its first run did.
        if (state.t0 === null && event.unix_us) state.t0 = event.unix_us;
        state.t1 = null;
        break;
      case "phase":
        state.phase = event.title;
        if (event.unix_us && !state.entered.some((p) => p.title === event.title)) {
          state.entered.push({ title: event.title, at: event.unix_us });
        }
        break;
      case "leaf_started": {
        if (!event.unix_us) return;
        const leaf = { call_id: event.call_id, status: "running",
          label: event.label || event.prompt_preview, phase: state.phase,
          start_us: event.unix_us, waited_ms: event.waited_ms || 0, retries: 0 };
        state.leaves.set(event.call_id, leaf);
        if (state.t0 === null) state.t0 = event.unix_us;
        if (!state.rowByCall.has(event.call_id)) rowFor(leaf, event.path || []);
        break;
      }
      case "leaf_finished": {
        const leaf = state.leaves.get(event.call_id);
        if (!leaf) return;
        Object.assign(leaf, { status: event.ok ? "done" : "failed", tokens: event.tokens,
          replayed: event.replayed, end_us: event.unix_us, cost_usd: event.cost_usd });
        break;
      }
      case "leaf_turn": {
        const leaf = state.leaves.get(event.call_id);
        if (!leaf || !event.retries) return;
        leaf.retries += event.retries;
        break;
      }
      case "run_finished":
        if (event.unix_us) state.t1 = event.unix_us;
        break;
      default:
        return;
    }
    draw();
  }

  // Where a leaf sits on the timeline, in words (null when it is not on it).
  function describe(callId) {
    const leaf = state.leaves.get(callId);
    if (!leaf || state.t0 === null) return null;
    const ran = leaf.end_us ? duration(Math.round((leaf.end_us - leaf.start_us) / 1000)) : "running";
    return "started at +" + duration(Math.round((leaf.start_us - state.t0) / 1000)) +
      (leaf.waited_ms ? " after waiting " + duration(leaf.waited_ms) + " for a slot" : "") +
      " · ran " + ran + (leaf.retries ? " · " + retries(leaf.retries) : "") +
      (leaf.phase ? " · in phase " + leaf.phase : "");
  }

  // While leaves run, their bars grow.
  const grow = setInterval(() => {
    if (state.t0 !== null && state.t1 === null &&
      [...state.leaves.values()].some((leaf) => leaf.status === "running")) draw();
  }, 250);
  const resize = () => { if (state.pxPerMs === null) draw(); };
  window.addEventListener("resize", resize);
  draw();
  // The run is not going on (its thread is resumable, or the call was cancelled) though its
  // events never said it ended: the timeline ends at its last event, and leaves still open
  // there stopped with it.
  function settle() {
    if (state.t1 !== null || state.last === null) return;
    state.t1 = state.last;
    for (const leaf of state.leaves.values()) {
      if (leaf.status === "running") Object.assign(leaf, { status: "stopped", end_us: state.t1 });
    }
    draw();
  }

  return {
    element: el("div", {}, tools, container),
    apply,
    describe,
    settle,
    select(callId) { state.selected = callId; draw(); },
    stop() { clearInterval(grow); window.removeEventListener("resize", resize); },
  };
}
