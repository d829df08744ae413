// Times the admin page of a running `dlock serve` in Debian's headless Chromium: from the
// start of navigation to the first row of the lock list on screen, ROUNDS times in a fresh
// browser profile each (cold: no cache) and ROUNDS times reloading (warm). JSON on stdout.
//
//   node tests/browser/first_row_bench.mjs http://127.0.0.1:PORT     (run by bench/admin_page.sh)
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const base = process.argv[2];
const rounds = Number(process.env.ROUNDS || 5);
const args = ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'];

async function firstRow(page, navigate) {
  const start = Date.now();
  await navigate();
  await page.locator('#locks tbody tr').first().waitFor({ state: 'visible', timeout: 30_000 });
  return Date.now() - start;
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

const cold = [];
const warm = [];
for (let i = 0; i < rounds; ++i) {
  const profile = mkdtempSync(join(tmpdir(), 'dlock-bench-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium', headless: true, args, viewport: { width: 1280, height: 900 },
  });
  const page = context.pages()[0] ?? (await context.newPage());
  cold.push(await firstRow(page, () => page.goto(`${base}/`, { waitUntil: 'commit' })));
  warm.push(await firstRow(page, () => page.reload({ waitUntil: 'commit' })));
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log(JSON.stringify({ what: 'admin page: navigation start to first lock row', rounds,
  cold_ms: cold, warm_ms: warm, cold_median_ms: median(cold), warm_median_ms: median(warm) }));
