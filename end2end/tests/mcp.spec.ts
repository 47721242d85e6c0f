import { test, expect, csrfOf } from "../fixtures";
import { runView, startRun, startWaiting, waitFor } from "../helpers";

// Tools of MCP servers (the demo's notebook server, started by the playground over stdio; see
// end2end/nrllm-e2e.toml): a destructive call waits with the server's dry run as its diff, is
// approved from the run page and runs once; a call the policy holds shows its arguments against
// the tool's schema. Everything the server says is text on the page.

test("the system page shows each MCP server's state and tools", async ({ page }) => {
  await page.goto("/system");
  const notes = page.locator('[data-testid="system-mcp-server"][data-name="notes"]');
  await expect(notes).toHaveAttribute("data-state", "connected");
  await expect(notes.getByTestId("system-mcp-state")).toHaveText("connected");
  await expect(notes).toContainText("nrllm-notes");
  const tools = notes.getByTestId("system-mcp-tool");
  await expect(tools.filter({ hasText: "notes__read_note" })).toContainText("no approval");
  await expect(tools.filter({ hasText: "notes__write_note" })).toContainText(
    "waits for approval; re-run after a crash",
  );
  const audited = page.locator('[data-testid="system-mcp-server"][data-name="audited"]');
  await expect(audited.getByTestId("system-mcp-tool")).toHaveCount(1);
  await expect(audited.getByTestId("system-mcp-tool")).toContainText("audited__read_note — waits for approval");
  // An administrator (the suite's operator is one) reconnects a server: its tools are listed
  // again on a new connection.
  await expect(notes).toContainText("connected 1 time(s)");
  await notes.getByTestId("mcp-reconnect").click();
  await page.waitForURL(/\/system$/);
  for (let i = 0; i < 40 && !(await notes.textContent())?.includes("connected 2 time(s)"); i++) {
    await page.waitForTimeout(250);
    await page.reload();
  }
  await expect(notes).toContainText("connected 2 time(s)");
  await expect(notes).toHaveAttribute("data-state", "connected");
});

test("a viewer sees the MCP servers but no reconnect button", async ({ browser, request }) => {
  const csrf = csrfOf();
  const made = await request.post("/api/nrllm_user_create", {
    data: { name: "mcp-viewer", password: "mcp-viewer-password-1", role: "viewer" },
    headers: { "x-csrf-token": csrf },
  });
  expect([200, 409]).toContain(made.status());
  const context = await browser.newContext({ storageState: { cookies: [], origins: [] } });
  const page = await context.newPage();
  await page.goto("/login");
  await page.getByLabel("Name").fill("mcp-viewer");
  await page.getByLabel("Password").fill("mcp-viewer-password-1");
  await page.getByTestId("log-in").click();
  await page.waitForURL((url) => !url.pathname.startsWith("/login"));
  await page.goto("/system");
  await expect(page.locator('[data-testid="system-mcp-server"][data-name="notes"]')).toBeVisible();
  await expect(page.getByTestId("mcp-reconnect")).toHaveCount(0);
  await context.close();
});

