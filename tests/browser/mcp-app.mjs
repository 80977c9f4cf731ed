// The run view of `flowbox mcp` as an MCP App, in a real headless Chromium: a page acting as
// the host loads the UI resource the server declares for run_workflow into a sandboxed frame
// under the extension's default content security policy, and drives it with the extension's
// own host-side bridge (`AppBridge` of @modelcontextprotocol/ext-apps, bundled by
// tests/browser/setup.sh); the official MCP client (@modelcontextprotocol/client) talks to
// the server over stdio. A host without the extension gets the tools as they always were.
//
//   node tests/browser/mcp-app.mjs FLOWBOX_BINARY OUT_DIR
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import assert from "node:assert/strict";

const [binary, outDir] = process.argv.slice(2);
const root = resolve(import.meta.dirname, "../..");
const modules = join(root, "target/browser/");
const require = createRequire(modules);
const { chromium } = require("playwright-core");
const { Client } = await import(require.resolve("@modelcontextprotocol/client"));
const { StdioClientTransport } = await import(require.resolve("@modelcontextprotocol/client/stdio"));

// The client validates results against the tools' output schemas with ajv, which warns of
// every `uint64`-style format it does not know (schemars writes them); they are not problems.
const warn = console.warn;
console.warn = (...args) => { if (!/^unknown format/.test(String(args[0]))) warn(...args); };

const VIEW = "ui://flowbox/run-view.html";
const MIME = "text/html;profile=mcp-app";
mkdirSync(outDir, { recursive: true });
const work = mkdtempSync(join(tmpdir(), "flowbox-app-"));
const slow = join(work, "slow.json");
writeFileSync(slow, JSON.stringify({ latency_ms: 1500, fallback: "fake" }));
const script = `
meta = {"name": "reviews", "description": "d", "phases": [{"title": "review"}, {"title": "sum"}]}
phase("review")
out = await parallel([lambda i=i: agent(f"review {i}", label=f"r{i}") for i in range(4)])
phase("sum")
return await agent("sum up", label="sum")
`;

async function connect(capabilities) {
  const client = new Client({ name: "flowbox-app-test", version: "1" }, { capabilities });
  await client.connect(new StdioClientTransport({
    command: binary,
    args: ["mcp", "--backend", "scripted:" + slow, "--warm-pool", "0"],
    env: { ...process.env, FLOWBOX_DB: join(work, "journal.db"),
      FLOWBOX_CACHE_DIR: join(root, "target/flowbox-cache") },
    stderr: "ignore",
  }));
  return client;
}

