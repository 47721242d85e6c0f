import { test, expect } from "../fixtures";
import { runView } from "../helpers";

// The run list answers questions: who started a run, what it cost, how it ended; words of the
// prompt or the answer find it; the filtered list downloads as CSV and JSON, formulas defused.

test("the run list filters, searches and downloads what it shows", async ({ page, request }) => {
  const tag = `listed${test.info().retry}x${Date.now() % 1_000_000}`;
  const prompts = [`What time is it? ${tag}`, `=HYPERLINK("http://example.com") What time is it? ${tag}`];
  const ids: string[] = [];
  for (const prompt of prompts) {
    const started = await request.post("/api/nrllm_tool_run", { data: { prompt } });
    expect(started.status()).toBe(200);
    ids.push(await started.json());
  }
  for (const id of ids) {
    await expect.poll(async () => (await runView(request, id)).summary.status, { timeout: 15_000 }).toBe("completed");
  }
  // Found by a word of the prompt (and its beginning, in any case) once indexed.
  const rows = page.getByTestId("run-row");
  await expect(async () => {
    await page.goto(`/runs?q=${tag.slice(0, -2).toUpperCase()}`);
    await expect(rows).toHaveCount(2, { timeout: 500 });
  }).toPass({ timeout: 15_000 });
  await expect(rows.first().getByTestId("run-configuration")).toHaveText("demo");
  await expect(rows.first().getByTestId("run-requester")).toHaveText("operator");
  await expect(rows.first().getByTestId("run-duration")).not.toBeEmpty();
  await expect(rows.first().getByTestId("run-reason")).toHaveText("completed");

  // The form's filters: a status, a requester, a range of days.
  await page.getByLabel("Status").selectOption("completed");
  await page.getByLabel("Started by").fill("operator");
  await page.getByRole("button", { name: "Filter" }).click();
  await expect(page).toHaveURL(/status=completed/);
  await expect(rows).toHaveCount(2);
  await page.goto(`/runs?q=${tag}&requester=somebody-else`);
  await expect(page.getByTestId("no-runs")).toBeVisible();
  const tomorrow = new Date(Date.now() + 86_400_000).toISOString().slice(0, 10);
  await page.goto(`/runs?q=${tag}&from=${tomorrow}`);
  await expect(page.getByTestId("no-runs")).toBeVisible();
  await page.goto(`/runs?q=${tag}&to=${tomorrow}`);
  await expect(rows).toHaveCount(2);
  await page.goto(`/runs?q=${tag}&from=yesterday`);
  await expect(page.getByTestId("error-banner")).toContainText("from");

  // Downloads, with the same filters.
  await page.goto(`/runs?q=${tag}`);
  const csvHref = await page.getByTestId("export-csv").getAttribute("href");
  expect(csvHref).toBe(`/runs/export.csv?q=${tag}`);
  const csv = await request.get(csvHref!);
  expect(csv.status()).toBe(200);
  expect(csv.headers()["content-type"]).toContain("text/csv");
  const lines = (await csv.text()).trim().split("\n");
  expect(lines[0]).toContain("id,created_at,status");
  expect(lines).toHaveLength(3);
  // A prompt a spreadsheet would compute is written as text.
  expect(lines.some((line) => line.includes(`"'=HYPERLINK(""http://example.com"") What time`))).toBe(true);
  const json = await request.get(`/runs/export.json?q=${tag}`);
  const listed = await json.json();
  expect(listed.map((run: { id: string }) => run.id).sort()).toEqual([...ids].sort());
  const none = await (await request.get(`/runs/export.json?q=${tag}&requester=nobody`)).json();
  expect(none).toEqual([]);
  expect((await request.get(`/runs/export.csv?from=soon`)).status()).toBe(400);
});
