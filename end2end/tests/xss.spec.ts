import { Page } from "@playwright/test";
import { test, expect } from "../fixtures";
import { ALL_PAYLOADS, PAYLOADS } from "../hostile-provider";
import { startRun, waitFor } from "../helpers";

// Text from a run — the model's answers and arguments, tool results and errors, the operator's
// prompt, system prompt, skills, reasons and edits, the provider's errors — is hostile. Every
// page that shows it must show it as text: no dialog, no element made by a payload.

/** Counts the dialogs a page opens. */
function countDialogs(page: Page): { count: number } {
  const dialogs = { count: 0 };
  page.on("dialog", async (dialog) => {
    dialogs.count++;
    await dialog.dismiss();
  });
  return dialogs;
}

/** No dialog opened, and nothing in the document was made by a payload. */
async function expectInert(page: Page, dialogs: { count: number }) {
  expect(dialogs.count).toBe(0);
  await expect(page.locator('img[src="x"]')).toHaveCount(0);
  await expect(page.locator("svg[onload]")).toHaveCount(0);
  await expect(page.locator('a[href^="javascript:"]')).toHaveCount(0);
  const injected = await page
    .locator("script")
    .evaluateAll((scripts) => scripts.filter((s) => s.textContent?.trim() === "alert(1)").length);
  expect(injected).toBe(0);
  expect(await page.evaluate(() => document.querySelectorAll("[onerror],[onload]").length)).toBe(0);
}

