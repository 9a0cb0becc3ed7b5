// console_term.mjs - drives Debian's chromium (playwright-core, no downloaded
// browser) through /console's terminal (adr/0054): opens a terminal for an
// NPC, types into it, resizes the window, runs a numbered stream while the
// Python test (tests/integration/test_console_term.py) cuts every connection
// of the page, draws a full-screen program and keeps a screenshot of it.
// Reads its parameters from the environment; prints "STEP name" as it goes,
// "SEQ n" (the highest line of the stream seen so far) and one final
// "RESULT {json}" line.
import { launch } from './chromium.mjs';

const url = process.env.SBX_CONSOLE_URL;
const key = process.env.SBX_KEY;
const npc = process.env.SBX_NPC;
const seqN = Number(process.env.SBX_SEQ || 2000);
const shot = process.env.SBX_SCREENSHOT;
const stepMs = Number(process.env.SBX_STEP_MS || 60000);

const { browser, close } = await launch({ viewport: { width: 1000, height: 700 } });
const result = { console: [], sockets: 0, steps: {} };
const step = (name) => console.log('STEP ' + name);
let page;
try {
  page = await browser.newPage();
  page.on('console', (m) => result.console.push(m.type() + ': ' + m.text()));
  page.on('pageerror', (e) => result.console.push('pageerror: ' + e.message));
  page.on('websocket', (ws) => {
    result.sockets++;
    result.lastSocket = ws.url().replace(/ticket=[^&]*/, 'ticket=T');
    ws.on('framereceived', (f) => {
      if (typeof f.payload === 'string') result.control = [...(result.control || []), f.payload].slice(-6);
    });
    ws.on('close', () => { result.closes = (result.closes || 0) + 1; });
  });
  const resp = await page.goto(url + '/console');
  result.status = resp.status();
  result.csp = resp.headers()['content-security-policy'] || '';
  await page.fill('#key', key);
  await page.click('#keyform button');
  // Poll with evaluate: waitForFunction's polling needs eval, which the
  // page's CSP rightly forbids.
  const until = async (what, fn, arg) => {
    const t0 = Date.now();
    for (;;) {
      const v = await page.evaluate(fn, arg);
      if (v) return v;
      if (Date.now() - t0 > stepMs) throw new Error('timed out waiting for ' + what);
      await page.waitForTimeout(40);
    }
  };
  const text = () => page.evaluate((n) => window.sbxConsole.text(n), npc);
  const panel = () => page.evaluate((n) => {
    const el = document.querySelector('#terms .term[data-npc="' + n + '"]');
    return el ? Object.assign({}, el.dataset, { status: document.getElementById('termstatus').textContent }) : null;
  }, npc);
  // Runs a line in the shell and waits for the marker it echoes after it
  // (the marker is computed, so the echoed command line does not match).
  let marks = 0;
  const run = async (cmd) => {
    const m = ++marks;
    await page.keyboard.type(cmd + '; echo mark-$((' + m + '*1000+1))');
    await page.keyboard.press('Enter');
    const want = 'mark-' + (m * 1000 + 1);
    const t = await until(want, ([n, w]) => {
      const s = window.sbxConsole.text(n);
      return s.split('\n').some((l) => l === w) ? s : null;
    }, [npc, want]);
    const lines = t.split('\n');
    const end = lines.lastIndexOf(want);
    let start = end;
    while (start > 0 && !lines[start - 1].includes('mark-$((' + m + '*1000+1))')) start--;
    return lines.slice(start, end);
  };

  await until('the NPC list', (n) => [...document.querySelectorAll('#npc option')].some((o) => o.value === n), npc);
  await page.selectOption('#npc', npc);
  await page.click('#termopen');
  await until('the terminal to connect', (n) => {
    const el = document.querySelector('#terms .term[data-npc="' + n + '"]');
    return el && el.dataset.state === 'connected' && el.dataset.writer === 'true';
  }, npc);
  await page.click('#terms .term[data-npc="' + npc + '"]');
  step('connected');

  // 1. echo hi: the shell's answer shows.
  result.steps.echo = await run('echo hi');
  step('echo');

  // 2. The page's size is the pty's, before and after the window shrinks.
  const size1 = await page.evaluate((n) => window.sbxConsole.size(n), npc);
  result.steps.size1 = { page: size1, stty: (await run('stty size')).pop() };
  await page.setViewportSize({ width: 640, height: 420 });
  await until('the terminal to fit the smaller window', ([n, c]) => window.sbxConsole.size(n).cols < c,
    [npc, size1.cols]);
  await page.waitForTimeout(300);
  const size2 = await page.evaluate((n) => window.sbxConsole.size(n), npc);
  result.steps.size2 = { page: size2, stty: (await run('stty size')).pop() };
  await page.setViewportSize({ width: 1000, height: 700 });
  await until('the terminal to fit the larger window', ([n, c]) => window.sbxConsole.size(n).cols > c,
    [npc, size2.cols]);
  step('resize');

  // 3. A numbered stream while the test cuts the page's connections.
  const before = (await panel()).connects;
  await page.keyboard.type('seq 1 ' + seqN + ' | while read i; do echo $i; case $i in *00) sleep 0.3;; esac; done; echo seq-$((6*7))');
  await page.keyboard.press('Enter');
  const t0 = Date.now();
  let seen = -1;
  for (;;) {
    const s = await text();
    const lines = s.split('\n');
    let hi = 0;
    for (const l of lines) if (/^\d+$/.test(l)) hi = Math.max(hi, Number(l));
    if (hi !== seen) {
      seen = hi;
      console.log('SEQ ' + hi);
    }
    if (lines.includes('seq-42')) {
      result.steps.seq = lines.filter((l) => /^\d+$/.test(l));
      break;
    }
    if (Date.now() - t0 > 4 * stepMs) throw new Error('the stream never ended; last line seen ' + seen);
    await page.waitForTimeout(50);
  }
  result.steps.reconnects = Number((await panel()).connects) - Number(before);
  step('seq');

  // 4. A full-screen program draws; its screen is kept.
  await page.keyboard.type('top');
  await page.keyboard.press('Enter');
  result.steps.top = await until('top to draw', (n) => {
    const rows = window.sbxConsole.screen(n);
    return rows.some((l) => /PID/.test(l)) && rows.some((l) => /\btop\b/.test(l)) ? rows : null;
  }, npc);
  await page.waitForTimeout(500);
  if (shot) await page.locator('#terms .term[data-npc="' + npc + '"]').screenshot({ path: shot });
  await page.keyboard.type('q');
  step('top');

  // 5. The shell's exit code ends the terminal.
  await page.keyboard.type('exit 3');
  await page.keyboard.press('Enter');
  await until('the terminal to end', (n) => {
    const el = document.querySelector('#terms .term[data-npc="' + n + '"]');
    return el && el.dataset.state === 'ended';
  }, npc);
  result.steps.end = await panel();
  step('end');
  result.storage = await page.evaluate(() => ({
    session: sessionStorage.getItem('sbx.key') !== null,
    local: localStorage.length,
    cookie: document.cookie,
  }));
} catch (e) {
  result.error = String(e && e.stack || e);
  try {
    result.screen = (await page.evaluate((n) => window.sbxConsole.text(n), npc) || '').split('\n').slice(-12);
    result.panel = await page.evaluate(() => document.getElementById('termstatus').textContent);
  } catch (e2) {
    result.screen = String(e2);
  }
} finally {
  await close();
}
console.log('RESULT ' + JSON.stringify(result));
