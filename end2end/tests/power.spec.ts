import { Page } from "@playwright/test";
import { test, expect } from "../fixtures";
import { startRun, waitFor } from "../helpers";

// Operator power tools in the browser: a tool that decides per call lets an internal message
// through; "Answer it myself" gives the model the operator's words and runs nothing; "Approve
// without asking from now on" adds a rule that decides the next matching call, whose step names
// the rule, and the rules page removes it; a question asked beside a call that needs approval is
// answered in the same decision. Each with JavaScript on and off. The rules these tests add match
// only their own addresses, so other tests running meanwhile are not affected.

/** Accepts every confirmation the page asks. */
function acceptDialogs(page: Page) {
  page.on("dialog", (dialog) => dialog.accept());
}

for (const javaScript of [true, false]) {
  const mode = javaScript ? "js" : "nojs";
  const reload = !javaScript;

  test.describe(`power tools, JavaScript ${javaScript ? "on" : "off"}`, () => {
    test.use({ javaScriptEnabled: javaScript });

    test("a message to the internal domain goes out without waiting", async ({ page }) => {
      await startRun(page, `Send a message to ops-${mode}@internal.example saying hello`);
      await waitFor(page, "final-answer", reload);
      await expect(page.getByTestId("approval-panel")).toHaveCount(0);
      await expect(page.getByTestId("step").filter({ hasText: "no approval needed" })).toHaveCount(1);
      await expect(page.getByTestId("final-answer")).toContainText("queued in the outbox");
    });

    test("answering a call instead of running it", async ({ page }) => {
      acceptDialogs(page);
      await startRun(page, `Send a message to answer-${mode}@example.com saying hello`);
      await waitFor(page, "approval-panel", reload);
      const call = page.getByTestId("pending-call");
      await call.getByLabel("Answer it myself (not run)").check();
      await call.getByLabel(/^Your answer/).fill(`<i>Told them in person (${mode}).</i>`);
      await page.getByRole("button", { name: "Apply the choices above" }).click();
      await waitFor(page, "final-answer", reload);
      // The model read the words as text; nothing was sent.
      await expect(page.getByTestId("final-answer")).toContainText(
        `<i>Told them in person (${mode}).</i>`,
      );
      await expect(page.getByTestId("step").filter({ hasText: "answered by the operator" })).toHaveCount(1);
      await expect(page.getByTestId("final-answer")).not.toContainText("queued in the outbox");
    });

    test("a rule added while approving decides the next matching call", async ({ page }) => {
      acceptDialogs(page);
      const to = `rule-${mode}@example.com`;
      await startRun(page, `Send a message to ${to} saying first`);
      await waitFor(page, "approval-panel", reload);
      const remember = page.getByTestId("remember");
      // The rule's controls fold behind one line until asked for.
      await expect(remember.getByLabel("Decide without asking from now on")).toBeHidden();
      await remember.getByText("Decide without asking from now on…").click();
      await remember.getByLabel("Decide without asking from now on").selectOption("configuration");
      await remember.getByLabel("only when").selectOption("to");
      await remember.getByLabel("compares").selectOption("equals");
      await remember.getByLabel("value").fill(to);
      await page.getByRole("button", { name: "Approve all (a)" }).click();
      await waitFor(page, "final-answer", reload);

      // The next call to the same address runs without waiting; its step names the rule.
      await startRun(page, `Send a message to ${to} saying second`);
      await waitFor(page, "final-answer", reload);
      await expect(page.getByTestId("approval-panel")).toHaveCount(0);
      const step = page.getByTestId("step").filter({ hasText: "auto-approved by rule" });
      await expect(step).toHaveCount(1);
      await expect(step).toContainText(`to is “${to}”`);
      await expect(step).toContainText("added by operator");

      // The rules page lists it and removes it.
      await page.goto("/rules");
      const rule = page.getByTestId("rule").filter({ hasText: to });
      await expect(rule).toHaveCount(1);
      await rule.getByRole("button", { name: /^Remove rule/ }).click();
      await expect(page).toHaveURL(/\/rules$/);
      await expect(page.getByTestId("rule").filter({ hasText: to })).toHaveCount(0);

      // Without the rule, the same call waits again.
      await startRun(page, `Send a message to ${to} saying third`);
      await waitFor(page, "approval-panel", reload);
    });

    test("a run asks the operator: choices as buttons, a schema as fields", async ({ page }) => {
      acceptDialogs(page);
      await startRun(page, "Publish a page — ask me which one");
      await waitFor(page, "question-panel", reload);
      await expect(page.getByTestId("question")).toHaveText("Which page should I publish?");
      const choice = page.getByTestId("choice").first();
      const slug = (await choice.textContent())!.trim();
      await choice.click();
      // The answer reaches the model, which asks to publish that page; this test leaves the
      // site as it was.
      await waitFor(page, "approval-panel", reload);
      await expect(page.getByTestId("pending-call")).toHaveAttribute("data-tool", "publish_page");
      await expect(page.getByTestId("call-arguments")).toContainText(slug);
      await page.getByRole("button", { name: "Deny all (d)" }).click();
      await waitFor(page, "final-answer", reload);

      await startRun(page, "Create a page — ask me for its details");
      await waitFor(page, "question-panel", reload);
      const slugField = page.getByTestId("question-field").filter({ has: page.locator("input[name='fields[slug]']") });
      await slugField.locator("input").fill("Not A Slug");
      await page.getByTestId("question-field").filter({ has: page.locator("input[name='fields[title]']") }).locator("input").fill(`Asked ${mode}`);
      await page.getByTestId("answer-submit").click();
      // Refused, naming the field; the question still waits.
      await expect(page.getByTestId("error-banner")).toContainText("slug");
      await expect(page.getByTestId("question-panel")).toBeVisible();
      await slugField.locator("input").fill(`asked-${mode}`);
      await page.getByTestId("question-field").filter({ has: page.locator("input[name='fields[title]']") }).locator("input").fill(`Asked ${mode}`);
      await page.getByTestId("answer-submit").click();
      await waitFor(page, "approval-panel", reload);
      await expect(page.getByTestId("call-arguments")).toContainText(`asked-${mode}`);
    });

    test("a question beside a call that needs approval is answered in the same decision", async ({ page }) => {
      acceptDialogs(page);
      // A page nobody else touches (it does not exist: the rename is denied anyway).
      await startRun(page, `Rename the asking-${mode} page to "Asked" and ask me how to announce it`);
      // One turn: it waits for approval, and its question is part of the decision.
      await waitFor(page, "approval-panel", reload);
      await expect(page.getByTestId("question-panel")).toHaveCount(0);
      const question = page.locator('[data-testid="pending-call"][data-tool="ask_operator"]');
      await expect(question.getByTestId("question")).toContainText("How should I announce");
      await question.getByTestId("question-choice").selectOption("loudly");
      const rename = page.locator('[data-testid="pending-call"][data-tool="update_page"]');
      await rename.getByLabel("Deny").check();
      await page.getByRole("button", { name: "Apply the choices above" }).click();
      await waitFor(page, "final-answer", reload);
      await expect(page.getByTestId("final-answer")).toContainText("announce it loudly");
      await expect(page.getByTestId("final-answer")).not.toContainText("Updated page");
    });

    test("forking a run at its waiting step and deciding it differently", async ({ page }) => {
      acceptDialogs(page);
      const to = `fork-${mode}@example.com`;
      await startRun(page, `Send a message to ${to} saying hello`);
      await waitFor(page, "approval-panel", reload);
      await page.getByRole("button", { name: "Approve all (a)" }).click();
      await waitFor(page, "final-answer", reload);
      await expect(page.getByTestId("final-answer")).toContainText("queued in the outbox");
      const parent = page.url();

      // Select the step where the run waited, and fork from it.
      await page.getByTestId("step").filter({ hasText: "approval requested" }).getByRole("link").first().click();
      await expect(page.getByTestId("detail-title")).toContainText("approval requested");
      await page.getByTestId("fork").locator("summary").click();
      await page.getByTestId("fork-submit").click();
      await page.waitForURL((url) => url.toString() !== parent && /\/runs\/[0-9a-f-]{36}$/.test(url.toString()));
      await waitFor(page, "approval-panel", reload);
      await expect(page.getByTestId("parent")).toContainText("forked at step");
      // The parent ran the call after that step: the fork shows it may have taken effect.
      await expect(page.getByTestId("outcome-unknown")).toBeVisible();
      await page.getByRole("button", { name: "Deny all (d)" }).click();
      await waitFor(page, "final-answer", reload);
      await expect(page.getByTestId("final-answer")).toContainText("I did not run `send_message`");

      // The parent lists its fork.
      await page.goto(parent);
      await expect(page.getByTestId("child")).toHaveCount(1);
    });
  });
}