for (const javaScript of [true, false]) {
  const mode = javaScript ? "js" : "nojs";

  test.describe(`hostile text, JavaScript ${javaScript ? "on" : "off"}`, () => {
    test.use({ javaScriptEnabled: javaScript });

    test("a hostile model and hostile operator text are shown as text on every page", async ({ page }) => {
      const dialogs = countDialogs(page);
      const slug = `xss-${mode}`;
      const prompt = `hostile call ${slug} ${ALL_PAYLOADS}`;
      const runUrl = await startRun(page, prompt, {
        configuration: "hostile",
        systemPrompt: `system ${ALL_PAYLOADS}`,
        skills: `payload-skill\nskill ${ALL_PAYLOADS}`,
      });
      await waitFor(page, "approval-panel", !javaScript);
      await expectInert(page, dialogs);

      // The prompt: in the heading and in the document title, literally.
      await expect(page.getByTestId("run-prompt")).toHaveText(prompt);
      expect(await page.title()).toContain(`Run: hostile call ${slug} </textarea>`);
      // The model's arguments: shown, in the edit box (a <textarea>) and in the preview.
      const create = page.locator('[data-testid="pending-call"][data-tool="create_page"]');
      await expect(create.getByTestId("call-arguments")).toContainText(PAYLOADS[0]);
      const edit = create.getByLabel(/^Arguments it runs with/);
      const arguments_ = JSON.parse(await edit.inputValue());
      expect(arguments_).toEqual({ slug, title: ALL_PAYLOADS, body: ALL_PAYLOADS });
      await expect(create.getByTestId("preview")).toContainText(`+ title: ${ALL_PAYLOADS}`);

      // The inbox and the history show the prompt as text.
      await page.goto("/approvals");
      const item = page.getByTestId("inbox-item").filter({ hasText: `hostile call ${slug}` });
      await expect(item.getByTestId("inbox-prompt")).toHaveText(prompt);
      // The calls' arguments on one line, and the panel opened in place: text too.
      await expect(item.getByTestId("inbox-summary").first()).toContainText("<");
      await item.getByTestId("inbox-prompt").click();
      await expect(item.getByTestId("approval-panel")).toBeVisible();
      await expectInert(page, dialogs);
      await page.goto("/runs");
      await expect(page.getByTestId("run-row").filter({ hasText: `hostile call ${slug}` }).getByRole("link")).toHaveText(prompt);
      await expectInert(page, dialogs);

      // Decide with hostile text of our own: an edit, and a reason.
      await page.goto(runUrl);
      await waitFor(page, "approval-panel", !javaScript);
      const createAgain = page.locator('[data-testid="pending-call"][data-tool="create_page"]');
      const editedTitle = `edited ${PAYLOADS[0]}`;
      await createAgain
        .getByLabel(/^Arguments it runs with/)
        .fill(JSON.stringify({ slug, title: editedTitle, body: ALL_PAYLOADS }));
      // get_page runs and fails, quoting its bad slug; list_pages is denied with a reason.
      const list = page.locator('[data-testid="pending-call"][data-tool="list_pages"]');
      await list.getByLabel("Deny", { exact: true }).check();
      await list.getByLabel(/^Reason if denied/).fill(`reason ${ALL_PAYLOADS}`);
      await page.getByRole("button", { name: "Apply the choices above" }).click();

      await waitFor(page, "final-answer", !javaScript);
      await expectInert(page, dialogs);
      const answer = page.getByTestId("final-answer");
      await expect(answer).toContainText(`Done: ${ALL_PAYLOADS}`);
      await expect(answer).toContainText(`Created draft page \`${slug}\` titled "${editedTitle}".`);
      await expect(answer).toContainText(`denied by the operator: reason ${ALL_PAYLOADS}`);
      await expect(answer).toContainText(`Error: invalid arguments: slug: "${PAYLOADS[0]}"`);
      // The step detail shows the system prompt and the skill as sent, and the provider's raw
      // answer, as text (JSON strings there escape the payloads' quotes).
      await page.getByTestId("step").filter({ hasText: "request:" }).first().getByRole("link").click();
      const detail = page.getByTestId("detail-text");
      await expect(detail).toContainText(`system ${PAYLOADS[0]} ${PAYLOADS[1]}`);
      await expect(detail).toContainText(`skill ${PAYLOADS[0]} ${PAYLOADS[1]}`);
      await expectInert(page, dialogs);
      await page.getByTestId("step").filter({ hasText: "model requests tools" }).first().getByRole("link").click();
      await page.getByTestId("step-detail").getByRole("link", { name: "Raw" }).click();
      await expect(detail).toContainText("chatcmpl-hostile");
      await expect(detail).toContainText(PAYLOADS[3]);
      await expectInert(page, dialogs);
    });

    test("the demo model's arguments and a deny reason are shown as text", async ({ page }) => {
      const dialogs = countDialogs(page);
      // The report's own example: the title closes the edit box if it is written raw.
      const title = `${mode} ${ALL_PAYLOADS}`;
      await startRun(page, `Rename the pricing page to ${title}`);
      await waitFor(page, "approval-panel", !javaScript);
      await expectInert(page, dialogs);
      const call = page.getByTestId("pending-call");
      expect(JSON.parse(await call.getByLabel(/^Arguments it runs with/).inputValue())).toEqual({ slug: "pricing", title });
      await page.getByLabel(/^Reason for every denied call/).fill(`no ${ALL_PAYLOADS}`);
      await page.getByRole("button", { name: "Deny all (d)" }).click();
      await waitFor(page, "final-answer", !javaScript);
      await expectInert(page, dialogs);
      await expect(page.getByTestId("final-answer")).toContainText(`no ${ALL_PAYLOADS}`);
    });

    test("a provider's error message and JSON API input are shown as text", async ({ page, request }) => {
      const dialogs = countDialogs(page);
      const started = await request.post("/api/nrllm_tool_run", {
        data: {
          prompt: `hostile error ${mode} ${ALL_PAYLOADS}`,
          configuration: "hostile",
          system_prompt: ALL_PAYLOADS,
          skills: `api-skill\n${ALL_PAYLOADS}`,
        },
      });
      expect(started.status()).toBe(200);
      const runId: string = await started.json();
      await page.goto(`/runs/${runId}`);
      await waitFor(page, "run-error", !javaScript);
      await expectInert(page, dialogs);
      await expect(page.getByTestId("run-error")).toContainText(`bad request: ${ALL_PAYLOADS}`);
      await expect(page.getByTestId("run-prompt")).toHaveText(`hostile error ${mode} ${ALL_PAYLOADS}`);
    });
  });
}

test("a hostile model's words show as text while it writes them, and cancelling drops its connection", async ({ page, request }) => {
  const closedEarly = async () =>
    ((await (await request.get("http://127.0.0.1:3011/stats")).json()) as { streams_closed_early: number })
      .streams_closed_early;
  const before = await closedEarly();
  const dialogs = countDialogs(page);
  // The hostile model streams its answer cut through the payloads' markup, and stops writing
  // halfway with the connection open.
  await startRun(page, `hostile hang ${ALL_PAYLOADS}`, { configuration: "hostile" });
  const forming = page.getByTestId("forming-text");
  await expect(forming).toContainText(PAYLOADS[0], { timeout: 15_000 });
  await expectInert(page, dialogs);
  // The run waits on the model: cancelling it drops the model's connection at once.
  await page.getByTestId("cancel").click();
  await expect.poll(closedEarly, { timeout: 5_000 }).toBeGreaterThan(before);
  await expect(async () => {
    await page.reload();
    await expect(page.getByTestId("status").first()).toHaveText(/cancelled/i, { timeout: 500 });
  }).toPass({ timeout: 10_000 });
  await expectInert(page, dialogs);
});
