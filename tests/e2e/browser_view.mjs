// browser_view.mjs - watching a sandbox's browser (adr/0065), for
// tests/integration/test_browser_view.py. Two browsers: the sandbox's own
// Chromium, driven over CDP through the api (SBX_CDP_URL, a ports-route
// WebSocket; SBX_CDP_AUTH its Authorization header or ""), and Debian's
// chromium on the host showing /console's live view of it.
// Commands come on stdin, one per line; each answers one "RESULT {json}":
//   goto URL        the sandbox's page loads URL; answers its viewport
//   color CSS       the sandbox's page background becomes CSS
//   console         the host opens /console, uses SBX_KEY, picks SBX_NPC,
//                   clicks "Watch browser", waits for a drawn frame
//   view-changes    waits until the canvas's pixels differ from the last
//                   "console" or "view-changes" answer
//   view-ended      waits until the console says the view ended
//   quit
import { chromium } from 'playwright-core';
import { createInterface } from 'node:readline';
import { launch } from './chromium.mjs';

const cdpUrl = process.env.SBX_CDP_URL;
const cdpAuth = process.env.SBX_CDP_AUTH || '';
const consoleUrl = process.env.SBX_CONSOLE_URL;
const key = process.env.SBX_KEY;
const npc = process.env.SBX_NPC;
const stepMs = Number(process.env.SBX_STEP_MS || 45000);

const out = (o) => console.log('RESULT ' + JSON.stringify(o));
let remote = null, rpage = null, host = null, hpage = null, lastSum = null;
const logs = [];

async function until(what, fn) {
  const t0 = Date.now();
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() - t0 > stepMs) throw new Error('timed out waiting for ' + what);
    await new Promise((r) => setTimeout(r, 100));
  }
}

// Polled with evaluate: waitForFunction needs eval, which the console's
// CSP forbids.
const view = () => hpage.evaluate(() => window.sbxConsole.view());

const commands = {
  async goto(url) {
    if (!remote) {
      remote = await chromium.connectOverCDP(cdpUrl,
        cdpAuth ? { headers: { Authorization: cdpAuth } } : {});
      const ctx = remote.contexts()[0];
      rpage = ctx.pages()[0] || await ctx.newPage();
    }
    await rpage.goto(url);
    return await rpage.evaluate(() => ({ title: document.title,
      w: Math.round(innerWidth * devicePixelRatio), h: Math.round(innerHeight * devicePixelRatio) }));
  },
  async color(css) {
    await rpage.evaluate((c) => { document.body.style.background = c; }, css);
    return { ok: true };
  },
  async console() {
    const l = await launch({ viewport: { width: 1400, height: 1100 } });
    host = l;
    hpage = await l.browser.newPage();
    hpage.on('console', (m) => logs.push(m.type() + ': ' + m.text()));
    hpage.on('pageerror', (e) => logs.push('pageerror: ' + e.message));
    const resp = await hpage.goto(consoleUrl + '/console');
    await hpage.fill('#key', key);
    await hpage.click('#keyform button');
    await until('the NPC list', () => hpage.evaluate((n) =>
      [...document.querySelectorAll('#npc option')].some((o) => o.value === n), npc));
    await hpage.selectOption('#npc', npc);
    await hpage.click('#bviewopen');
    const v = await until('a drawn frame', async () => {
      const x = await view();
      return x.drawn > 0 && x.sum > 0 ? x : null;
    });
    lastSum = v.sum;
    return Object.assign({ console: logs }, v, { http: resp.status() });
  },
  async 'view-changes'() {
    const before = lastSum;
    const v = await until('the view to change', async () => {
      const x = await view();
      return x.sum !== before ? x : null;
    });
    lastSum = v.sum;
    return Object.assign({ before, console: logs }, v);
  },
  async 'view-ended'() {
    return Object.assign({ console: logs }, await until('the view to end', async () => {
      const x = await view();
      return x.state === 'ended' ? x : null;
    }));
  },
};

const rl = createInterface({ input: process.stdin });
for await (const line of rl) {
  const sp = line.indexOf(' ');
  const cmd = sp < 0 ? line : line.slice(0, sp), arg = sp < 0 ? '' : line.slice(sp + 1);
  if (cmd === 'quit') break;
  try {
    if (!commands[cmd]) throw new Error('unknown command ' + cmd);
    out(await commands[cmd](arg));
  } catch (e) {
    let v = null;
    try { if (hpage) v = await view(); } catch (e2) { /* the page is gone */ }
    out({ error: String(e && e.stack || e), view: v, console: logs });
  }
}
if (remote) await remote.close().catch(() => {});
if (host) await host.close().catch(() => {});
process.exit(0);
