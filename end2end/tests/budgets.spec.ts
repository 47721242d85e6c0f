import { APIRequestContext, request as playwrightRequest } from "@playwright/test";
import { test, expect, USER_PASSWORD } from "../fixtures";
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

    test("a run that loops pauses at the budget set on the form; raised, it goes on to its closing answer", async ({ page }) => {
      // README's looping prompt: the demo model reads the clock every round and is never done.
      await page.goto("/");
      await page.getByLabel("Prompt", { exact: true }).fill("Keep checking the time");
      await page.getByTestId("budget-fields").locator("summary").click();
      await page.getByLabel("Model requests").fill("3");
      await page.getByTestId("start-run").click();
      await page.waitForURL(/\/runs\/[0-9a-f-]{36}$/);
      if (javaScript) {
        // While it runs, the strip moves with each response the live steps bring.
        await expect(page.locator('[data-testid="limit"][data-kind="requests"]')).toHaveText(
          /^model requests: [12] \/ 3$/,
        );
      }
      await waitFor(page, "budget-panel", !javaScript);
      await expect(page.getByTestId("budget-stop")).toHaveText(
        "model requests: 3 used of 3; the model was not asked for round 4",
      );
      await expect(page.locator('[data-testid="step"][data-kind="tool"]')).toHaveCount(3);
      await page.getByTestId("raise-to").fill("10");
      await page.getByTestId("raise").click();
      await waitFor(page, "final-answer", !javaScript);
      await expect(page.getByTestId("status")).toHaveText("Completed");
      // Five rounds (max_rounds), then the closing answer, asked with no tool offered.
      await expect(page.getByTestId("final-answer")).toContainText("I stopped after the round limit");
      await expect(page.locator('[data-testid="step"][data-kind="tool"]')).toHaveCount(5);
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

// A user's daily spend cap across runs (end2end/nrllm-e2e.toml: $0.001 a day for each user; the
// `metered` configuration's first response costs more): the run waits at the cap, no approver
// can raise it, and an administrator's raise for the day on /system lets it go on by itself.
// Each attempt spends as a new user, whose day starts at nothing.
for (const javaScript of [true, false]) {
  test.describe(`daily spend cap, JavaScript ${javaScript ? "on" : "off"}`, () => {
    test.use({ javaScriptEnabled: javaScript });

    test("a run waits at its user's daily cap until an administrator raises it on /system", async ({
      page,
      request,
      baseURL,
    }) => {
      const spender = `spender-${javaScript ? "js" : "nojs"}-${Date.now() % 1_000_000}`;
      const made = await request.post("/api/nrllm_user_create", {
        data: { name: spender, password: USER_PASSWORD, role: "operator" },
      });
      expect(made.status()).toBe(200);
      const as = await playwrightRequest.newContext({ baseURL, storageState: { cookies: [], origins: [] } });
      const login = await as.post("/api/nrllm_login", { data: { name: spender, password: USER_PASSWORD } });
      expect(login.status()).toBe(200);
      const csrf = (await as.storageState()).cookies.find((c) => c.name === "nrllm_csrf")!.value;
      const started = await as.post("/api/nrllm_tool_run", {
        data: { prompt: "List the pages", configuration: "metered" },
        headers: { "x-csrf-token": csrf },
      });
      expect(started.status()).toBe(200);
      const runId: string = await started.json();
      await as.dispose();
      await expect
        .poll(async () => (await runView(request, runId)).summary.status, { timeout: 15_000 })
        .toBe("waiting_for_budget");

      // The run page names the cap, offers no raise of the run's own limits, only a stop.
      await page.goto(`/runs/${runId}`);
      const panel = page.getByTestId("budget-panel");
      await expect(panel).toContainText("The run reached a daily spend cap");
      await expect(page.getByTestId("budget-stop")).toContainText("the user's daily spend cap for");
      await expect(page.getByTestId("budget-stop")).toContainText("of $0.0010; the model was not asked for round 2");
      await expect(panel.getByTestId("raise")).toHaveCount(0);
      await expect(panel.getByTestId("stop-at-budget")).toBeVisible();
      // The API refuses a person's raise of a run waiting at a daily cap.
      const refused = await request.post("/api/nrllm_budget_decide", {
        data: { run_id: runId, decision: "raise", raise_by: "1" },
      });
      expect(refused.status()).toBe(400);
      expect(await refused.text()).toContain("daily spend cap");

      // /system shows the user's spend against the cap, reached; the administrator raises it.
      await page.goto("/system");
      const row = page.locator(`[data-testid="spend-row"][data-scope="user"][data-name="${spender}"]`);
      await expect(row).toHaveAttribute("data-reached", "true");
      await expect(row.getByTestId("spend-count")).toContainText("of $0.0010");
      await row.getByLabel(`Raise the user ${spender}'s cap today by (US dollars)`).fill("1");
      await row.getByTestId("spend-raise").click();
      await page.waitForURL(/\/system$/);
      await expect(row).toHaveAttribute("data-reached", "false");
      await expect(row.getByTestId("spend-count")).toContainText("(raised by $1.0000 today)");
      await expect
        .poll(async () => (await runView(request, runId)).summary.status, { timeout: 15_000 })
        .toBe("completed");
      await page.goto(`/runs/${runId}`);
      await expect(
        page.getByTestId("step").filter({ hasText: "daily allowance: the user's daily spend cap for" }),
      ).toHaveCount(1);
    });
  });
}
