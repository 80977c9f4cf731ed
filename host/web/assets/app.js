// The flowbox web view: the runs page (/) and a run page (/runs/ID), drawn from the JSON API
// and kept live by polling (runs) and server-sent events (a run). Everything a script or a
// model wrote goes into the page as text (textContent), never as markup. The timeline and the
// helpers `el` and `duration` are timeline.js's, loaded before this.
"use strict";

async function api(path) {
  const response = await fetch("/api" + path);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
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
        el("th", { class: "num" }, "tokens"), el("th", { class: "num" }, "cost"),
        el("th", {}, "thread"))),
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
        el("td", { class: "num cost" }, t.cost_usd === null || t.cost_usd === undefined
          ? "–" : dollars(t.cost_usd)),
        el("td", { class: "muted" }, t.thread_id)));
    body.replaceChildren(...rows);
    if (!rows.length) body.append(el("tr", {}, el("td", { colspan: 8, class: "muted" }, "no runs")));
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
    phase: null, logs: [], selected: null, thread: null };
  const header = el("div", { id: "run-header" });
  const phases = el("div", { class: "phases", id: "phases" });
  const tree = el("div", { id: "tree" });
  const logs = el("pre", { id: "logs" });
  const outcome = el("div", { id: "outcome" });
  const detail = el("div", { id: "detail" }, el("p", { class: "muted" }, "Click a leaf to see it."));
  const source = el("ol", { class: "source", id: "source" });
  const totals = el("div", { class: "totals", id: "totals" });
  const timeline = makeTimeline((callId) => select(callId));
  app.replaceChildren(header, phases,
    el("section", {}, el("h2", {}, "timeline"), timeline.element),
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
  // Leaves and groups come in the order the script started them (a group at its first call).
  function drawNode(node) {
    const parts = node.leaves.map((id) => [id, () => leafNode(state.leaves.get(id))]);
    for (const [groupId, group] of node.groups) {
      parts.push([group.first, () => group.kind === "pipeline" ? drawLanes(groupId, group) : drawFan(groupId, group)]);
    }
    return parts.sort((a, b) => a[0] - b[0]).map(([, draw]) => draw());
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

  let drawPending = false;
  function drawTree() {
    if (drawPending) return;
    drawPending = true;
    requestAnimationFrame(() => {
      drawPending = false;
      tree.replaceChildren(...drawNode(state.tree));
      if (!state.leaves.size) tree.append(el("p", { class: "muted" }, "no leaves yet"));
      drawFeeds();
    });
  }

  // Where a reply feeds a later leaf (its prompt quotes it), an arrow from the one to the
  // other, drawn under the leaves.
  const SVG = "http://www.w3.org/2000/svg";
  function drawFeeds() {
    const old = tree.querySelector("svg.feeds");
    if (old) old.remove();
    const edges = [];
    for (const leaf of state.leaves.values()) {
      for (const from of leaf.fed_by) edges.push([from, leaf.call_id]);
    }
    tree.classList.toggle("fed", edges.length > 0);
    if (!edges.length) return;
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("class", "feeds");
    svg.setAttribute("width", tree.scrollWidth);
    svg.setAttribute("height", tree.scrollHeight);
    const defs = document.createElementNS(SVG, "defs");
    const marker = document.createElementNS(SVG, "marker");
    for (const [key, value] of Object.entries({ id: "feed-arrow", viewBox: "0 0 8 8", refX: "7",
      refY: "4", markerWidth: "7", markerHeight: "7", orient: "auto" })) marker.setAttribute(key, value);
    const head = document.createElementNS(SVG, "path");
    head.setAttribute("d", "M0,0 L8,4 L0,8 z");
    marker.append(head);
    defs.append(marker);
    svg.append(defs);
    const origin = tree.getBoundingClientRect();
    const nodes = new Map([...tree.querySelectorAll(".leaf[data-call]")].map((n) => [Number(n.dataset.call), n]));
    const box = (callId) => {
      const node = nodes.get(callId);
      if (!node) return null;
      const r = node.getBoundingClientRect();
      return { x: r.left - origin.left + tree.scrollLeft, y: r.top - origin.top + tree.scrollTop,
        w: r.width, h: r.height };
    };
    for (const [from, to] of edges) {
      const [a, b] = [box(from), box(to)];
      if (!a || !b) continue;
      const path = document.createElementNS(SVG, "path");
      if (b.y < a.y + a.h && b.x >= a.x + a.w) {
        // Beside it (the next stage of a pipeline item): from its right side to the other's left.
        const [x1, y1, x2, y2] = [a.x + a.w, a.y + a.h / 2, b.x, b.y + b.h / 2];
        const bend = Math.max(8, (x2 - x1) / 2);
        path.setAttribute("d", `M${x1},${y1} C${x1 + bend},${y1} ${x2 - bend},${y2} ${x2},${y2}`);
      } else {
        // Below it: from the middle of its bottom to the middle of the other's top.
        const [x1, y1, x2, y2] = [a.x + Math.min(a.w / 2, 60), a.y + a.h, b.x + Math.min(b.w / 2, 60), b.y];
        const bend = Math.max(12, Math.abs(y2 - y1) / 2);
        path.setAttribute("d", `M${x1},${y1} C${x1},${y1 + bend} ${x2},${y2 - bend} ${x2},${y2}`);
      }
      path.setAttribute("marker-end", "url(#feed-arrow)");
      path.dataset.from = from;
      path.dataset.to = to;
      svg.append(path);
    }
    tree.prepend(svg);
  }
  const relayout = new ResizeObserver(() => drawFeeds());
  relayout.observe(tree);

  function newNode() {
    return { groups: new Map(), leaves: [] };
  }

  // A leaf's path: for each enclosing group, the item it is in and, in a pipeline, the stage.
  function place(callId, path) {
    let node = state.tree;
    for (const pos of path) {
      if (!node.groups.has(pos.group)) {
        node.groups.set(pos.group, { kind: pos.kind, size: pos.size, slots: new Map(), first: callId });
      }
      const group = node.groups.get(pos.group);
      // A group sits where its first call is (a leaf from the journal may start first).
      group.first = Math.min(group.first, callId);
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
    timeline.apply(event);
    switch (event.type) {
      case "run_started":
        state.phases = event.phases || [];
        drawPhases();
        break;
      case "phase":
        state.phase = event.title;
        drawPhases();
        break;
      case "log":
        state.logs.push(event.message);
        logs.textContent = state.logs.join("\n");
        break;
      case "leaf_started":
        if (!state.leaves.has(event.call_id)) place(event.call_id, event.path || []);
        state.leaves.set(event.call_id, { call_id: event.call_id, status: "running",
          label: event.label || event.prompt_preview, fed_by: event.fed_by || [] });
        drawTree();
        break;
      case "leaf_finished": {
        const leaf = state.leaves.get(event.call_id);
        if (leaf) {
          Object.assign(leaf, { status: event.ok ? "done" : "failed", tokens: event.tokens,
            duration_ms: event.duration_ms, replayed: event.replayed });
          drawTree();
        }
        break;
      }
      case "run_finished":
        refreshThread();
        break;
    }
  }

  async function select(callId) {
    state.selected = callId;
    drawTree();
    timeline.select(callId);
    const onTimeline = timeline.describe(callId);
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
      if (onTimeline) {
        items.push(el("dt", {}, "on the timeline"), el("dd", { id: "leaf-when" }, onTimeline));
      }
      // The leaves whose replies its prompt quotes, and those that quote its reply.
      const link = (id) => el("button", { class: "link", "data-call": id, onclick: () => select(id) },
        state.leaves.has(id) ? state.leaves.get(id).label : "leaf " + id);
      const fedBy = state.leaves.has(callId) ? state.leaves.get(callId).fed_by : [];
      const feeds = [...state.leaves.values()].filter((l) => l.fed_by.includes(callId)).map((l) => l.call_id);
      items.push(el("dt", {}, "fed by"), el("dd", { id: "leaf-fed-by" }, ...(fedBy.length ? fedBy.map(link) : ["-"])),
        el("dt", {}, "feeds"), el("dd", { id: "leaf-feeds" }, ...(feeds.length ? feeds.map(link) : ["-"])));
      detail.replaceChildren(el("dl", {}, ...items));
    } catch (error) {
      detail.replaceChildren(el("p", { class: "error-text" }, String(error.message)));
    }
  }

  async function refreshThread() {
    try {
      state.thread = await api("/threads/" + encodeURIComponent(threadId));
      drawHeader();
      if (state.thread.status !== "running") timeline.settle();
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
    for (const type of ["run_started", "phase", "log", "leaf_started", "leaf_turn", "leaf_finished",
      "leaf_tool_called", "leaf_tool_finished", "tool_called", "tool_finished",
      "budget_warning", "run_finished"]) {
      stream.addEventListener(type, (message) => apply(JSON.parse(message.data)));
    }
    stream.addEventListener("end", () => { stream.close(); refreshThread(); });
  });
  const timer = setInterval(() => {
    if (state.thread && !state.thread.outcome) refreshThread();
  }, 2000);
  return () => {
    clearInterval(timer);
    relayout.disconnect();
    timeline.stop();
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
