import { Page } from "@playwright/test";
import { test, expect } from "../fixtures";
import { runApproved, runView, startRun, startWaiting, waitFor } from "../helpers";

// What an operator sees when they press a button is exactly what happens: edits run, reasons
// reach their calls, decisions bind to the previewed target, each suspension shows only its own
// decision, and every step's detail is a link away.

/** Accepts every confirmation the page asks, and keeps their texts. */
function acceptDialogs(page: Page): string[] {
  const asked: string[] = [];
  page.on("dialog", async (dialog) => {
    asked.push(dialog.message());
    await dialog.accept();
  });
  return asked;
}

for (const javaScript of [true, false]) {
  const mode = javaScript ? "js" : "nojs";
  const reload = !javaScript;

  test.describe(`deciding, JavaScript ${javaScript ? "on" : "off"}`, () => {
    test.use({ javaScriptEnabled: javaScript });

    test("edited arguments run when Approve all is pressed", async ({ page, request }) => {
      const asked = acceptDialogs(page);
      await runApproved(request, `Create a page edit-${mode} titled "Draft"`);
      await startRun(page, `Rename the edit-${mode} page to "Model title"`);
      await waitFor(page, "approval-panel", reload);
      await page
        .getByTestId("pending-call")
        .getByLabel(/^Arguments it runs with/)
        .fill(JSON.stringify({ slug: `edit-${mode}`, title: "Operator title" }));
      await page.getByRole("button", { name: "Approve all (a)" }).click();
      await waitFor(page, "final-answer", reload);
      await expect(page.getByTestId("final-answer")).toContainText('"Draft" → "Operator title"');
      if (javaScript) expect(asked.join("\n")).toContain("Approve all runs your edited arguments for update_page");
      // The decision step says what was approved, with the edit as a diff.
      const decided = page.getByTestId("step").filter({ hasText: "update_page approved with edits" });
      await expect(decided).toHaveCount(1);
      await decided.getByRole("link").click();
      const detail = page.getByTestId("detail-text");
      await expect(detail).toContainText('-   "title": "Model title"');
      await expect(detail).toContainText('+   "title": "Operator title"');
    });

    test("a reason typed beside a call reaches the model when Deny all is pressed", async ({ page }) => {
      acceptDialogs(page);
      await startRun(page, "Publish the careers page and tell team@example.com");
      await waitFor(page, "approval-panel", reload);
      const message = page.locator('[data-testid="pending-call"][data-tool="send_message"]');
      await message.getByLabel(/^Reason if denied/).fill(`not before Monday ${mode}`);
      await page.getByLabel(/^Reason for every denied call/).fill(`hold everything ${mode}`);
      await page.getByRole("button", { name: "Deny all (d)" }).click();
      await waitFor(page, "final-answer", reload);
      const answer = page.getByTestId("final-answer");
      await expect(answer).toContainText(`not before Monday ${mode}`);
      await expect(answer).toContainText(`hold everything ${mode}`);
      await expect(
        page.getByTestId("step").filter({ hasText: `send_message denied ("not before Monday ${mode}")` }),
      ).toHaveCount(1);
      await expect(
        page.getByTestId("step").filter({ hasText: `publish_page denied ("hold everything ${mode}")` }),
      ).toHaveCount(1);
    });

    test("a button that would drop a typed reason asks first (or refuses without JavaScript)", async ({ page }) => {
      const asked: string[] = [];
      let answer = false;
      page.on("dialog", async (dialog) => {
        asked.push(dialog.message());
        if (answer) await dialog.accept();
        else await dialog.dismiss();
      });
      await startRun(page, `Send a message to ops-${mode}@example.com saying check the site`);
      await waitFor(page, "approval-panel", reload);
      await page.getByTestId("pending-call").getByLabel(/^Reason if denied/).fill("wrong team");
      await page.getByRole("button", { name: "Approve all (a)" }).click();
      if (javaScript) {
        await expect.poll(() => asked.length).toBe(1);
        expect(asked[0]).toContain("This drops the reason you typed for send_message");
        // Dismissed: nothing was decided, the typed reason is still there.
        await expect(page.getByTestId("pending-call").getByLabel(/^Reason if denied/)).toHaveValue("wrong team");
        answer = true;
        await page.getByRole("button", { name: "Approve all (a)" }).click();
      } else {
        await expect(page.getByTestId("error-banner")).toContainText(
          "nothing was decided: Approve all would drop the reason typed for send_message",
        );
        // The refused post changed nothing; pressed again (the box is empty now), it approves.
        await page.getByRole("button", { name: "Approve all (a)" }).click();
      }
      await waitFor(page, "final-answer", reload);
      await expect(page.getByTestId("final-answer")).toContainText(`ops-${mode}@example.com`);
    });

    test("the inbox decides per call, with arguments and previews shown", async ({ page }) => {
      acceptDialogs(page);
      // The inbox lists every waiting run: a retry's run is told apart from the first attempt's.
      const to = `inbox-${mode}-${test.info().retry}@example.com`;
      const url = await startRun(page, `Publish the contact page and tell ${to}`);
      await waitFor(page, "approval-panel", reload);
      await page.goto("/approvals?tool=send_message");
      const item = page.getByTestId("inbox-item").filter({ hasText: to });
      await expect(item).toHaveCount(1);
      await expect(item.getByTestId("inbox-facts")).toContainText("started by operator");
      // The row opens its panel: in place with JavaScript, by loading the inbox without.
      await item.getByTestId("inbox-prompt").click();
      await expect(item.getByTestId("approval-panel")).toBeVisible();
      const publish = item.locator('[data-testid="pending-call"][data-tool="publish_page"]');
      await expect(publish.getByTestId("preview")).toContainText("Effect on page contact");
      const message = item.locator('[data-testid="pending-call"][data-tool="send_message"]');
      await expect(message.getByTestId("call-arguments")).toContainText(to);
      await expect(message.getByTestId("preview")).toContainText(`To: ${to}`);
      await message.getByLabel("Deny", { exact: true }).check();
      await message.getByLabel(/^Reason if denied/).fill(`announce it later ${mode}`);
      await item.getByRole("button", { name: "Apply the choices above" }).click();
      // On to the next turn of the same inbox (filtered by tool); the run goes on.
      await page.waitForURL(/\/approvals\?tool=send_message/);
      await page.goto(url);
      await waitFor(page, "final-answer", reload);
      const answer = page.getByTestId("final-answer");
      await expect(answer).toContainText("contact");
      await expect(answer).toContainText(`announce it later ${mode}`);
      // Filtered by a configuration it is not in, the run is not listed.
      await page.goto("/approvals?configuration=hostile");
      await expect(page.getByTestId("inbox-item").filter({ hasText: to })).toHaveCount(0);
    });

    test("a target that changed after the preview is refused with the new diff, and nothing is written", async ({
      page,
      request,
    }) => {
      acceptDialogs(page);
      const slug = `stale-${mode}`;
      await runApproved(request, `Create a page ${slug} titled "Original"`);
      await startRun(page, `Rename the ${slug} page to "Seen by the operator"`);
      await waitFor(page, "approval-panel", reload);
      await expect(page.getByTestId("preview")).toContainText("- title: Original");
      // Meanwhile another run changes the same page through the API.
      await runApproved(request, `Rename the ${slug} page to "Changed meanwhile"`);
      await page.getByRole("button", { name: "Approve all (a)" }).click();
      await expect(page.getByTestId("error-banner")).toContainText("has changed since you looked, so nothing was run");
      // The panel shows the new diff: the page is as the other run left it, nothing was written.
      await expect(page.getByTestId("preview")).toContainText("- title: Changed meanwhile");
      await expect(page.getByTestId("preview")).toContainText("+ title: Seen by the operator");
      // Decided again on what it shows now, it goes through.
      await page.getByRole("button", { name: "Approve all (a)" }).click();
      await waitFor(page, "final-answer", reload);
      await expect(page.getByTestId("final-answer")).toContainText('"Changed meanwhile" → "Seen by the operator"');
    });

    test("a second suspension shows only its own decision state; earlier decisions stay in the steps", async ({
      page,
    }) => {
      acceptDialogs(page);
      const slug = `twice-${mode}`;
      await startRun(page, `hostile twice ${slug}`, { configuration: "hostile" });
      await waitFor(page, "approval-panel", reload);
      await page.getByRole("button", { name: "Approve all (a)" }).click();
      // The run waits again, for the second call.
      for (let i = 0; i < 40; i++) {
        if (await page.locator('[data-testid="pending-call"][data-tool="update_page"]').count()) break;
        await page.waitForTimeout(250);
        await page.reload();
      }
      await expect(page.locator('[data-testid="pending-call"][data-tool="update_page"]')).toHaveCount(1);
      await expect(page.getByTestId("summary")).not.toContainText("approved by");
      await expect(page.getByTestId("step").filter({ hasText: "create_page approved as is" })).toHaveCount(1);
      await page.getByRole("button", { name: "Approve all (a)" }).click();
      await waitFor(page, "final-answer", reload);
      await expect(page.getByTestId("summary")).toContainText("approved by operator");
    });

    test("step detail: each step and tab is a link", async ({ page }) => {
      await startRun(page, "List the pages");
      await waitFor(page, "final-answer", reload);
      const tool = page.getByTestId("step").filter({ hasText: "list_pages: ok" });
      await tool.getByRole("link").click();
      await expect(page).toHaveURL(/\?step=\d+#detail$/);
      const detail = page.getByTestId("step-detail");
      await expect(detail.getByTestId("detail-title")).toHaveText("list_pages: ok");
      await expect(detail.getByRole("link", { name: "Arguments" })).toHaveAttribute("aria-current", "page");
      await detail.getByRole("link", { name: "Result" }).click();
      await expect(page.getByTestId("detail-text")).toContainText('"slug":"home"');
      await detail.getByRole("link", { name: "Raw" }).click();
      await expect(page.getByTestId("detail-text")).toContainText('"kind": "tool"');
      // A request shows the messages new in its round; the whole transcript is one tab away.
      await page.getByTestId("step").filter({ hasText: "request:" }).nth(1).getByRole("link").click();
      await expect(page.getByTestId("detail-title")).toContainText("new)");
      await expect(page.getByTestId("detail-text")).not.toContainText('"role": "system"');
      await page.getByTestId("step-detail").getByRole("link", { name: "Full transcript" }).click();
      await expect(page.getByTestId("detail-text")).toContainText('"role": "system"');
    });
  });
}
