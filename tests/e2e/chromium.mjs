// chromium.mjs - the browser of the console tests: Debian's chromium driven
// by playwright-core (no downloaded browser), headless, in a new empty
// profile (--user-data-dir, which playwright sets from it). close() ends the
// browser and removes the profile.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export async function launch(options = {}) {
  const profile = mkdtempSync(join(tmpdir(), 'sbx-chromium-'));
  const browser = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    ...options,
  });
  const close = async () => {
    await browser.close();
    rmSync(profile, { recursive: true, force: true });
  };
  return { browser, close };
}
