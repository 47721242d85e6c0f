// Steps the specs share: start a run from the playground form, wait for a part of the run page.
import { expect, Page } from "@playwright/test";

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
