import { test, expect, ADMIN_PASSWORD } from "../fixtures";
import { CrashServer, CRASH_URL } from "../crashed-server";

// A server killed with SIGKILL right after an approved export wrote its file — before the call's
// result was journaled — comes back with the run waiting and the call marked "outcome unknown".
// The operator sees the three choices, records what happened by hand, and the model reads it.

test.describe.configure({ timeout: 90_000 });

test("an export cut off by kill -9 waits with its outcome unknown; a result recorded by hand reaches the model", async ({
  page,
  playwright,
}) => {
  const armed = await CrashServer.start({ failpoint: "in_tool_after_effect", fresh: true });
  let restarted: CrashServer | null = null;
  // That server has a database of its own: log in there as its first admin.
  const request = await playwright.request.newContext({ baseURL: CRASH_URL, storageState: { cookies: [], origins: [] } });
  try {
    const login = await request.post(`${CRASH_URL}/api/nrllm_login`, {
      data: { name: "admin", password: ADMIN_PASSWORD },
    });
    expect(login.status()).toBe(200);
    const csrf = (await request.storageState()).cookies.find((c) => c.name === "nrllm_csrf")!.value;
    const headers = { "x-csrf-token": csrf };
    const started = await request.post(`${CRASH_URL}/api/nrllm_tool_run`, {
      data: { prompt: "Export the pricing page" },
      headers,
    });
    expect(started.status()).toBe(200);
    const runId: string = await started.json();
    const view = async () =>
      (await request.post(`${CRASH_URL}/api/nrllm_run_get`, { data: { run_id: runId }, headers })).json();
    await expect.poll(async () => (await view()).summary.status, { timeout: 20_000 }).toBe("waiting_for_approval");
    const approved = await request.post(`${CRASH_URL}/api/nrllm_tool_resume`, {
      data: { run_id: runId, decision: "approve_all" },
      headers,
    });
    expect(approved.status()).toBe(200);
    expect(await armed.reached).toBe("in_tool_after_effect");
    await armed.kill();

    restarted = await CrashServer.start();
    // The browser logs in there too (its session belongs to the suite's server).
    await page.goto(`${CRASH_URL}/runs/${runId}`);
    await page.getByLabel("Name").fill("admin");
    await page.getByLabel("Password").fill(ADMIN_PASSWORD);
    await page.getByTestId("log-in").click();
    await page.waitForURL(`${CRASH_URL}/runs/${runId}`);
    await expect(page.getByTestId("outcome-unknown")).toContainText("Outcome unknown");
    await expect(page.getByTestId("outcome-unknown")).toContainText(`effect key ${runId}/`);
    await expect(page.getByLabel("Run it again (same effect key)", { exact: true })).toBeChecked();
    await expect(page.getByLabel("Record what happened", { exact: true })).toBeVisible();
    await expect(page.getByLabel("Tell the model it failed", { exact: true })).toBeVisible();
    // The steps say what happened to the run.
    await expect(page.locator('[data-testid="step"][data-kind="outcome_unknown"]')).toContainText("export_page");

    await page.getByLabel("Record what happened", { exact: true }).check();
    await page.getByLabel(/^What happened/).fill("The export file is there, written at 10:02.");
    await page.getByRole("button", { name: "Apply the choices above" }).click();
    await expect(page.getByTestId("final-answer")).toContainText("The export file is there, written at 10:02.", {
      timeout: 20_000,
    });
    await expect(page.getByTestId("final-answer")).toContainText("answered this call without running the tool");
    // The log holds: its hash chain verifies across the kill and the recovery.
    await expect(page.getByTestId("log-check")).toHaveText(/^log verified \(\d+ steps\)$/);
    await expect(page.getByTestId("log-check")).toHaveAttribute("data-verified", "true");
    const done = await view();
    expect(done.summary.status).toBe("completed");
  } finally {
    await armed.kill();
    await restarted?.kill();
    await request.dispose();
  }
});