for (const javaScript of [true, false]) {
  const mode = javaScript ? "js" : "nojs";
  const reload = !javaScript;

  test.describe(`MCP calls, JavaScript ${javaScript ? "on" : "off"}`, () => {
    test.use({ javaScriptEnabled: javaScript });

    test("a destructive MCP call waits, shows the server's dry run, is approved and runs once", async ({
      page,
    }) => {
      const note = `mcp-${mode}-${Date.now() % 100000}`;
      await startRun(page, `Write the note ${note} saying "Hello <b>world</b>"`);
      await waitFor(page, "approval-panel", reload);
      const call = page.getByTestId("pending-call");
      await expect(call).toContainText("notes__write_note");
      const preview = call.getByTestId("preview");
      await expect(preview).toContainText(`Effect on note ${note}`);
      await expect(preview).toContainText("+ Hello <b>world</b>");
      await expect(page.locator("b", { hasText: "world" })).toHaveCount(0);
      await page.getByRole("button", { name: "Approve all (a)" }).click();
      await waitFor(page, "final-answer", reload);
      await expect(page.getByTestId("final-answer")).toContainText(`Wrote note ${note} (18 characters).`);

      // Reading it back goes through the audited server, whose policy holds even reads: no
      // dry run there, so the panel shows the arguments against the tool's schema.
      await startRun(page, `Read the note ${note}`);
      await waitFor(page, "approval-panel", reload);
      const fields = page.getByTestId("schema-preview").getByTestId("argument-field");
      await expect(fields).toHaveCount(1);
      await expect(fields).toContainText(`"${note}"`);
      await expect(fields).toContainText("The note's name");
      await page.getByRole("button", { name: "Approve all (a)" }).click();
      await waitFor(page, "final-answer", reload);
      await expect(page.getByTestId("final-answer")).toContainText("Hello <b>world</b>");
    });

    test("a server's question is answered from the run page and declined from the inbox", async ({
      page,
      request,
    }) => {
      // The notes server asks for a new note's name once the write is approved (MCP
      // 2026-07-28's "input required"); the run waits for input with the server named.
      const tag = `named${mode}${Date.now() % 100000}`;
      await startRun(page, `Write a note saying ${tag} <i>from the page</i>`);
      await waitFor(page, "approval-panel", reload);
      await page.getByRole("button", { name: "Approve all (a)" }).click();
      await waitFor(page, "question-panel", reload);
      const panel = page.getByTestId("question-panel");
      await expect(panel.locator("[data-panel-heading]")).toHaveText(
        "The MCP server notes asks you, during notes__write_note",
      );
      await expect(page.getByTestId("question")).toHaveText("What should the new note be called?");
      const name = panel.locator("input[name='fields[name]']");
      // A name the server refuses: it asks again, saying why (its words are text).
      await name.fill("Not A Name");
      await page.getByTestId("answer-submit").click();
      await expect(async () => {
        if (reload) await page.reload();
        await expect(page.getByTestId("question")).toContainText("Not A Name", { timeout: 500 });
      }).toPass({ timeout: 15_000 });
      await panel.locator("input[name='fields[name]']").fill(tag);
      await page.getByTestId("answer-submit").click();
      await waitFor(page, "final-answer", reload);
      await expect(page.getByTestId("final-answer")).toContainText(`Wrote note ${tag}`);
      // Two replies went to the server: the name it refused, then the one it took.
      await expect(page.getByTestId("step").filter({ hasText: "question accepted" })).toHaveCount(2);
      await expect(page.locator("i", { hasText: "from the page" })).toHaveCount(0);

      // Another, declined from the inbox: nothing is written.
      const other = `declined${mode}${Date.now() % 100000}`;
      const { runId, view } = await startWaiting(request, `Write a note saying ${other}`);
      const approved = await request.post("/api/nrllm_tool_resume", {
        data: { run_id: runId, decision: "approve_all", digest: view.digest },
      });
      expect(approved.status()).toBe(200);
      await expect
        .poll(async () => (await runView(request, runId)).summary.status, { timeout: 15_000 })
        .toBe("waiting_for_input");
      await page.goto(`/approvals?q=${other}`);
      const item = page.getByTestId("inbox-item");
      await expect(async () => {
        await page.reload();
        await expect(item).toHaveCount(1, { timeout: 500 });
      }).toPass({ timeout: 15_000 });
      await item.getByTestId("inbox-prompt").click();
      await expect(item.getByTestId("question")).toHaveText("What should the new note be called?");
      await item.getByTestId("answer-decline").click();
      await page.waitForURL(/\/approvals/);
      await expect
        .poll(async () => (await runView(request, runId)).summary.status, { timeout: 15_000 })
        .toBe("completed");
      const done = await runView(request, runId);
      expect(done.summary.final_answer).toContain("the operator declined to name it");
    });
  });
}

test("a server's progress shows on the run page while its call runs", async ({ page }) => {
  // The notes server's count_words reports five steps of progress (about 1.5 s in all).
  await startRun(page, "Count the words in my notes");
  const progress = page.getByTestId("tool-progress");
  await expect(progress).toContainText(/notes__count_words: \d of 5 — counted \d of 5 parts/, { timeout: 15_000 });
  await waitFor(page, "final-answer", false);
  await expect(page.getByTestId("final-answer")).toContainText("words in");
  // Its step landed: the progress line is gone, and nothing of it was journaled.
  await expect(progress).toHaveCount(0);
  await expect(page.getByTestId("step").filter({ hasText: "counted" })).toHaveCount(0);
});
