// console.mjs - drives Debian's chromium (playwright-core, no downloaded
// browser) through /console: key, NPC, command, live lines. Reads its
// parameters from the environment; prints "LINES n" as lines arrive and one
// final "RESULT {json}" line. The Python test (tests/integration/test_console.py)
// cuts the page's connection while it runs.
import { launch } from './chromium.mjs';

const url = process.env.SBX_CONSOLE_URL;
const key = process.env.SBX_KEY;
const npc = process.env.SBX_NPC;
const cmd = process.env.SBX_CMD;
const timeoutMs = Number(process.env.SBX_TIMEOUT_MS || 120000);

const { browser, close } = await launch();
const result = { console: [], requests: [] };
try {
  const page = await browser.newPage();
  page.on('console', (m) => result.console.push(m.type() + ': ' + m.text()));
  page.on('pageerror', (e) => result.console.push('pageerror: ' + e.message));
  page.on('request', (r) => result.requests.push(r.method() + ' ' + r.url().replace(/ticket=[^&]*/, 'ticket=T')));
  const resp = await page.goto(url + '/console');
  result.status = resp.status();
  result.csp = resp.headers()['content-security-policy'] || '';
  await page.fill('#key', key);
  await page.click('#keyform button');
  // Poll with evaluate (waitForFunction's polling needs eval, which the
  // page's CSP rightly forbids).
  for (let i = 0; ; i++) {
    const ok = await page.evaluate((n) => [...document.querySelectorAll('#npc option')].some((o) => o.value === n), npc);
    if (ok) break;
    if (i > 600) throw new Error('the NPC list never showed ' + npc);
    await page.waitForTimeout(50);
  }
  await page.selectOption('#npc', npc);
  await page.fill('#cmd', cmd);
  await page.click('#run');
  const t0 = Date.now();
  let seen = -1;
  for (;;) {
    const s = await page.evaluate(() => ({
      text: document.getElementById('out').textContent,
      exit: document.getElementById('exit').textContent,
      code: document.getElementById('exit').dataset.code,
    }));
    const n = s.text.split('\n').length - 1;
    if (n !== seen) {
      seen = n;
      console.log('LINES ' + n);
    }
    if (s.exit !== '') {
      Object.assign(result, s);
      break;
    }
    if (Date.now() - t0 > timeoutMs) {
      Object.assign(result, s, { timeout: true });
      break;
    }
    await page.waitForTimeout(50);
  }
  result.notes = await page.evaluate(() => document.getElementById('notes').textContent);
  result.storage = await page.evaluate(() => ({
    session: sessionStorage.getItem('sbx.key') !== null,
    local: localStorage.length,
    cookie: document.cookie,
  }));
} catch (e) {
  result.error = String(e && e.stack || e);
} finally {
  await close();
}
console.log('RESULT ' + JSON.stringify(result));
