import { test, expect } from "../fixtures";
import { startRun, waitFor } from "../helpers";

// The demo model writes each response word by word over its think time (700 ms in this suite),
// as a real model streams: the run page shows it being written before its step lands.

test("the model's response is seen as it is written, and its step is what was written", async ({ page }) => {
  await startRun(page, "List the pages");
  // The calls of the first round, or the answer of the last, while they are being written.
  const text = page.getByTestId("forming-text");
  await expect(text).toBeVisible({ timeout: 15_000 });
  const seen = (await text.textContent()) ?? "";
  expect(seen.length).toBeGreaterThan(0);
  // No step of that response yet: its step lands when the whole response is there.
  await waitFor(page, "final-answer", false);
  const answer = (await page.getByTestId("final-answer").textContent()) ?? "";
  expect(answer.trim().startsWith(seen.trim())).toBe(true);
  // The step replaced what was shown of it being written.
  await expect(page.getByTestId("forming")).toHaveCount(0);
});

test("a call shows its arguments forming, marked as not complete", async ({ page }) => {
  await startRun(page, "Rename the home page to \"Streaming\"");
  const call = page.getByTestId("forming-call").first();
  await expect(call).toBeVisible({ timeout: 15_000 });
  await expect(call).toContainText("update_page");
  await expect(call).toContainText("still being written");
  // Then the approval panel, with the call whole.
  await waitFor(page, "approval-panel", false);
  await expect(page.getByTestId("forming")).toHaveCount(0);
});
