// The web view of `flowbox serve` in a real headless Chromium (the system's package, driven by
// playwright-core): what a person sees on the runs page and on run pages, live.
//
//   node tests/browser/view.mjs FLOWBOX_BINARY OUT_DIR [--bench]
//
// Screenshots land in OUT_DIR; with --bench it also measures the run page of a 1000-leaf run
// and prints {"run_page_1000_leaves_ms": ...} (no timing is ever asserted).
import { spawn, spawnSync, execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import assert from "node:assert/strict";

const [binary, outDir, ...flags] = process.argv.slice(2);
const bench = flags.includes("--bench");
const root = resolve(import.meta.dirname, "../..");
const require = createRequire(join(root, "target/browser/"));
const { chromium } = require("playwright-core");

mkdirSync(outDir, { recursive: true });
const work = mkdtempSync(join(tmpdir(), "flowbox-view-"));
const db = join(work, "journal.db");
const env = { ...process.env, FLOWBOX_DB: db, FLOWBOX_CACHE_DIR: join(root, "target/flowbox-cache") };
const children = [];

function file(name, text) {
  const path = join(work, name);
  writeFileSync(path, text);
  return path;
}

function run(args, expectCode) {
  const result = spawnSync(binary, ["run", ...args], { env, cwd: root, encoding: "utf8" });
  assert.equal(result.status, expectCode, result.stderr);
}

function start(args) {
  const child = spawn(binary, args, { env, cwd: root, stdio: ["ignore", "ignore", "pipe"] });
  children.push(child);
  return child;
}

const fan = (n, phases) => `
meta = {"name": "fan-${n}", "description": "d", "phases": [${phases.map((p) => `{"title": "${p}"}`).join(", ")}]}
async def main():
    phase("${phases[0]}")
    log("fanning out to ${n} <b>leaves</b>")
    out = await parallel([lambda i=i: agent(f"review {i}", label=f"r{i}") for i in range(${n})])
    phase("${phases[phases.length - 1]}")
    return {"reviews": len(out)}
`;

// Drafts, a review by two in parallel, a revision: two items through three stages.
const staged = `
meta = {"name": "staged", "description": "d", "phases": [{"title": "stages"}]}
async def main():
    phase("stages")
    async def review(draft, item):
        return await parallel([lambda: agent(f"check {item}", label=f"check {item}"),
                               lambda: agent(f"style {item}", label=f"style {item}")])
    return await pipeline(["a", "b"],
                          lambda item: agent(f"draft {item}", label=f"draft {item}"),
                          review,
                          lambda prev, item: agent(f"revise {item}", label=f"revise {item}"))
`;

// An OpenAI-compatible provider on loopback that turns away the first request for a prompt
// naming "flaky" with a 503, so that the leaf's model request is sent again.
async function flakyProvider() {
  let turnedAway = false;
  const server = createServer((request, response) => {
    let body = "";
    request.on("data", (chunk) => { body += chunk; });
    request.on("end", () => {
      const flaky = JSON.stringify(JSON.parse(body).messages).includes("flaky");
      response.setHeader("content-type", "application/json");
      if (flaky && !turnedAway) {
        turnedAway = true;
        response.statusCode = 503;
        response.end(JSON.stringify({ error: { message: "try again later", type: "server_error" } }));
        return;
      }
      response.end(JSON.stringify({ choices: [{ index: 0, finish_reason: "stop",
        message: { role: "assistant", content: "answered" } }], usage: { prompt_tokens: 3, completion_tokens: 1 } }));
    });
  });
  await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
  return server;
}

// Runs `flowbox run ARGS` without blocking this process's own servers.
async function runAlongside(args, expectCode) {
  const child = spawn(binary, ["run", ...args], { env, cwd: root, stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (chunk) => { stderr += chunk; });
  const code = await new Promise((ok) => child.on("exit", ok));
  assert.equal(code, expectCode, stderr);
}

const htmlReply = file("html.json", JSON.stringify({ latency_ms: 5, fallback: "fake",
  rules: [{ label: "^r1$", text: "<script>window.pwned = 1</script><b>bold?</b>" }] }));
const steady = file("steady.json", JSON.stringify({ latency_ms: 2000, fallback: "fake" }));
// Slow enough that its leaves still run when the page opens on a loaded machine: 6–15 s in all.
const slow = file("slow.json", JSON.stringify({ latency_ms: 3500, jitter_ms: 1500, fallback: "fake" }));

let browser;
try {
  run([file("finished.py", fan(3, ["review", "sum"])), "--thread", "finished", "--backend", "scripted:" + htmlReply], 0);
  run([file("failed.py", "x = await agent('a')\nif x:\n    raise ValueError('no <i>way</i>')\nreturn x\n"), "--thread", "failed"], 1);
  // A priced run: its cost is on the runs page.
  run([file("priced.py", "phase('p')\nreturn await agent('a')\n"), "--thread", "priced", "--backend", "fake",
    "--model", "gpt-4o", "--prices", "examples/prices.json"], 0);
  // A leaf whose model request was turned away once and sent again, beside one answered at once.
  const provider = await flakyProvider();
  await runAlongside([file("retried.py", "phase('calls')\nreturn [await agent('flaky one', label='flaky'), " +
    "await agent('steady one', label='steady')]\n"), "--thread", "retried", "--backend", "openai", "--model", "m",
  "--base-url", "http://127.0.0.1:" + provider.address().port + "/v1"], 0);
  provider.close();
  // An outline fed to two parts, the parts fed to a join: the graph's edges.
  run([file("fed.py", "outline = await agent('outline the essay in parts', label='outline')\n" +
    "parts = await parallel([lambda i=i: agent(f'write part {i} of {outline}', label=f'part {i}') for i in range(2)])\n" +
    "return await agent('join: ' + ' | '.join(parts), label='join')\n"), "--thread", "fed", "--backend", "fake"], 0);
  if (bench) run([file("big.py", fan(1000, ["all"])), "--thread", "big", "--backend", "fake"], 0);
  // Six leaves of 300 ms two at a time: the timeline shows three waves and the waits.
  run([file("limited.py", fan(6, ["review", "sum"])), "--thread", "limited", "--max-concurrency", "2",
    "--backend", "scripted:" + file("steady300.json", JSON.stringify({ latency_ms: 300, fallback: "fake" }))], 0);
  start(["run", file("slow.py", fan(4, ["review", "sum"])), "--thread", "slow", "--backend", "scripted:" + slow]);
  // Two leaves that never answer; the process is killed below, leaving the thread resumable.
  const stuck = start(["run", file("stuck.py", fan(2, ["wait"])), "--thread", "stuck", "--backend",
    "scripted:" + file("forever.json", JSON.stringify({ latency_ms: 600000, fallback: "fake" }))]);

  const server = start(["serve", "--listen", "127.0.0.1:0"]);
  const base = await new Promise((ok, fail) => {
    let text = "";
    server.stderr.on("data", (chunk) => {
      text += chunk;
      const match = text.match(/http:\/\/127\.0\.0\.1:\d+/);
      if (match) ok(match[0]);
    });
    server.on("exit", () => fail(new Error("serve exited: " + text)));
  });

  // A fresh profile (--user-data-dir, which playwright takes as an argument of its own).
  browser = await chromium.launchPersistentContext(join(work, "profile"), {
    headless: true,
    viewport: { width: 1280, height: 860 },
    executablePath: process.env.CHROMIUM || execFileSync("sh", ["-c", "command -v chromium"], { encoding: "utf8" }).trim(),
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const page = await browser.newPage();
  const problems = [];
  page.on("pageerror", (error) => problems.push(String(error)));
  page.on("console", (message) => { if (message.type() === "error") problems.push(message.text()); });
  // Nothing but the server itself is ever asked for.
  page.on("request", (request) => {
    if (!request.url().startsWith(base)) problems.push("fetched " + request.url());
  });

  // The runs page: a finished and a running thread (the running one appears without a reload).
  await page.goto(base + "/");
  await page.locator('tr[data-thread="slow"] [data-status="running"]').waitFor({ timeout: 30000 });
  await page.locator('tr[data-thread="finished"] [data-status="succeeded"]').waitFor();
  await page.locator('tr[data-thread="failed"] [data-status="failed"]').waitFor();
  assert.equal(await page.locator('tr[data-thread="finished"] td').first().textContent(), "fan-3");
  assert.equal(await page.locator('tr[data-thread="finished"] td.cost').textContent(), "–", "an unpriced run has no cost");
  assert.equal(await page.locator('tr[data-thread="priced"] td.cost').textContent(), "$0.000045");
  await page.fill("#search", "fan-4");
  assert.equal(await page.locator("tr[data-thread]").count(), 1);
  await page.fill("#search", "");
  await page.selectOption("#filter", "failed");
  assert.equal(await page.locator("tr[data-thread]").count(), 1);
  await page.selectOption("#filter", "all");
  await page.screenshot({ path: join(outDir, "runs.png") });

  // A slow fan-out's run page: leaves turn from running to done without a reload.
  let navigations = 0;
  await page.click('tr[data-thread="slow"]');
  await page.locator("#tree .leaf").first().waitFor();
  page.on("framenavigated", () => navigations++);
  await page.locator('#tree .leaf[data-status="running"]').first().waitFor();
  const runningSeen = await page.locator('#tree .leaf[data-status="running"]').count();
  assert.ok(runningSeen >= 1);
  await page.locator('.phase.current').waitFor();
  // The timeline is live: a running leaf's bar grows without a reload.
  const growing = page.locator('#timeline .tl-bar[data-status="running"]').first();
  await growing.waitFor({ timeout: 30000 });
  const call = await growing.getAttribute("data-call");
  const widthOf = async () => (await page.locator(`#timeline .tl-bar[data-call="${call}"]`).boundingBox()).width;
  const before = await widthOf();
  await page.waitForTimeout(700);
  const stillRunning = await page.locator(`#timeline .tl-bar[data-call="${call}"]`).getAttribute("data-status");
  if (stillRunning === "running") assert.ok(await widthOf() > before, "a running leaf's bar grows");
  await page.screenshot({ path: join(outDir, "timeline-live.png") });
  await page.waitForFunction(() => document.querySelectorAll('#tree .leaf[data-status="done"]').length === 4, null, { timeout: 30000 });
  await page.locator("#result").waitFor({ timeout: 30000 });
  assert.equal(navigations, 0, "the page was never reloaded");
  assert.equal(await page.locator(".phase.current").textContent(), "sum");
  // The parallel is a fan: one hub, its four branches side by side (one leaf each).
  const fanGroup = page.locator('#tree .group[data-kind="parallel"]');
  assert.equal(await fanGroup.count(), 1);
  assert.equal(await fanGroup.locator("> .hub").textContent(), "parallel 1 · 4 items");
  const branches = fanGroup.locator("> .branches > .branch");
  assert.equal(await branches.count(), 4);
  const boxes = [];
  for (let i = 0; i < 4; i++) {
    const branch = fanGroup.locator(`> .branches > .branch[data-branch="${i}"]`);
    assert.equal(await branch.locator(".leaf .label").textContent(), "r" + i);
    boxes.push(await branch.boundingBox());
  }
  for (let i = 1; i < 4; i++) {
    assert.equal(boxes[i].y, boxes[0].y, "branches side by side");
    assert.ok(boxes[i].x > boxes[i - 1].x, "branches left to right");
  }

  // The timeline of a finished run with a concurrency limit of 2: six bars in rows under their
  // phase and group, never more than two at once, the waits for a slot drawn before them; the
  // phase rail counts each phase's leaves; the keyboard moves between leaves and zooms.
  await page.goto(base + "/runs/limited");
  await page.waitForFunction(() => document.querySelectorAll('#timeline .tl-bar[data-status="done"]').length === 6, null, { timeout: 30000 });
  await page.locator("#result").waitFor();
  assert.equal(await page.locator("#timeline-info").getAttribute("data-most"), "2");
  assert.ok(await page.locator("#timeline .tl-wait").count() >= 2, "leaves that waited for a slot show it");
  assert.match(await page.locator('#timeline .tl-phase[data-phase="review"]').textContent(), /^review · 6 leaves · \d+ tok · /);
  assert.equal(await page.locator('#timeline .tl-group[data-group="1"]').textContent(), "parallel 1 · 6 items");
  const bars = [];
  for (let i = 0; i < 6; i++) bars.push(await page.locator("#timeline .tl-bar").nth(i).boundingBox());
  for (let i = 1; i < 6; i++) assert.ok(bars[i].y > bars[i - 1].y, "a row per leaf, in order");
  const lastStart = Math.max(...bars.map((b) => b.x));
  assert.ok(lastStart > Math.min(...bars.map((b) => b.x)) + 10, "the third wave starts later than the first");
  await page.screenshot({ path: join(outDir, "timeline.png") });
  await page.focus("#timeline");
  await page.keyboard.press("ArrowDown");
  await page.locator("#leaf-when").waitFor();
  assert.match(await page.locator("#leaf-when").textContent(), /^started at \+/);
  const first = await page.locator("#timeline .tl-bar.selected").getAttribute("data-call");
  await page.keyboard.press("ArrowDown");
  await page.waitForFunction((was) => document.querySelector("#timeline .tl-bar.selected")?.dataset.call !== was, first);
  const narrow = (await page.locator("#timeline .tl-bar").first().boundingBox()).width;
  await page.keyboard.press("+");
  await page.waitForFunction((w) => document.querySelector("#timeline .tl-bar").getBoundingClientRect().width > w * 1.5, narrow);
  await page.keyboard.press("0");
  await page.waitForFunction((w) => Math.abs(document.querySelector("#timeline .tl-bar").getBoundingClientRect().width - w) < 1, narrow);

  // A killed run's timeline ends at its last event: its open leaves stopped there, no longer
  // running or growing.
  stuck.kill("SIGKILL");
  await page.goto(base + "/runs/stuck");
  await page.locator('#run-header [data-status="resumable"]').waitFor({ timeout: 30000 });
  await page.waitForFunction(() => document.querySelectorAll('#timeline .tl-bar[data-status="stopped"]').length === 2, null, { timeout: 30000 });
  const stoppedAt = await page.locator("#timeline-info").textContent();
  await page.waitForTimeout(600);
  assert.equal(await page.locator("#timeline-info").textContent(), stoppedAt, "a stopped run's span does not grow");

  // A priced run's phase rail counts its dollars.
  await page.goto(base + "/runs/priced");
  await page.locator('#timeline .tl-bar[data-status="done"]').waitFor({ timeout: 30000 });
  assert.match(await page.locator('#timeline .tl-phase[data-phase="p"]').textContent(), /^p · 1 leaves · 6 tok · \$0\.000045 · /);

  // A leaf whose model request was sent again is marked on its bar, in its place on the timeline
  // and in its phase's rail.
  await page.goto(base + "/runs/retried");
  await page.locator('#timeline .tl-bar[data-status="done"]').nth(1).waitFor({ timeout: 30000 });
  const marks = page.locator("#timeline .tl-retry");
  assert.equal(await marks.count(), 1);
  assert.equal(await marks.getAttribute("data-retries"), "1");
  const flakyBar = page.locator('#timeline .tl-row:has(.tl-label[title="flaky"]) .tl-bar');
  assert.equal(await marks.getAttribute("data-call"), await flakyBar.getAttribute("data-call"));
  assert.match(await flakyBar.getAttribute("title"), / · 1 request sent again$/);
  assert.match(await page.locator('#timeline .tl-phase[data-phase="calls"]').textContent(),
    /^calls · 2 leaves · \d+ tok · 1 request sent again · /);
  await flakyBar.click();
  await page.locator("#leaf-when").waitFor();
  assert.match(await page.locator("#leaf-when").textContent(), / · 1 request sent again · in phase calls$/);
  await page.locator("#timeline").screenshot({ path: join(outDir, "retried.png") });

  // Where a reply feeds a later leaf, the graph draws an arrow from the one to the other, and
  // the leaf's detail names both ends.
  await page.goto(base + "/runs/fed");
  await page.locator('#tree .leaf[data-status="done"]').nth(3).waitFor({ timeout: 30000 });
  const callOf = async (label) => page.locator(`#tree .leaf:has(.label:text-is("${label}"))`).getAttribute("data-call");
  const [outlineId, part0, part1, joinId] = await Promise.all(["outline", "part 0", "part 1", "join"].map(callOf));
  await page.waitForFunction(() => document.querySelectorAll("#tree svg.feeds path[data-from]").length === 4);
  const arrows = await page.locator("#tree svg.feeds path[data-from]").evaluateAll((paths) =>
    paths.map((p) => p.dataset.from + ">" + p.dataset.to).sort());
  assert.deepEqual(arrows, [outlineId + ">" + part0, outlineId + ">" + part1, part0 + ">" + joinId,
    part1 + ">" + joinId].sort());
  // Each arrow runs from its source's bottom down to its target's top.
  for (const [from, to] of [[outlineId, part0], [part1, joinId]]) {
    const arrow = await page.locator(`#tree svg.feeds path[data-from="${from}"][data-to="${to}"]`).boundingBox();
    const [a, b] = [await page.locator(`#tree .leaf[data-call="${from}"]`).boundingBox(),
      await page.locator(`#tree .leaf[data-call="${to}"]`).boundingBox()];
    assert.ok(Math.abs(arrow.y - (a.y + a.height)) < 5 && Math.abs(arrow.y + arrow.height - b.y) < 5,
      JSON.stringify({ arrow, a, b }));
  }
  await page.click('#tree .leaf:has(.label:text-is("join"))');
  await page.locator("#leaf-fed-by button").first().waitFor();
  assert.deepEqual(await page.locator("#leaf-fed-by button").allTextContents(), ["part 0", "part 1"]);
  assert.equal(await page.locator("#leaf-feeds").textContent(), "-");
  await page.click('#leaf-fed-by button:text-is("part 0")');
  await page.waitForFunction((id) => document.querySelector("#tree .leaf.selected")?.dataset.call === id, part0);
  await page.locator("#leaf-feeds button").first().waitFor();
  assert.deepEqual(await page.locator("#leaf-feeds button").allTextContents(), ["join"]);
  assert.deepEqual(await page.locator("#leaf-fed-by button").allTextContents(), ["outline"]);
  await page.locator("#tree").screenshot({ path: join(outDir, "graph.png") });

  // A pipeline is lanes: a row per item, a column per stage; a parallel in a stage is a fan
  // inside its cell. Its later stages appear live, without a reload.
  start(["run", file("staged.py", staged), "--thread", "staged", "--backend", "scripted:" + steady]);
  await page.goto(base + "/");
  await page.click('tr[data-thread="staged"]');
  await page.waitForURL(/\/runs\/staged$/);
  navigations = 0;
  const lanes = page.locator('#tree .group[data-kind="pipeline"]');
  await lanes.locator('.lane[data-item="0"] .cell[data-stage="1"] .leaf').waitFor({ timeout: 30000 });
  assert.equal(await lanes.locator('.cell[data-stage="3"] .leaf').count(), 0);
  await page.waitForFunction(() => document.querySelectorAll('#tree .leaf[data-status="done"]').length === 8, null, { timeout: 30000 });
  await page.locator("#result").waitFor({ timeout: 30000 });
  assert.equal(navigations, 0, "the page was never reloaded");
  assert.equal(await lanes.count(), 1);
  assert.equal(await lanes.locator("> .hub").textContent(), "pipeline 1 · 2 items");
  assert.deepEqual(await lanes.locator(".lane.head .lane-head").allTextContents(),
    ["item", "stage 1", "stage 2", "stage 3"]);
  const rowY = [];
  for (const [i, item] of ["a", "b"].entries()) {
    const lane = lanes.locator(`.lane[data-item="${i}"]`);
    const cell = (stage) => lane.locator(`> .cell[data-stage="${stage}"]`);
    assert.deepEqual(await cell(1).locator(".leaf .label").allTextContents(), ["draft " + item]);
    const fan = cell(2).locator('> .group[data-kind="parallel"]');
    assert.equal(await fan.count(), 1);
    assert.deepEqual(await fan.locator("> .branches > .branch .leaf .label").allTextContents(),
      ["check " + item, "style " + item]);
    const [check, style] = [await fan.locator('.branch[data-branch="0"]').boundingBox(),
      await fan.locator('.branch[data-branch="1"]').boundingBox()];
    assert.ok(check.y === style.y && check.x < style.x, "the fan in a cell is side by side too");
    assert.deepEqual(await cell(3).locator(".leaf .label").allTextContents(), ["revise " + item]);
    const cells = [await cell(1).boundingBox(), await cell(2).boundingBox(), await cell(3).boundingBox()];
    assert.ok(cells[0].x < cells[1].x && cells[1].x < cells[2].x, "stages left to right");
    assert.ok(cells[0].y === cells[1].y && cells[1].y === cells[2].y, "a lane is one row");
    rowY.push(cells[0].y);
  }
  assert.ok(rowY[1] > rowY[0], "one lane below the other");
  // On the timeline, a pipeline item is one row with its stages side by side; the two leaves
  // of its second stage's parallel run at once, so they take two lanes of the row.
  const itemRow = page.locator('#timeline .tl-row[data-row="pipeline 1 item 0"]');
  assert.equal(await itemRow.locator(".tl-bar").count(), 4);
  const stageBars = [];
  for (let i = 0; i < 4; i++) stageBars.push(await itemRow.locator(".tl-bar").nth(i).boundingBox());
  assert.ok(stageBars[0].x < stageBars[1].x && stageBars[1].x < stageBars[3].x, "stages left to right");
  assert.ok(Math.abs(stageBars[1].x - stageBars[2].x) < 20 && stageBars[1].y !== stageBars[2].y, JSON.stringify(stageBars) +
    "the parallel's two leaves in two lanes");
  await page.click('#tree .leaf:has-text("revise a")');
  await page.locator("#leaf-reply").waitFor();
  assert.equal(await page.locator("#leaf-prompt").textContent(), "revise a");
  await page.screenshot({ path: join(outDir, "pipeline.png") });

  // A finished run: click a leaf for its prompt and reply; HTML in the reply is text.
  await page.goto(base + "/runs/finished");
  await page.locator('#tree .leaf[data-status="done"]').nth(2).waitFor();
  await page.click('#tree .leaf:has-text("r1")');
  await page.locator("#leaf-reply").waitFor();
  assert.equal(await page.locator("#leaf-prompt").textContent(), "review 1");
  assert.equal(await page.locator("#leaf-reply").textContent(), "<script>window.pwned = 1</script><b>bold?</b>");
  assert.equal(await page.locator("#detail script, #detail b").count(), 0);
  assert.equal(await page.evaluate(() => window.pwned), undefined);
  assert.match(await page.locator("#logs").textContent(), /<b>leaves<\/b>/);
  await page.screenshot({ path: join(outDir, "run.png") });

  // A failed run: its error, and its line highlighted in the script.
  await page.goto(base + "/runs/failed");
  await page.locator("#error").waitFor();
  assert.match(await page.locator("#error").textContent(), /ValueError.*no <i>way<\/i>/);
  assert.equal(await page.locator("#source li.error").getAttribute("data-line"), "3");
  assert.match(await page.locator("#source li.error").textContent(), /raise ValueError/);
  await page.screenshot({ path: join(outDir, "failed.png") });

  if (bench) {
    const started = Date.now();
    await page.goto(base + "/runs/big");
    await page.waitForFunction(() => document.querySelectorAll('#tree .leaf[data-status="done"]').length === 1000 &&
      document.querySelectorAll('#timeline .tl-bar[data-status="done"]').length === 1000, null, { timeout: 60000 });
    const elapsed = Date.now() - started;
    await page.screenshot({ path: join(outDir, "big.png") });
    console.log(JSON.stringify({ run_page_1000_leaves_ms: elapsed }));
  }
  assert.deepEqual(problems, []);
  console.error("browser view tests: ok (screenshots in " + outDir + ")");
} finally {
  if (browser) await browser.close();
  for (const child of children) child.kill();
  rmSync(work, { recursive: true, force: true });
}
