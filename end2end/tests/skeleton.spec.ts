import { test, expect, Page } from "@playwright/test";

async function pingCount(page: Page): Promise<number> {
  return Number(await page.getByTestId("ping-count").textContent());
}

test.describe("with JavaScript", () => {
  test("the page renders on the server with its title", async ({ page }) => {
    await page.goto("/");
    await expect(page).toHaveTitle("nrllm playground");
    await expect(page.getByRole("heading", { level: 1 })).toHaveText("Playground");
  });

  test("the page hydrates: the counter counts only once the wasm runs", async ({ page }) => {
    await page.goto("/system");
    await expect(page.getByTestId("hydration-state")).toHaveText("interactive");
    const counter = page.getByTestId("click-counter");
    await expect(counter).toHaveText("Clicks: 0");
    await counter.click();
    await counter.click();
    await expect(counter).toHaveText("Clicks: 2");
  });

  test("the ping server function writes to the database and reads back", async ({ page }) => {
    await page.goto("/system");
    await expect(page.getByTestId("hydration-state")).toHaveText("interactive");
    const before = await pingCount(page);
    const response = page.waitForResponse((r) => r.url().endsWith("/api/nrllm_ping"));
    await page.getByRole("button", { name: "Ping the database" }).click();
    expect((await response).status()).toBe(200);
    await expect(page.getByTestId("ping-count")).toHaveText(String(before + 1));
    // The write is durable: a fresh page load reads it from the database.
    await page.reload();
    await expect(page.getByTestId("ping-count")).toHaveText(String(before + 1));
  });

  test("the compiled Tailwind classes are served", async ({ page }) => {
    await page.goto("/system");
    const css = await (await page.request.get("/pkg/nrllm-playground.css")).text();
    expect(css).toContain(".bg-indigo-600");
    const background = await page
      .getByRole("button", { name: "Ping the database" })
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

  test("the page renders and the form post round-trips with a redirect back", async ({ page }) => {
    await page.goto("/system");
    await expect(page.getByRole("heading", { level: 1 })).toHaveText("System");
    await expect(page.getByTestId("hydration-state")).toHaveText("server-rendered");
    const before = await pingCount(page);
    await page.getByRole("button", { name: "Ping the database" }).click();
    // The server answers the plain form post with a redirect back to the page.
    await expect(page.getByTestId("ping-count")).toHaveText(String(before + 1));
    expect(new URL(page.url()).pathname).toBe("/system");
  });
});
