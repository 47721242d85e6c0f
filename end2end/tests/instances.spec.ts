import { spawn, execFileSync, ChildProcess } from "node:child_process";
import { test, expect, ADMIN_PASSWORD } from "../fixtures";

// Two instances of the server on one Postgres database (a scratch database of their own): a run
// that instance A drives is watched in a browser connected to instance B. B follows A's commits
// (LISTEN/NOTIFY), so the page on B shows A's steps and then the approval panel, without a reload
// by hand; and A announces to B what its model is writing (on the run's own channel), so the page
// on B shows the call forming before its step lands.

test.describe.configure({ timeout: 90_000 });

const BASE_DB = process.env.TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const A = "http://127.0.0.1:3006";
const B = "http://127.0.0.1:3007";

function databaseUrl(name: string): string {
  const url = new URL(BASE_DB);
  url.pathname = `/${name}`;
  return url.toString();
}

async function instance(base: string, database: string): Promise<ChildProcess> {
  const child = spawn("../target/debug/nrllm-playground", [], {
    env: {
      ...process.env,
      NRLLM_CONFIG: "nrllm-e2e.toml",
      NRLLM_SITE_ADDR: base.replace("http://", ""),
      NRLLM_DATABASE_URL: database,
      // Long enough that B's page (a debug build, rendered cold) opens while A's model is still
      // writing: at 3 s a slow machine rendered it after the run was already waiting.
      NRLLM_DEMO_THINK_MS: "10000",
      // Instances sharing a database share its audit key, as their operators set it.
      NRLLM_AUDIT_KEY: "b2".repeat(32),
      NRLLM_LOG: "warn",
      LEPTOS_OUTPUT_NAME: "nrllm-playground",
      LEPTOS_SITE_ROOT: "../target/site",
      LEPTOS_SITE_PKG_DIR: "pkg",
    },
    stdio: ["ignore", "ignore", "inherit"],
  });
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      if ((await fetch(`${base}/readyz`)).ok) return child;
    } catch {
      // not listening yet
    }
    if (child.exitCode !== null) throw new Error(`${base} exited with ${child.exitCode}`);
    if (Date.now() > deadline) throw new Error(`${base} did not answer within 30 s`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

test("a browser on instance B sees the steps of a run that instance A drives", async ({ page, playwright }) => {
  const name = `nrllm_e2e_${Date.now()}`;
  execFileSync("psql", [BASE_DB, "-q", "-c", `CREATE DATABASE ${name}`]);
  const children: ChildProcess[] = [];
  try {
    // One after the other: the first migrates the database and creates the admin.
    children.push(await instance(A, databaseUrl(name)));
    children.push(await instance(B, databaseUrl(name)));

    // The browser logs in on B.
    await page.goto(`${B}/login`);
    await page.getByLabel("Name").fill("admin");
    await page.getByLabel("Password").fill(ADMIN_PASSWORD);
    await page.getByTestId("log-in").click();
    await page.waitForURL(`${B}/`);

    // A script starts a run through A.
    const onA = await playwright.request.newContext({ baseURL: A, storageState: { cookies: [], origins: [] } });
    expect((await onA.post("/api/nrllm_login", { data: { name: "admin", password: ADMIN_PASSWORD } })).status()).toBe(200);
    const csrf = (await onA.storageState()).cookies.find((c) => c.name === "nrllm_csrf")!.value;
    const started = await onA.post("/api/nrllm_tool_run", {
      data: { prompt: 'Rename the home page to "Seen from B"' },
      headers: { "x-csrf-token": csrf },
    });
    expect(started.status()).toBe(200);
    const runId: string = await started.json();

    // B's page, opened while A works on the run, follows it to the approval panel.
    await page.goto(`${B}/runs/${runId}`);
    await expect(page.getByTestId("running-note")).toBeVisible();
    // What A's model writes reaches B's page as it is written.
    const forming = page.getByTestId("forming-call").filter({ hasText: "update_page" });
    await expect(forming).toContainText("still being written", { timeout: 20_000 });
    await expect(page.getByRole("button", { name: /Approve all/ })).toBeVisible({ timeout: 20_000 });
    await expect(page.getByTestId("forming")).toHaveCount(0);
    await expect(page.getByTestId("step").filter({ hasText: /update_page/ }).first()).toBeVisible();
    await onA.dispose();
  } finally {
    for (const child of children) child.kill("SIGKILL");
    await new Promise((r) => setTimeout(r, 300));
    execFileSync("psql", [BASE_DB, "-q", "-c", `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`]);
  }
});
