import { test, expect } from "../fixtures";
import { startRun } from "../helpers";

test.describe("with JavaScript", () => {
  test("the page renders on the server with its title", async ({ page }) => {
    await page.goto("/");
    await expect(page).toHaveTitle("nrllm playground");
    await expect(page.getByRole("heading", { level: 1 })).toHaveText("Playground");
  });

  test("the system page reports version, database, configurations and tools", async ({ page }) => {
    await page.goto("/system");
    await expect(page.getByTestId("system-version")).toContainText("nrllm playground 0.");
    await expect(page.getByTestId("system-database")).toContainText(/SQLite: answering, \d+ migrations applied/);
    const configurations = page.getByTestId("system-configuration");
    await expect(configurations.filter({ hasText: "demo (demo-1)" })).toContainText("available");
    await expect(configurations.filter({ hasText: "hostile (hostile-1)" })).toContainText("available");
    // 17 built-in tools, and the MCP servers' four: notes' read_note, write_note and
    // count_words, audited's read_note (end2end/nrllm-e2e.toml).
    await expect(page.getByTestId("system-tools")).toContainText(/Tools: \d+ of 21 enabled/);
  });

  test("every page loads without a console error, a favicon included", async ({ page, request, browser }) => {
    const icon = await request.get("/favicon.ico");
    expect(icon.status()).toBe(200);
    // (The fixture fails the test on any console error; each page also hydrates its islands.)
    const run = (await (await request.post("/api/nrllm_tool_run", {
      data: { prompt: "What time is it?" },
    })).json()) as string;
    for (const path of ["/", "/runs", `/runs/${run}`, "/approvals", "/rules", "/system", "/account", "/admin"]) {
      const response = await page.goto(path);
      expect(response?.status(), path).toBe(200);
      await page.waitForLoadState("networkidle");
    }
    const anonymous = await (await browser.newContext({ storageState: { cookies: [], origins: [] } })).newPage();
    expect((await anonymous.goto("/login"))?.status()).toBe(200);
    await anonymous.waitForLoadState("networkidle");
    await anonymous.context().close();
  });

  test("the compiled Tailwind classes are served", async ({ page }) => {
    await page.goto("/");
    const css = await (await page.request.get("/pkg/nrllm-playground.css")).text();
    expect(css).toContain(".bg-indigo-600");
    const background = await page
      .getByTestId("start-run")
      .evaluate((el) => getComputedStyle(el).backgroundColor);
    expect(background).not.toBe("rgba(0, 0, 0, 0)");
  });
});

test.describe("transfer", () => {
  test("the wasm bundle is sent gzipped to browsers that accept it, and plain to others", async ({
    request,
  }) => {
    const gzipped = await request.get("/pkg/nrllm-playground.wasm", {
      headers: { "accept-encoding": "gzip" },
    });
    expect(gzipped.status()).toBe(200);
    expect(gzipped.headers()["content-encoding"]).toBe("gzip");
    const plain = await request.get("/pkg/nrllm-playground.wasm", {
      headers: { "accept-encoding": "identity" },
    });
    expect(plain.headers()["content-encoding"]).toBeUndefined();
    // Either way the bytes that arrive are the same wasm module.
    const body = await gzipped.body();
    expect(body.subarray(0, 4)).toEqual(Buffer.from([0x00, 0x61, 0x73, 0x6d]));
    expect(body.length).toBe((await plain.body()).length);
  });
});

test.describe("without JavaScript", () => {
  test.use({ javaScriptEnabled: false });

  test("the system page renders completely on the server", async ({ page }) => {
    await page.goto("/system");
    await expect(page.getByRole("heading", { level: 1 })).toHaveText("System");
    await expect(page.getByTestId("system-database")).toContainText("answering");
  });
});

for (const javaScript of [true, false]) {
  test.describe(`example prompts, JavaScript ${javaScript ? "on" : "off"}`, () => {
    test.use({ javaScriptEnabled: javaScript });

    test("clicking an example prompt puts it in the prompt box", async ({ page }) => {
      await page.goto("/");
      const example = page.getByTestId("example-prompt").nth(1);
      const text = (await example.textContent()) ?? "";
      expect(text.length).toBeGreaterThan(0);
      await example.click();
      await page.waitForURL(/\/\?example=1$/);
      await expect(page.getByLabel("Prompt", { exact: true })).toHaveValue(text);
    });
  });
}

for (const javaScript of [true, false]) {
  test.describe(`times, JavaScript ${javaScript ? "on" : "off"}`, () => {
    test.use({ javaScriptEnabled: javaScript, timezoneId: "Asia/Tokyo" });

    test("a run's start shows in the browser's time zone and relative, UTC on hover", async ({ page }) => {
      await startRun(page, "List the pages");
      await page.goto("/runs");
      const time = page.getByTestId("run-row").first().locator("time");
      await expect(time).toHaveAttribute("title", /UTC$/);
      if (javaScript) {
        await expect(time).toHaveText(/\((just now|\d+ min ago)\)$/);
        await expect(time).not.toContainText("UTC");
      } else {
        await expect(time).toHaveText(/UTC$/);
      }
    });
  });
}
