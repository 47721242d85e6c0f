import { test, expect } from "../fixtures";
import { startRun, waitFor } from "../helpers";

// Each test acts on its own page of the demo site, so the tests do not depend on each other.

test.describe("with JavaScript", () => {
  test("approve: the page shows the change, the operator approves, the run finishes", async ({ page }) => {
    await startRun(page, 'Rename the about page to "About Example Co."');
    await waitFor(page, "approval-panel", false);
    const call = page.getByTestId("pending-call");
    await expect(call).toHaveCount(1);
    await expect(call).toHaveAttribute("data-tool", "update_page");
    // The default approval_timeout (24 h): by when to decide (in the browser's zone, UTC on
    // hover) and how long is left.
    const deadline = page.getByTestId("deadline");
    await expect(deadline).toContainText(/^Decide by .* \(23 h 5\d min left\)/);
    await expect(deadline.locator("time")).toHaveAttribute("title", /UTC$/);
    await expect(deadline.locator("time")).not.toContainText("UTC");
    const preview = call.getByTestId("preview");
    await expect(preview).toContainText("- title: About us");
    await expect(preview).toContainText("+ title: About Example Co.");
    await page.getByRole("button", { name: "Approve all (a)" }).click();
    await waitFor(page, "final-answer", false);
    await expect(page.getByTestId("final-answer")).toContainText('"About us" → "About Example Co."');
    await expect(page.getByTestId("status")).toHaveText("Completed");
    await expect(page.getByTestId("step").filter({ hasText: "update_page: ok (after the decision)" })).toHaveCount(1);
  });

  test("deny: the reason is in the steps and in the final answer", async ({ page }) => {
    await startRun(page, "Delete the changelog page");
    await waitFor(page, "approval-panel", false);
    await expect(page.getByTestId("pending-call")).toHaveAttribute("data-tool", "delete_page");
    await page.getByLabel(/^Reason for every denied call/).fill("we still link to it");
    await page.getByRole("button", { name: "Deny all (d)" }).click();
    await waitFor(page, "final-answer", false);
    await expect(page.getByTestId("final-answer")).toContainText("we still link to it");
    const denied = page.getByTestId("step").filter({ hasText: "delete_page: denied" });
    await expect(denied).toHaveCount(1);
    await denied.getByRole("link").click();
    await page.getByTestId("step-detail").getByRole("link", { name: "Result" }).click();
    await expect(page.getByTestId("detail-text")).toHaveText("denied by the operator: we still link to it");
  });

  test("per-call decisions: approve one call of the turn, deny the other", async ({ page }) => {
    await startRun(page, "Publish the careers page and tell team@example.com");
    await waitFor(page, "approval-panel", false);
    const calls = page.getByTestId("pending-call");
    await expect(calls).toHaveCount(2);
    const message = page.locator('[data-testid="pending-call"][data-tool="send_message"]');
    await message.getByLabel("Deny", { exact: true }).check();
    await message.getByLabel("Reason if denied (the model reads it)").fill("announce it on Monday");
    await page.getByRole("button", { name: "Apply the choices above" }).click();
    await waitFor(page, "final-answer", false);
    const answer = page.getByTestId("final-answer");
    await expect(answer).toContainText("Published page `careers`");
    await expect(answer).toContainText("announce it on Monday");
  });

  test("edited arguments: invalid JSON for the schema is refused, valid edits are written", async ({ page }) => {
    const url = await startRun(page, 'Rename the pricing page to "Prices"');
    await waitFor(page, "approval-panel", false);
    const call = page.getByTestId("pending-call");
    const args = call.getByLabel(/^Arguments it runs with/);
    await args.fill('{"slug": "pricing", "title": 42}');
    await page.getByRole("button", { name: "Apply the choices above" }).click();
    await expect(page.getByTestId("error-banner")).toContainText("field `title`");
    await expect(page.getByTestId("approval-panel")).toBeVisible();
    expect(page.url().split("?")[0]).toBe(url);

    const again = page.getByTestId("pending-call");
    await again.getByLabel(/^Arguments it runs with/).fill('{"slug": "pricing", "title": "Our prices"}');
    await page.getByRole("button", { name: "Apply the choices above" }).click();
    await waitFor(page, "final-answer", false);
    await expect(page.getByTestId("final-answer")).toContainText('"Pricing" → "Our prices"');
  });

  test("two pages decide the same run: one wins, the other is told it was already decided", async ({ browser }) => {
    const first = await (await browser.newContext()).newPage();
    const url = await startRun(first, 'Rename the home page to "Hello from two tabs"');
    await waitFor(first, "approval-panel", false);
    const second = await (await browser.newContext()).newPage();
    await second.goto(url);
    await expect(second.getByTestId("approval-panel")).toBeVisible();

    await first.getByRole("button", { name: "Approve all (a)" }).click();
    await waitFor(first, "final-answer", false);
    await second.getByRole("button", { name: "Deny all (d)" }).click();
    await expect(second.getByTestId("error-banner")).toContainText(/already decided \(approved\) at \d{4}-\d\d-\d\d/);
    await expect(second.getByTestId("final-answer")).toContainText("Hello from two tabs");
  });

  test("markup in tool arguments and results is shown as text and never runs", async ({ page }) => {
    let dialogs = 0;
    page.on("dialog", async (dialog) => {
      dialogs++;
      await dialog.dismiss();
    });
    await startRun(page, 'Create a page xss titled "<script>window.__xss=1</script><img src=x onerror=alert(1)>"');
    await waitFor(page, "approval-panel", false);
    await expect(page.getByTestId("call-arguments")).toContainText("<script>window.__xss=1</script>");
    await page.getByRole("button", { name: "Approve all (a)" }).click();
    await waitFor(page, "final-answer", false);
    await expect(page.getByTestId("final-answer")).toContainText("<script>window.__xss=1</script>");
    expect(await page.evaluate(() => (window as unknown as { __xss?: number }).__xss)).toBeUndefined();
    expect(await page.locator("main script").count()).toBe(0);
    expect(dialogs).toBe(0);
  });

  test("live steps appear without a reload", async ({ page }) => {
    await startRun(page, "List the pages");
    // Watch this document: a step added to it, not rendered by a page load, is noted in the
    // tab's session storage. The note outlives the reload the run's final status makes, which
    // may come right after the last step (a mark on the window would race that reload).
    await page.evaluate(() => {
      const steps = () => document.querySelectorAll('[data-testid="step"]').length;
      const before = steps();
      new MutationObserver(() => {
        if (steps() > before) sessionStorage.setItem("live-step", "seen");
      }).observe(document.body, { childList: true, subtree: true });
    });
    await waitFor(page, "final-answer", false);
    expect(await page.evaluate(() => sessionStorage.getItem("live-step"))).toBe("seen");
  });

  test("leaving a running run's page: the run stopping meanwhile does not cancel the navigation", async ({ page }) => {
    // The run page's event stream is held until the run has stopped; the next page's request is
    // held too, and the whole stream, its final status included, reaches the run page while the
    // next page is still on its way. A page that reloaded on that status would cancel the
    // operator's navigation.
    let streamed!: () => void;
    const stopped = new Promise<void>((resolve) => (streamed = resolve));
    let deliver: () => Promise<void> = async () => undefined;
    await page.route(
      "**/api/runs/*/events*",
      async (route) => {
        const response = await route.fetch();
        deliver = () => route.fulfill({ response }).catch(() => undefined);
        streamed();
      },
      { times: 1 },
    );
    await page.route(
      "**/approvals",
      async (route) => {
        await deliver();
        await new Promise((resolve) => setTimeout(resolve, 1_500));
        await route.continue().catch(() => undefined);
      },
      { times: 1 },
    );
    await startRun(page, "List the pages");
    await stopped;
    // The page was rendered before the run stopped, and has heard nothing since.
    await expect(page.getByTestId("status")).toHaveText(/^(Queued|Running)$/);
    await page.locator('header a[href="/approvals"]').click();
    await page.waitForURL(/\/approvals$/, { timeout: 10_000 });
    await expect(page.getByRole("heading", { level: 1 })).toHaveText("Approvals");
  });

  test("a navigation away that does not happen: the run's page listens again and shows its end", async ({ page }) => {
    // The next page answers 204: the browser stays on the run's page, which stopped listening
    // when the operator clicked away. Its first stream is held until then, so that the page
    // learns nothing of the run's end before the click, however slow the machine (the run takes
    // about 1.4 s; a page that heard its end first would reload and show it without listening again).
    let clicked!: () => void;
    const away = new Promise<void>((resolve) => (clicked = resolve));
    await page.route(
      "**/api/runs/*/events*",
      async (route) => {
        await away;
        await route.continue().catch(() => undefined);
      },
      { times: 1 },
    );
    await page.route("**/approvals", (route) => route.fulfill({ status: 204 }), { times: 1 });
    const listening = page.waitForRequest(/\/api\/runs\/[0-9a-f-]{36}\/events/);
    await startRun(page, "List the pages");
    await listening;
    await expect(page.getByTestId("status")).toHaveText(/^(Queued|Running)$/);
    await page.locator('header a[href="/approvals"]').click();
    clicked();
    await expect(page.getByTestId("final-answer")).toBeVisible({ timeout: 20_000 });
    await expect(page.getByTestId("status")).toHaveText("Completed");
    expect(new URL(page.url()).pathname).toMatch(/^\/runs\//);
  });

  test("keyboard: a approves all", async ({ page }) => {
    await startRun(page, 'Rename the contact page to "Talk to us"');
    await waitFor(page, "approval-panel", false);
    await page.locator("body").press("a");
    await waitFor(page, "final-answer", false);
    await expect(page.getByTestId("final-answer")).toContainText('"Talk to us"');
  });

  test("bad form values are shown at their field and start nothing", async ({ page }) => {
    await page.goto("/");
    await page.getByLabel("Prompt", { exact: true }).fill("List the pages");
    await page.getByLabel("Max rounds").fill("50");
    await page.getByTestId("start-run").click();
    await expect(page.getByTestId("error-max_rounds")).toHaveText("a whole number from 1 to 20");
    expect(new URL(page.url()).pathname).toBe("/");
  });

  test.describe("a page that answers 404", () => {
    // Chromium logs the 404 status of the page itself; that is what this test asks for.
    test.use({ consoleErrorsAllowed: /status of 404/ });

    test("an unknown run is a 404 page", async ({ page }) => {
      const response = await page.goto("/runs/00000000-0000-7000-8000-000000000000");
      expect(response?.status()).toBe(404);
      await expect(page.getByTestId("not-found")).toBeVisible();
    });
  });
});

test.describe("without JavaScript", () => {
  test.use({ javaScriptEnabled: false });

  test("the whole approve path works with plain form posts", async ({ page }) => {
    await startRun(page, 'Rename the careers page to "Jobs"');
    await waitFor(page, "approval-panel", true);
    await expect(page.getByTestId("pending-call")).toHaveAttribute("data-tool", "update_page");
    await page.getByRole("button", { name: "Approve all (a)" }).click();
    await waitFor(page, "final-answer", true);
    await expect(page.getByTestId("final-answer")).toContainText('"Careers" → "Jobs"');
    await page.goto("/runs?status=completed");
    await expect(page.getByTestId("run-row").filter({ hasText: 'Rename the careers page to "Jobs"' })).toHaveCount(1);
  });
});

test.describe("the API", () => {
  test("JSON clients get status codes: 400 naming the field, 404, 409 once decided", async ({ request }) => {
    const bad = await request.post("/api/nrllm_tool_run", { data: { prompt: "List the pages", temperature: "9" } });
    expect(bad.status()).toBe(400);
    expect(JSON.stringify(await bad.json())).toContain("temperature");

    const missing = await request.post("/api/nrllm_run_get", { data: { run_id: "00000000-0000-7000-8000-000000000000" } });
    expect(missing.status()).toBe(404);

    const started = await request.post("/api/nrllm_tool_run", { data: { prompt: 'Rename the changelog page to "News"' } });
    expect(started.status()).toBe(200);
    const runId: string = await started.json();
    let view: { summary: { status: string }; digest: string | null } = { summary: { status: "" }, digest: null };
    for (let i = 0; i < 40 && view.summary.status !== "waiting_for_approval"; i++) {
      await new Promise((r) => setTimeout(r, 100));
      view = await (await request.post("/api/nrllm_run_get", { data: { run_id: runId } })).json();
    }
    expect(view.summary.status).toBe("waiting_for_approval");
    const stale = await request.post("/api/nrllm_tool_resume", {
      data: { run_id: runId, decision: "approve_all", digest: "not-the-digest" },
    });
    expect(stale.status()).toBe(409);
    const ok = await request.post("/api/nrllm_tool_resume", {
      data: { run_id: runId, decision: "deny_all", reason: "keep the name", digest: view.digest },
    });
    expect(ok.status()).toBe(200);
    const again = await request.post("/api/nrllm_tool_resume", { data: { run_id: runId, decision: "approve_all" } });
    expect(again.status()).toBe(409);
    expect(JSON.stringify(await again.json())).toContain("already decided (denied) at");
  });
});

test.describe("the approvals inbox", () => {
  test("lists waiting runs with their pending tools and decides from there", async ({ page }) => {
    // The inbox lists every waiting run: a retry's run is told apart from the first attempt's.
    const prompt = `Change the body of the home page to "We build careful tools (${test.info().retry})."`;
    const url = await startRun(page, prompt);
    await waitFor(page, "approval-panel", false);
    await page.goto("/approvals");
    const item = page.getByTestId("inbox-item").filter({ hasText: prompt });
    await expect(item).toHaveCount(1);
    // A compact row: the tool and its arguments on one line, the deadline; no preview yet.
    await expect(item.getByTestId("inbox-tool")).toHaveText(["update_page"]);
    await expect(item.getByTestId("inbox-summary")).toContainText('slug="home"');
    await expect(item.getByTestId("inbox-deadline")).toContainText("decide by");
    await expect(item.getByTestId("preview")).toHaveCount(0);
    // Its panel opens in place, as a disclosure.
    const toggle = item.getByTestId("inbox-prompt");
    await expect(toggle).toHaveAttribute("aria-expanded", "false");
    await toggle.click();
    await expect(toggle).toHaveAttribute("aria-expanded", "true");
    await expect(item.getByTestId("deadline")).toContainText("left)");
    // The deadline's moment is a <time> (shown in the browser's zone, UTC on hover).
    await expect(item.getByTestId("deadline").locator("time")).toHaveAttribute("datetime", /T.*Z$/);
    await expect(item.getByTestId("preview")).toContainText("home");
    await item.getByRole("button", { name: "Approve all" }).click();
    // The inbox goes on to the next turn; the run goes on.
    await page.waitForURL(/\/approvals/);
    await page.goto(url);
    await waitFor(page, "final-answer", false);
    await expect(page.getByTestId("final-answer")).toContainText("body changed");
    await page.goto("/approvals");
    await expect(page.getByTestId("inbox-item").filter({ hasText: prompt })).toHaveCount(0);
  });
});
