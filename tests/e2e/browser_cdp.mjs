// browser_cdp.mjs - drives the Chromium that runs INSIDE a sandbox (issue 22,
// adr/0064) over CDP through the api's ports route: chromium.connectOverCDP
// of the endpoint POST .../sandbox/browser answered, then the steps of
// SBX_STEPS (a JSON list) on one new page of the browser's default context
// (its profile under /work). Prints one line "RESULT {json}": the result of
// each step in order, or {"error": ...} at the first that threw.
//
//   SBX_CDP_URL   the ws:// endpoint (with its ticket)
//   SBX_STEPS     [{"do": "goto", "url": U} -> {"status": N} | {"error": E},
//                  {"do": "title"}, {"do": "click", "sel": S},
//                  {"do": "text", "sel": S}, {"do": "eval", "js": EXPR},
//                  {"do": "shot", "path": FILE} -> {"bytes": N}]
//   SBX_DEADLINE_MS  RESULT with "stuck at STEP" after this long (180000)
import { chromium } from 'playwright-core';
import { writeFileSync } from 'node:fs';

const steps = JSON.parse(process.env.SBX_STEPS || '[]');
const out = { steps: [] };
let browser;
let at = 'connect';
// A step that never ends (a stalled connection) still gives a RESULT.
setTimeout(() => {
  out.error = 'stuck at ' + at;
  console.log('RESULT ' + JSON.stringify(out));
  process.exit(0);
}, Number(process.env.SBX_DEADLINE_MS || 180000)).unref();
try {
  browser = await chromium.connectOverCDP(process.env.SBX_CDP_URL, { timeout: 60000 });
  out.version = browser.version();
  const ctx = browser.contexts()[0];
  const page = await ctx.newPage();
  for (const s of steps) {
    at = JSON.stringify(s);
    console.error('STEP ' + at);
    if (s.do === 'goto') {
      try {
        const r = await page.goto(s.url, { timeout: 30000 });
        out.steps.push({ status: r ? r.status() : null, body: (await page.content()).slice(0, 2000) });
      } catch (e) {
        out.steps.push({ error: String(e.message).split('\n')[0] });
      }
    } else if (s.do === 'title') {
      out.steps.push({ title: await page.title() });
    } else if (s.do === 'click') {
      await page.click(s.sel, { timeout: 10000 });
      out.steps.push({ clicked: s.sel });
    } else if (s.do === 'text') {
      out.steps.push({ text: await page.textContent(s.sel, { timeout: 10000 }) });
    } else if (s.do === 'eval') {
      out.steps.push({ value: await page.evaluate(s.js) });
    } else if (s.do === 'shot') {
      const png = await page.screenshot({ timeout: 30000 });
      writeFileSync(s.path, png);
      out.steps.push({ bytes: png.length });
    } else {
      throw new Error('unknown step ' + s.do);
    }
  }
  // The tab goes too, but a close after a failed navigation can hang
  // (seen with Chromium 150): not waited for longer than 5 s.
  await Promise.race([page.close().catch(() => {}), new Promise((r) => setTimeout(r, 5000))]);
} catch (e) {
  out.error = String(e.stack || e);
}
// No browser.close(): the browser is the sandbox's; leaving drops the
// WebSocket (the CDP client detaches) and nothing else.
console.log('RESULT ' + JSON.stringify(out));
process.exit(0);
