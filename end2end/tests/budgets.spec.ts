import { APIRequestContext } from "@playwright/test";
import { test, expect } from "../fixtures";
import { runView, startRun, waitFor } from "../helpers";

// A run waits at its budget and goes on when a person raises it: from the run page and from the
// inbox, with and without JavaScript. The `budgeted` configuration (end2end/nrllm-e2e.toml)
// allows one model request; "List the pages" needs two (the list, then the answer).

/** Starts a `budgeted` run through the API and waits until it waits at its budget. */
async function waitingAtBudget(request: APIRequestContext): Promise<string> {
  const started = await request.post("/api/nrllm_tool_run", {
    data: { prompt: "List the pages", configuration: "budgeted" },
  });
  expect(started.status()).toBe(200);
  const runId: string = await started.json();
  await expect
    .poll(async () => (await runView(request, runId)).summary.status, { timeout: 15_000 })
    .toBe("waiting_for_budget");
  return runId;
}

for (const javaScript of [true, false]) {
  test.describe(`JavaScript ${javaScript ? "on" : "off"}`, () => {
    test.use({ javaScriptEnabled: javaScript });

    test("the run waits at its budget, the operator raises it on the run page, it completes", async ({ page }) => {
      await startRun(page, "List the pages", { configuration: "budgeted" });
      await waitFor(page, "budget-panel", !javaScript);
      await expect(page.getByTestId("status")).toHaveText("Waiting for budget");
      await expect(page.getByTestId("budget-stop")).toHaveText(
        "model requests: 1 used of 1; the model was not asked for round 2",
      );
      await expect(page.getByTestId("limit")).toHaveText("model requests: 1 / 1");
      // Nothing of the next request happened: one answer so far, no final answer.
      await expect(page.getByTestId("final-answer")).toHaveCount(0);
      // A raise that would stop it again at once is refused, naming the field.
      await page.getByTestId("raise-to").fill("1");
      await page.getByTestId("raise").click();
      await expect(page.getByTestId("budget-panel")).toBeVisible();
      await expect(page.locator("body")).toContainText("must be raised to at least 2");
      await page.getByTestId("raise-to").fill("2");
      await page.getByTestId("raise").click();
      await waitFor(page, "final-answer", !javaScript);
      await expect(page.getByTestId("status")).toHaveText("Completed");
      await expect(
        page.getByTestId("step").filter({ hasText: "raised the limit on model requests to 2" }),
      ).toHaveCount(1);
      await expect(page.getByTestId("limit")).toHaveText("model requests: 2 / 2");
    });

    test("from the inbox: raised by an amount, the run completes; stopped, it ends budget_exhausted", async ({ page, request }) => {
      const raised = await waitingAtBudget(request);
      await page.goto(`/approvals?kind=budget&open=${raised}`);
      const panel = page.getByTestId("budget-panel");
      await expect(panel).toContainText("model requests: 1 used of 1");
      await panel.getByTestId("raise-by").fill("1");
      await panel.getByTestId("raise").click();
      await expect
        .poll(async () => (await runView(request, raised)).summary.status, { timeout: 15_000 })
        .toBe("completed");

      const stopped = await waitingAtBudget(request);
      await page.goto(`/approvals?kind=budget&open=${stopped}`);
      await page.getByTestId("budget-panel").getByTestId("stop-at-budget").click();
      await expect
        .poll(async () => (await runView(request, stopped)).summary.termination_reason, { timeout: 15_000 })
        .toBe("budget_exhausted");
    });
  });
}