let browser;
const clients = [];
try {
  // A host with the extension: run_workflow names the view, the view's own tool is listed for
  // the app only, and the resource is one HTML file asking for no network.
  const host = await connect({ extensions: { "io.modelcontextprotocol/ui": { mimeTypes: [MIME] } } });
  clients.push(host);
  const { tools } = await host.listTools();
  const byName = Object.fromEntries(tools.map((tool) => [tool.name, tool]));
  assert.equal(byName.run_workflow._meta.ui.resourceUri, VIEW);
  assert.equal(byName.resume_workflow._meta.ui.resourceUri, VIEW);
  assert.deepEqual(byName.thread_events._meta.ui.visibility, ["app"]);
  const { resources } = await host.listResources();
  assert.deepEqual(resources.map((r) => [r.uri, r.mimeType]), [[VIEW, MIME]]);
  const read = await host.readResource({ uri: VIEW });
  const [content] = read.contents;
  assert.equal(content.mimeType, MIME);
  assert.deepEqual(content._meta.ui.csp, {}, "no domains: the strictest policy");
  assert.match(content.text, /^<!doctype html>/);
  assert.doesNotMatch(content.text, /<script[^>]+src=|<link[^>]+href=/, "nothing loaded from elsewhere");

  browser = await chromium.launch({
    headless: true,
    executablePath: process.env.CHROMIUM || execFileSync("sh", ["-c", "command -v chromium"], { encoding: "utf8" }).trim(),
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const page = await browser.newPage({ viewport: { width: 1000, height: 700 } });
  const problems = [];
  page.on("pageerror", (error) => problems.push(String(error)));
  page.on("console", (message) => { if (message.type() === "error") problems.push(message.text()); });
  page.on("request", (request) => {
    if (!/^(about|data):/.test(request.url())) problems.push("fetched " + request.url());
  });
  const calls = [];
  await page.exposeFunction("hostCallTool", async (params) => {
    calls.push(params.name);
    return await host.callTool(params);
  });
  await page.setContent("<!doctype html><html><body><h3>test host</h3></body></html>");
  await page.addScriptTag({ content: readFileSync(join(modules, "app-bridge.js"), "utf8") });
  // The host puts the extension's default policy on the view (its resource declared no
  // domains) and gives the frame scripts and nothing else.
  const policy = "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' " +
    "'unsafe-inline'; img-src 'self' data:; media-src 'self' data:; connect-src 'none'";
  const html = content.text.replace("<head>",
    `<head><meta http-equiv="Content-Security-Policy" content="${policy}">`);
  await page.evaluate(async (html) => {
    const frame = document.createElement("iframe");
    frame.setAttribute("sandbox", "allow-scripts");
    frame.style.cssText = "width: 960px; height: 300px; border: 1px solid #ccc";
    document.body.append(frame);
    const bridge = new ExtApps.AppBridge(null, { name: "test host", version: "1" },
      { serverTools: {} }, {});
    bridge.oncalltool = (params) => window.hostCallTool(params);
    bridge.onsizechange = ({ height }) => { if (height) frame.style.height = height + "px"; };
    window.initialized = new Promise((resolve) => { bridge.oninitialized = resolve; });
    await bridge.connect(new ExtApps.PostMessageTransport(frame.contentWindow, frame.contentWindow));
    frame.srcdoc = html;
    await window.initialized;
    window.bridge = bridge;
  }, html);
  const view = page.frameLocator("iframe");

  // The call names its thread, so the view follows it live: bars appear and run.
  const args = { script, thread_id: "app-live" };
  await page.evaluate((args) => window.bridge.sendToolInput({ arguments: args }), args);
  const call = host.callTool({ name: "run_workflow", arguments: args });
  await view.locator('#timeline .tl-bar[data-status="running"]').first().waitFor({ timeout: 30000 });
  await page.screenshot({ path: join(outDir, "mcp-app-live.png") });
  const result = await call;
  assert.equal(result.structuredContent.ok, true, JSON.stringify(result));
  await page.evaluate((result) => window.bridge.sendToolResult(result), result);
  await view.locator('#view-status:text("succeeded")').waitFor({ timeout: 30000 });
  await view.locator('#timeline .tl-bar[data-status="done"]').nth(4).waitFor({ timeout: 30000 });
  assert.equal(await view.locator("#timeline .tl-bar").count(), 5);
  assert.match(await view.locator('#timeline .tl-phase[data-phase="review"]').textContent(), /^review · 4 leaves/);
  assert.match(await view.locator("#view-summary").textContent(), /^5 leaves · \d+ tokens · /);
  assert.equal(await view.locator(".name").textContent(), "reviews");
  await view.locator('#timeline .tl-bar[data-status="done"]').first().click();
  assert.match(await view.locator("#view-detail").textContent(), /^started at \+/);
  assert.ok(calls.length >= 2 && calls.every((name) => name === "thread_events"), calls.join());
  await page.screenshot({ path: join(outDir, "mcp-app.png") });
  assert.deepEqual(problems, []);

  // A host without the extension: no view, no view tool, and the result it always got.
  const plain = await connect({});
  clients.push(plain);
  const listed = (await plain.listTools()).tools;
  assert.deepEqual(listed.map((tool) => tool.name).sort(),
    ["list_threads", "resume_workflow", "run_workflow", "show_thread"]);
  assert.ok(listed.every((tool) => !tool._meta || !tool._meta.ui), "no UI metadata");
  const quick = await plain.callTool({ name: "run_workflow",
    arguments: { script: "return 6 * 7", thread_id: "app-plain" } });
  assert.equal(quick.structuredContent.result, 42);
  assert.equal(quick.content[0].type, "text");
  console.error("MCP App tests: ok (screenshots in " + outDir + ")");
} finally {
  if (browser) await browser.close();
  for (const client of clients) await client.close().catch(() => {});
  rmSync(work, { recursive: true, force: true });
}
