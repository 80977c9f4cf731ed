// The run view `flowbox mcp` declares for run_workflow and resume_workflow (MCP Apps): the
// host renders it in a sandboxed frame and talks to it in JSON-RPC over postMessage. It shows
// the run's timeline (timeline.js, the same as `flowbox serve`'s), read from the server's
// journal through the host with the `thread_events` tool: live while the call goes on when
// it names its thread (resume_workflow always does), and whole once the result comes.
// It reaches nothing but its host; everything a script or a model wrote is put in as text.
"use strict";

const PROTOCOL = "2026-01-26";
const view = document.getElementById("view");
const name = el("span", { class: "name" }, "workflow");
const badge = el("span", { class: "status running", id: "view-status" }, "running");
const summary = el("span", { class: "muted", id: "view-summary" });
const problem = el("div", { id: "view-error" });
const detail = el("div", { class: "muted", id: "view-detail" });
const timeline = makeTimeline((callId) => {
  timeline.select(callId);
  detail.textContent = timeline.describe(callId) || "";
});
view.replaceChildren(el("div", { id: "view-header" }, name, badge, summary), problem,
  timeline.element, detail);

// ---- JSON-RPC with the host ----

let nextId = 1;
const waiting = new Map();

function send(message) {
  window.parent.postMessage(Object.assign({ jsonrpc: "2.0" }, message), "*");
}

function request(method, params) {
  const id = nextId++;
  send({ id, method, params });
  return new Promise((resolve, reject) => waiting.set(id, { resolve, reject }));
}

window.addEventListener("message", (event) => {
  const message = event.data;
  if (event.source !== window.parent || !message || message.jsonrpc !== "2.0") return;
  if (message.method === undefined) {
    const call = waiting.get(message.id);
    if (!call) return;
    waiting.delete(message.id);
    if (message.error) call.reject(new Error(message.error.message));
    else call.resolve(message.result);
    return;
  }
  const reply = (result) => { if (message.id !== undefined) send({ id: message.id, result }); };
  switch (message.method) {
    case "ui/notifications/tool-input":
      started((message.params || {}).arguments || {});
      break;
    case "ui/notifications/tool-result":
      finished(message.params || {});
      break;
    case "ui/notifications/tool-cancelled":
      if (following) following.done = true;
      timeline.settle();
      setStatus("cancelled");
      break;
    case "ui/resource-teardown":
      following = null;
      reply({});
      break;
    case "ping":
      reply({});
      break;
    default:
      if (message.id !== undefined) {
        send({ id: message.id, error: { code: -32601, message: "not served: " + message.method } });
      }
  }
});

// ---- the run ----

// The thread followed: its id, whether the call's result has come (then one more read, begun
// after it, takes the run's last events), and whether a read is under way.
let following = null;
let after = 0;

function setStatus(status) {
  badge.textContent = status;
  badge.className = "status " + status;
  resized();
}

function started(args) {
  if (typeof args.thread_id === "string") follow(args.thread_id, false);
}

// The tool's result: its outcome, and every event of its thread.
function finished(result) {
  const output = result.structuredContent || {};
  const summaryOf = output.summary || {};
  if (summaryOf.name) name.textContent = summaryOf.name;
  problem.textContent = output.error
    ? (output.error.kind || "error") + ": " + (output.error.message || "") : "";
  summary.textContent = summaryOf.leaves === undefined ? "" :
    summaryOf.leaves + " leaves · " + summaryOf.tokens + " tokens · " +
    duration(summaryOf.duration_ms);
  setStatus(result.isError || output.ok === false ? "failed" : "succeeded");
  if (summaryOf.thread_id) follow(summaryOf.thread_id, true);
  else if (following) following.done = true;
}

// Reads the thread's events after the last one read: every half second until the call's
// result has come, then once more, from a read begun after it.
async function follow(threadId, done) {
  if (following === null || following.threadId !== threadId) {
    following = { threadId, done, again: false, busy: false };
    after = 0;
  } else if (done) {
    following.done = true;
    following.again = true;
  }
  const mine = following;
  if (mine.busy) return;
  mine.busy = true;
  try {
    for (;;) {
      mine.again = false;
      const result = await request("tools/call",
        { name: "thread_events", arguments: { thread_id: threadId, after } });
      if (following !== mine) return;
      const page = result && result.structuredContent;
      // Not journaled yet (a call that has only begun): ask again.
      const events = page && Array.isArray(page.events) ? page.events : [];
      for (const event of events) timeline.apply(event);
      if (events.length) after = page.next;
      resized();
      if (events.length >= 1000 || mine.again) continue;
      if (mine.done) {
        timeline.settle();
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, 500));
      if (following !== mine) return;
    }
  } catch (error) {
    problem.textContent = "cannot read the run's events: " + error.message;
  } finally {
    mine.busy = false;
  }
}

let lastHeight = 0;
function resized() {
  requestAnimationFrame(() => {
    const height = document.documentElement.scrollHeight;
    if (height !== lastHeight) {
      lastHeight = height;
      send({ method: "ui/notifications/size-changed", params: { height } });
    }
  });
}

request("ui/initialize", {
  appInfo: { name: "flowbox run view", version: "1" },
  appCapabilities: {},
  protocolVersion: PROTOCOL,
}).then(() => {
  send({ method: "ui/notifications/initialized", params: {} });
  resized();
}, (error) => { problem.textContent = "the host did not initialize the view: " + error.message; });
