import { Browser, Page } from "@playwright/test";
import { expect, test, USER_PASSWORD } from "../fixtures";
import { runView, startWaiting } from "../helpers";

// M-of-N approvals (issue 43), in two browsers: a run of `two-approvers` (its turns need two
// people's approvals) started by `operator`, who never counts; alice approves (the run still
// waits, and every page says 1 of 2); bert approves an edit, which starts a new count; alice
// approves the same edit, and the run goes on with it. With JavaScript on and off.

/** A browser of its own, logged in as `name`. */
async function logIn(browser: Browser, name: string, javaScript: boolean): Promise<Page> {
  const context = await browser.newContext({ javaScriptEnabled: javaScript, storageState: { cookies: [], origins: [] } });
  const page = await context.newPage();
  await page.goto("/runs");
  await expect(page).toHaveURL(/\/login\?next=%2Fruns$/);
  await page.getByLabel("Name").fill(name);
  await page.getByLabel("Password").fill(USER_PASSWORD);
  await page.getByTestId("log-in").click();
  await expect(page).toHaveURL(/\/runs$/);
  return page;
}

/** Sets the title in the pending call's arguments box of `page` to `title`. */
async function editTitle(page: Page, title: string) {
  const box = page.getByTestId("pending-call").getByLabel(/^Arguments it runs with/);
  const args = JSON.parse(await box.inputValue());
  args.title = title;
  await box.fill(JSON.stringify(args));
}

for (const javaScript of [true, false]) {
  test.describe(`two approvers, JavaScript ${javaScript ? "on" : "off"}`, () => {
    test.use({ javaScriptEnabled: javaScript });

    test("the run goes on only after a second person approved the same choices", async ({ page, browser, request }) => {
      const slug = `quorum-${javaScript ? "js" : "nojs"}-${Date.now() % 1_000_000}`;
      const { runId, view } = await startWaiting(request, `Create a page ${slug} titled "Two people"`, "two-approvers");
      const runPage = `/runs/${runId}`;
      const status = async () => (await runView(request, runId)).summary.status;

      // The requester never counts, in the page and through the API.
      await page.goto(runPage);
      await expect(page.getByTestId("cannot-decide")).toContainText("this turn needs 2 approvals from other people");
      await expect(page.getByTestId("approval-tally")).toHaveText("0 of 2 approvals");
      const refused = await request.post("/api/nrllm_tool_resume", {
        data: { run_id: runId, decision: "approve_all", digest: view.digest },
      });
      expect(refused.status()).toBe(403);

      // Alice's approval counts; the run still waits, at the same digest.
      const alice = await logIn(browser, "alice", javaScript);
      await alice.goto(runPage);
      await expect(alice.getByTestId("approval-others")).toContainText("alice");
      await alice.getByRole("button", { name: /^Approve all/ }).click();
      await alice.waitForURL(new RegExp(`${runPage}$`));
      await expect(alice.getByTestId("approval-tally")).toHaveText("1 of 2 approvals: alice");
      await expect(alice.getByTestId("approval-yours")).toBeVisible();
      await expect(alice.locator("[data-panel-heading]")).toContainText("Your approval counts — waiting for more approvals");
      // No "decide without asking" rule rides on such a turn's approvals.
      await expect(alice.getByText("Decide without asking from now on…")).toHaveCount(0);
      await expect(alice.getByTestId("approval-others")).toContainText("bert");
      expect(await status()).toBe("waiting_for_approval");
      expect((await runView(request, runId)).digest).toBe(view.digest);

      // Bert sees the count in the inbox and on the run, and approves an edit: a new count.
      const bert = await logIn(browser, "bert", javaScript);
      await bert.goto("/approvals");
      const row = bert.locator(`[data-testid="inbox-item"][data-run-id="${runId}"]`);
      await expect(row.getByTestId("inbox-approvals")).toHaveText("1 of 2 approvals: alice");
      await bert.goto(runPage);
      await expect(bert.getByTestId("approval-tally")).toHaveText("1 of 2 approvals: alice");
      await editTitle(bert, "Checked twice");
      await bert.getByRole("button", { name: "Apply the choices above" }).click();
      await bert.waitForURL(new RegExp(`${runPage}$`));
      await expect(bert.getByTestId("approval-tally")).toHaveText(
        "1 of 2 approvals: bert (alice approved other choices, which do not count for these)",
      );
      expect(await status()).toBe("waiting_for_approval");

      // Alice approves the same edit: the count is reached, and the run goes on with the edit.
      await alice.goto(runPage);
      await editTitle(alice, "Checked twice");
      await alice.getByRole("button", { name: "Apply the choices above" }).click();
      await expect.poll(status, { timeout: 15_000 }).toBe("completed");
      const done = await runView(request, runId);
      expect(done.summary.decided_by).toBe("bert, alice");
      await alice.goto(runPage);
      await expect(alice.getByTestId("final-answer")).toContainText("Checked twice");
      const steps = alice.getByTestId("step");
      await expect(steps.filter({ hasText: "approval 1 of 2 by alice" })).toHaveCount(1);
      await expect(steps.filter({ hasText: "approval 1 of 2 by bert" })).toHaveCount(1);
      await alice.context().close();
      await bert.context().close();
    });
  });
}
