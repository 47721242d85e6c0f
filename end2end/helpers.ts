// Steps the specs share: start a run from the playground form or the API, wait for a part of the
// run page, approve a run through the API.
import { APIRequestContext, expect, Page } from "@playwright/test";

/** Fills the playground form (prompt, and any other labelled field) and starts the run. */
export async function startRun(
  page: Page,
  prompt: string,
  fields: { configuration?: string; systemPrompt?: string; skills?: string } = {},
): Promise<string> {
  await page.goto("/");
  await page.getByLabel("Prompt", { exact: true }).fill(prompt);
  if (fields.configuration) await page.getByLabel("Model configuration").selectOption(fields.configuration);
  if (fields.systemPrompt !== undefined) await page.getByLabel("System prompt").fill(fields.systemPrompt);
  if (fields.skills !== undefined) await page.getByLabel("Skills").fill(fields.skills);
  await page.getByTestId("start-run").click();
  await page.waitForURL(/\/runs\/[0-9a-f-]{36}$/);
  return page.url();
}

/** Waits until the run page shows `testId`, reloading when JavaScript is off (no live updates). */
export async function waitFor(page: Page, testId: string, reload: boolean) {
  const target = page.getByTestId(testId);
  for (let i = 0; i < 40; i++) {
    if (await target.count()) return;
    if (reload) {
      await page.waitForTimeout(250);
      await page.reload();
    } else {
      await target.first().waitFor({ timeout: 500 }).catch(() => undefined);
    }
  }
  await expect(target.first()).toBeVisible();
}

/** A run as the API shows it. */
export async function runView(request: APIRequestContext, runId: string) {
  return (await request.post("/api/nrllm_run_get", { data: { run_id: runId } })).json();
}

/** Starts a run through the API and waits until it waits for a decision. */
export async function startWaiting(request: APIRequestContext, prompt: string, configuration = "demo") {
  const started = await request.post("/api/nrllm_tool_run", { data: { prompt, configuration } });
  expect(started.status()).toBe(200);
  const runId: string = await started.json();
  let view = await runView(request, runId);
  for (let i = 0; i < 60 && view.summary.status !== "waiting_for_approval"; i++) {
    await new Promise((r) => setTimeout(r, 100));
    view = await runView(request, runId);
  }
  expect(view.summary.status).toBe("waiting_for_approval");
  return { runId, view };
}

/** Starts a run through the API and approves it, waiting until it completes. */
export async function runApproved(request: APIRequestContext, prompt: string) {
  const { runId, view } = await startWaiting(request, prompt);
  const ok = await request.post("/api/nrllm_tool_resume", {
    data: { run_id: runId, decision: "approve_all", digest: view.digest },
  });
  expect(ok.status()).toBe(200);
  let done = await runView(request, runId);
  for (let i = 0; i < 60 && done.summary.status !== "completed"; i++) {
    await new Promise((r) => setTimeout(r, 100));
    done = await runView(request, runId);
  }
  expect(done.summary.status).toBe("completed");
}
