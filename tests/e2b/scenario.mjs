// scenario.mjs - issue 23's must-show: the real npm `e2b` SDK (2.51.0, pinned by
// package-lock.json, installed by `npm ci` here) against sbx's E2B layer.
//
// Configured by exactly the three settings a platform gives the SDK:
//   E2B_API_URL      the control plane (sandbox-api's /e2b)
//   E2B_SANDBOX_URL  one URL for every sandbox's envd (sandbox-api's /e2b/envd;
//                    the SDK routes with E2b-Sandbox-Id / E2b-Sandbox-Port)
//   E2B_API_KEY      an sbx key (a player's)
// Nothing else is read: whatever the scenario needs it makes itself.
//
// Output is TAP: `1..N`, then one line per named case,
//   ok N - name
//   not ok N - name # reason
// (reasons are one line; diagnostics go to stderr as `# ` lines), so
// tests/integration/test_e2b.py counts each case as one test. `--list` prints
// the case names, one a line, and runs nothing. Cases run in order and share
// the sandboxes they make; a case whose sandbox is missing fails saying so.
// Exit status 0 when every case passed, 1 otherwise.
//
// What it may touch: sandboxes it creates (all killed at the end) and the
// loopback URLs above. It prints no key and no access token.

import { createHash, randomBytes } from 'node:crypto'
import {
  AuthenticationError,
  CommandExitError,
  FileType,
  NotFoundError,
  Sandbox,
  SandboxError,
  TimeoutError,
} from 'e2b'

const MiB = 1 << 20
const RUN = randomBytes(6).toString('hex') // tells this run's sandboxes apart
const TEMPLATE = 'base' // the SDK's default: sbx's default image
const ctx = { a: null, b: null, aInfo: null, killed: null }
const cases = []

function test(name, fn, limitMs = 60_000) {
  cases.push({ name, fn, limitMs })
}

function fail(msg) {
  throw new Error(msg)
}

// canon(v): JSON with object keys sorted, so objects compare by content.
function canon(v) {
  if (Array.isArray(v)) return `[${v.map(canon).join(',')}]`
  if (v && typeof v === 'object' && !(v instanceof Date)) {
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canon(v[k])}`).join(',')}}`
  }
  return JSON.stringify(v)
}

function eq(got, want, what) {
  const g = canon(got)
  const w = canon(want)
  if (g !== w) fail(`${what}: got ${g}, want ${w}`)
}

function truthy(v, what) {
  if (!v) fail(what)
}

function sbx() {
  return ctx.a ?? fail('no sandbox: the create case failed')
}

// expectError(promise, Class, what): the promise rejects with an instance of
// Class; returns the error.
async function expectError(p, Class, what) {
  let got
  try {
    await p
  } catch (e) {
    got = e
  }
  if (got === undefined) fail(`${what}: resolved, want ${Class.name}`)
  if (!(got instanceof Class)) {
    fail(`${what}: ${got?.constructor?.name}: ${String(got?.message).slice(0, 300)}, want ${Class.name}`)
  }
  return got
}

function sha256(buf) {
  return createHash('sha256').update(buf).digest('hex')
}

async function until(pred, ms, what) {
  const end = Date.now() + ms
  while (!pred()) {
    if (Date.now() > end) fail(`${what}: not within ${ms} ms`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

// -------------------------------------------------------------- control plane

test('Sandbox.create with template, metadata, envs, timeoutMs', async () => {
  const t0 = Date.now()
  ctx.a = await Sandbox.create(TEMPLATE, {
    metadata: { suite: 'sbx-e2b', run: RUN, role: 'a' },
    envs: { SBX_E2B_GREETING: 'hello from create' },
    timeoutMs: 300_000,
  })
  console.error(`# created ${ctx.a.sandboxId} in ${Date.now() - t0} ms`)
  truthy(/^[a-z0-9][a-z0-9-]{0,40}$/.test(ctx.a.sandboxId), `sandboxId ${ctx.a.sandboxId} is no NPC name`)
  ctx.b = await Sandbox.create(TEMPLATE, {
    metadata: { suite: 'sbx-e2b', run: RUN, role: 'b' },
    timeoutMs: 120_000,
  })
  truthy(ctx.b.sandboxId !== ctx.a.sandboxId, 'two creates gave one id')
})

test('getInfo: template, metadata, state, deadline', async () => {
  const info = await sbx().getInfo()
  eq(info.sandboxId, sbx().sandboxId, 'sandboxId')
  eq(info.metadata, { suite: 'sbx-e2b', run: RUN, role: 'a' }, 'metadata')
  eq(info.state, 'running', 'state')
  truthy(info.templateId, 'templateId is empty')
  const left = info.endAt.getTime() - Date.now()
  truthy(left > 200_000 && left <= 301_000, `endAt is ${left} ms away, want about 300 s`)
  truthy(info.startedAt.getTime() <= Date.now() + 1000, 'startedAt is in the future')
  ctx.aInfo = info
})

test('Sandbox.list with a metadata filter', async () => {
  const ids = async (metadata) => {
    const p = Sandbox.list({ query: { metadata } })
    const out = []
    while (p.hasNext) for (const s of await p.nextItems()) out.push(s.sandboxId)
    return out.sort()
  }
  eq(await ids({ run: RUN, role: 'a' }), [sbx().sandboxId], 'run+role a')
  eq(await ids({ run: RUN }), [sbx().sandboxId, ctx.b.sandboxId].sort(), 'run')
  eq(await ids({ run: 'no-such-run-' + RUN }), [], 'another run')
})

test('setTimeout moves the deadline', async () => {
  await sbx().setTimeout(600_000)
  const info = await sbx().getInfo()
  const left = info.endAt.getTime() - Date.now()
  truthy(left > 500_000 && left <= 601_000, `endAt is ${left} ms away after setTimeout(600 s)`)
})

// -------------------------------------------------------------- commands

test('commands.run: stdout and stderr callbacks', async () => {
  const out = []
  const err = []
  const r = await sbx().commands.run('echo out-1; echo err-1 >&2; sleep 0.2; echo out-2', {
    onStdout: (d) => out.push(d),
    onStderr: (d) => err.push(d),
  })
  eq(r.exitCode, 0, 'exitCode')
  eq(r.stdout, 'out-1\nout-2\n', 'stdout')
  eq(r.stderr, 'err-1\n', 'stderr')
  eq(out.join(''), r.stdout, 'onStdout data')
  eq(err.join(''), r.stderr, 'onStderr data')
})

test('commands.run: exit code → CommandExitError', async () => {
  const e = await expectError(sbx().commands.run('echo before; echo why >&2; exit 3'),
    CommandExitError, 'exit 3')
  eq(e.exitCode, 3, 'exitCode')
  eq(e.stdout, 'before\n', 'stdout')
  eq(e.stderr, 'why\n', 'stderr')
})

test('commands.run: envs of create and of the call', async () => {
  const r = await sbx().commands.run('echo "$SBX_E2B_GREETING|$ONLY_HERE"')
  eq(r.stdout, 'hello from create|\n', 'create envs')
  const r2 = await sbx().commands.run('echo "$SBX_E2B_GREETING|$ONLY_HERE"', {
    envs: { ONLY_HERE: 'yes', SBX_E2B_GREETING: 'overridden' },
  })
  eq(r2.stdout, 'overridden|yes\n', 'call envs over create envs')
})

test('commands.run: cwd', async () => {
  await sbx().commands.run('mkdir -p /work/cwd-test/sub')
  eq((await sbx().commands.run('pwd')).stdout, '/work\n', 'default cwd (E2B home is /work)')
  eq((await sbx().commands.run('pwd', { cwd: '/home/user/cwd-test' })).stdout, '/work/cwd-test\n',
    'cwd /home/user/cwd-test')
  eq((await sbx().commands.run('pwd', { cwd: 'cwd-test/sub' })).stdout, '/work/cwd-test/sub\n',
    'relative cwd')
})

test('commands.run: background then kill', async () => {
  const t0 = Date.now()
  const h = await sbx().commands.run('echo started; sleep 60', { background: true })
  truthy(Date.now() - t0 < 10_000, 'background run did not return at once')
  truthy(Number.isInteger(h.pid) && h.pid > 0, `pid ${h.pid}`)
  await until(() => h.stdout.includes('started'), 10_000, 'output of the background command')
  const listed = await sbx().commands.list()
  truthy(listed.some((p) => p.pid === h.pid), `pid ${h.pid} not in commands.list`)
  eq(await h.kill(), true, 'kill()')
  let ended = false
  try {
    await h.wait()
    ended = true
  } catch (e) {
    if (!(e instanceof CommandExitError)) throw e
    ended = true
  }
  truthy(ended && Date.now() - t0 < 30_000, 'the killed command did not end')
  const after = await sbx().commands.list()
  truthy(!after.some((p) => p.pid === h.pid), `pid ${h.pid} still listed after kill`)
  eq(await sbx().commands.kill(h.pid), false, 'kill of a gone pid')
})

test('commands.run: timeoutMs → TimeoutError', async () => {
  const t0 = Date.now()
  await expectError(sbx().commands.run('sleep 30', { timeoutMs: 1500 }), TimeoutError,
    'sleep 30 with timeoutMs 1500')
  const took = Date.now() - t0
  truthy(took < 10_000, `TimeoutError after ${took} ms`)
})

// -------------------------------------------------------------- pty

test('pty.create / sendInput / resize / kill, an interactive read answered', async () => {
  const enc = new TextEncoder()
  const dec = new TextDecoder()
  let screen = ''
  const h = await sbx().pty.create({
    cols: 80,
    rows: 24,
    onData: (d) => {
      screen += dec.decode(d, { stream: true })
    },
  })
  truthy(Number.isInteger(h.pid) && h.pid > 0, `pid ${h.pid}`)
  // The prompt is printed from two halves so the echo of the typed line
  // (which has the quotes) does not match it.
  await sbx().pty.sendInput(h.pid, enc.encode(`printf 'your na''me? '; read NAME; echo "got:$NAME:"\n`))
  await until(() => screen.includes('your name? '), 15_000, 'the prompt of read')
  await sbx().pty.sendInput(h.pid, enc.encode('sbx\n'))
  await until(() => screen.includes('got:sbx:'), 10_000, 'the answer to read')
  await sbx().pty.resize(h.pid, { cols: 100, rows: 30 })
  await sbx().pty.sendInput(h.pid, enc.encode('echo "size:$(stty size):"\n'))
  await until(() => screen.includes('size:30 100:'), 10_000, `stty size after resize (screen: ${JSON.stringify(screen.slice(-200))})`)
  eq(await sbx().pty.kill(h.pid), true, 'pty.kill')
  const t0 = Date.now()
  try {
    await h.wait()
  } catch (e) {
    if (!(e instanceof CommandExitError)) throw e
  }
  truthy(Date.now() - t0 < 10_000, 'the killed PTY did not end')
})

// -------------------------------------------------------------- files

test('files.write / read text', async () => {
  const w = await sbx().files.write('notes/hello.txt', 'hello e2b\nsecond line ✓\n')
  truthy(w.path.endsWith('notes/hello.txt'), `write path ${w.path}`)
  eq(w.type, FileType.FILE, 'write type')
  eq(await sbx().files.read('notes/hello.txt'), 'hello e2b\nsecond line ✓\n', 'read text')
  eq(await sbx().files.read('/home/user/notes/hello.txt'), 'hello e2b\nsecond line ✓\n',
    'read via /home/user')
  eq((await sbx().commands.run('cat /work/notes/hello.txt')).stdout, 'hello e2b\nsecond line ✓\n',
    'the file in the sandbox')
})

test('files.write / read bytes', async () => {
  const bytes = new Uint8Array(4096)
  for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 7) & 255
  await sbx().files.write('bytes.bin', bytes.buffer)
  const back = await sbx().files.read('bytes.bin', { format: 'bytes' })
  truthy(back instanceof Uint8Array, 'read bytes: not a Uint8Array')
  eq(sha256(back), sha256(bytes), 'sha256 of bytes read back')
})

test('files.write / read 50 MiB with equal SHA-256', async () => {
  const big = randomBytes(50 * MiB)
  const want = sha256(big)
  let t0 = Date.now()
  const w = await sbx().files.write('big.bin', new Blob([big]))
  console.error(`# 50 MiB written in ${Date.now() - t0} ms`)
  truthy(w.path.endsWith('big.bin'), `write path ${w.path}`)
  const inside = await sbx().commands.run('sha256sum /work/big.bin')
  eq(inside.stdout.split(' ')[0], want, 'sha256sum in the sandbox')
  t0 = Date.now()
  const back = await sbx().files.read('big.bin', { format: 'bytes' })
  console.error(`# 50 MiB read in ${Date.now() - t0} ms`)
  eq(back.length, 50 * MiB, 'length read back')
  eq(sha256(back), want, 'sha256 read back')
}, 180_000)

test('files.getInfo', async () => {
  const f = await sbx().files.getInfo('big.bin')
  eq([f.name, f.type, f.size], ['big.bin', FileType.FILE, 50 * MiB], 'big.bin')
  truthy(f.path.endsWith('/big.bin'), `path ${f.path}`)
  const d = await sbx().files.getInfo('notes')
  eq([d.name, d.type], ['notes', FileType.DIR], 'notes')
  await expectError(sbx().files.getInfo('no-such-file'), NotFoundError, 'getInfo of a missing file')
})

test('files.list', async () => {
  const top = await sbx().files.list('.')
  const names = top.map((e) => e.name)
  for (const n of ['big.bin', 'bytes.bin', 'notes']) truthy(names.includes(n), `${n} not listed: ${names}`)
  eq(top.find((e) => e.name === 'notes').type, FileType.DIR, 'type of notes')
  eq(top.find((e) => e.name === 'bytes.bin').size, 4096, 'size of bytes.bin')
  const notes = await sbx().files.list('/home/user/notes')
  eq(notes.map((e) => e.name), ['hello.txt'], 'list of notes')
  const deep = await sbx().files.list('cwd-test', { depth: 2 })
  truthy(deep.some((e) => e.path.endsWith('cwd-test/sub')), `depth 2: ${deep.map((e) => e.path)}`)
})

test('files.exists', async () => {
  eq(await sbx().files.exists('notes/hello.txt'), true, 'an existing file')
  eq(await sbx().files.exists('notes'), true, 'an existing dir')
  eq(await sbx().files.exists('no-such-file'), false, 'a missing file')
})

test('files.makeDir', async () => {
  eq(await sbx().files.makeDir('made/deep/er'), true, 'a new dir (with parents)')
  eq(await sbx().files.makeDir('made/deep/er'), false, 'an existing dir')
  eq((await sbx().files.getInfo('made/deep/er')).type, FileType.DIR, 'type')
})

test('files.rename', async () => {
  const e = await sbx().files.rename('notes/hello.txt', 'made/moved.txt')
  truthy(e.path.endsWith('made/moved.txt'), `rename path ${e.path}`)
  eq(await sbx().files.exists('notes/hello.txt'), false, 'old name')
  eq(await sbx().files.read('made/moved.txt'), 'hello e2b\nsecond line ✓\n', 'content after rename')
})

test('files.remove', async () => {
  await sbx().files.remove('made/moved.txt')
  eq(await sbx().files.exists('made/moved.txt'), false, 'removed file')
  await sbx().files.remove('made')
  eq(await sbx().files.exists('made'), false, 'removed dir tree')
})

test('files.watchDir sees a create and a write', async () => {
  await sbx().files.makeDir('watched')
  const events = []
  const w = await sbx().files.watchDir('watched', (ev) => events.push(ev))
  try {
    await sbx().commands.run('touch /work/watched/new.txt')
    await until(() => events.some((e) => e.name === 'new.txt' && e.type === 'create'), 10_000,
      `a create event (events: ${JSON.stringify(events)})`)
    await sbx().commands.run('echo more >> /work/watched/new.txt')
    await until(() => events.some((e) => e.name === 'new.txt' && e.type === 'write'), 10_000,
      `a write event (events: ${JSON.stringify(events)})`)
  } finally {
    await w.stop()
  }
})

test('a path outside /work is refused with sbx\'s sentence', async () => {
  let got
  try {
    await sbx().files.read('/etc/passwd')
  } catch (e) {
    got = e
  }
  truthy(got, 'reading /etc/passwd worked')
  truthy(/Only \/work is reachable/.test(got.message), `refusal: ${got.constructor.name}: ${got.message}`)
})

// -------------------------------------------------------------- beyond the must-show
// The other methods docs/e2b-compat.md calls working: each is exercised here.

test('commands.sendStdin / closeStdin', async () => {
  const h = await sbx().commands.run('cat; echo "[eof]"', { background: true, stdin: true })
  await sbx().commands.sendStdin(h.pid, 'line one\n')
  await h.sendStdin('line two\n')
  await sbx().commands.closeStdin(h.pid)
  const r = await h.wait()
  eq(r.stdout, 'line one\nline two\n[eof]\n', 'stdout of cat')
})

test('commands.connect to a running command', async () => {
  const h = await sbx().commands.run('sleep 1; echo late; exit 4', { background: true })
  await h.disconnect()
  const seen = []
  const again = await sbx().commands.connect(h.pid, { onStdout: (d) => seen.push(d) })
  const e = await expectError(again.wait(), CommandExitError, 'wait of the connected command')
  eq([e.exitCode, seen.join('')], [4, 'late\n'], 'exit code and stdout seen by connect')
})

test('files.write of several files at once, read as blob and stream', async () => {
  const infos = await sbx().files.write([
    { path: 'multi/one.txt', data: 'one' },
    { path: 'multi/two.bin', data: new Uint8Array([0, 1, 2, 255]).buffer },
  ])
  eq(infos.map((i) => i.name).sort(), ['one.txt', 'two.bin'], 'names written')
  eq(await (await sbx().files.read('multi/one.txt', { format: 'blob' })).text(), 'one', 'blob')
  const chunks = []
  for await (const c of await sbx().files.read('multi/two.bin', { format: 'stream' })) chunks.push(...c)
  eq(chunks, [0, 1, 2, 255], 'stream')
})

test('isRunning and getMetrics', async () => {
  eq(await sbx().isRunning(), true, 'isRunning')
  const m = await sbx().getMetrics()
  truthy(Array.isArray(m), `getMetrics: ${JSON.stringify(m)}`)
})

test('refusals of the compatibility table, each with its sentence', async () => {
  const refused = async (p, re, what) => {
    const e = await expectError(p, SandboxError, what)
    truthy(re.test(e.message), `${what}: ${e.constructor.name}: ${e.message}`)
  }
  await refused(Sandbox.create(TEMPLATE, { network: { allowOut: ['192.0.2.1'] } }),
    /granted by an operator/, 'create with network')
  await refused(sbx().updateNetwork({ allowOut: ['192.0.2.1'] }), /granted by an operator/,
    'updateNetwork')
  await refused(Sandbox.create(TEMPLATE, { mcp: { exa: { apiKey: 'x' } } }),
    /"mcp" is not available/, 'create with mcp')
  await refused(Sandbox.create('no-such-template-' + RUN), /is not offered here/,
    'an unknown template')
  await refused(sbx().commands.run('id', { user: 'root' }),
    /sbx runs every command as the sandbox user/, 'user root')
  // 501 with where sbx's own snapshots and forks are (adr/0068).
  await refused(sbx().fork(), /sbx does not map E2B snapshots or forks/, 'fork')
  await refused(sbx().createSnapshot(), /sbx does not map E2B snapshots or forks/,
    'createSnapshot')
  const p = Sandbox.list({ query: { metadata: { run: RUN } } })
  eq((await p.nextItems()).length, 2, 'sandboxes of this run after the refusals')
})

// -------------------------------------------------------------- lifecycle

test('pause then connect: files kept', async () => {
  await sbx().files.write('kept.txt', 'still here')
  eq(await sbx().pause(), true, 'pause()')
  const info = await Sandbox.getInfo(sbx().sandboxId)
  eq(info.state, 'paused', 'state after pause')
  eq(await sbx().isRunning(), false, 'isRunning of a paused sandbox')
  const p = Sandbox.list({ query: { metadata: { run: RUN }, state: ['paused'] } })
  const paused = (await p.nextItems()).map((s) => s.sandboxId)
  eq(paused, [sbx().sandboxId], 'list of paused sandboxes')
  const again = await Sandbox.connect(sbx().sandboxId)
  eq(again.sandboxId, sbx().sandboxId, 'connect id')
  eq((await again.getInfo()).state, 'running', 'state after connect')
  eq(await again.files.read('kept.txt'), 'still here', 'file kept over pause')
  eq((await again.commands.run('cat /work/kept.txt')).stdout, 'still here', 'file seen by a command')
  ctx.a = again
}, 120_000)

test('kill', async () => {
  const id = ctx.b?.sandboxId ?? fail('no second sandbox: the create case failed')
  eq(await ctx.b.kill(), true, 'kill()')
  ctx.killed = id
  eq(await Sandbox.kill(id), false, 'a second kill')
  const p = Sandbox.list({ query: { metadata: { run: RUN } } })
  truthy(!(await p.nextItems()).some((s) => s.sandboxId === id), 'the killed sandbox is listed')
})

test('a killed sandbox → NotFoundError', async () => {
  const id = ctx.killed ?? fail('no killed sandbox: the kill case failed')
  await expectError(Sandbox.getInfo(id), NotFoundError, 'getInfo of a killed sandbox')
  await expectError(Sandbox.connect(id), NotFoundError, 'connect to a killed sandbox')
  await expectError(Sandbox.setTimeout(id, 60_000), NotFoundError, 'setTimeout of a killed sandbox')
})

test('a wrong key → AuthenticationError', async () => {
  const apiKey = 'sbx-wrong-' + randomBytes(16).toString('hex')
  await expectError(Sandbox.create(TEMPLATE, { apiKey }), AuthenticationError, 'create')
  await expectError(Sandbox.list({ apiKey }).nextItems(), AuthenticationError, 'list')
  await expectError(Sandbox.getInfo(sbx().sandboxId, { apiKey }), AuthenticationError,
    'getInfo of a sandbox of another key')
})

test('kill the last sandbox', async () => {
  eq(await sbx().kill(), true, 'kill()')
  ctx.a = null
})

// -------------------------------------------------------------- the run

async function main() {
  if (process.argv.includes('--list')) {
    for (const c of cases) console.log(c.name)
    return 0
  }
  for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
    if (!process.env[v]) {
      console.error(`scenario: ${v} is not set`)
      return 2
    }
  }
  console.log(`1..${cases.length}`)
  let failed = 0
  for (const [i, c] of cases.entries()) {
    const t0 = Date.now()
    let timer
    try {
      await Promise.race([
        c.fn(),
        new Promise((_, rej) => {
          timer = setTimeout(() => rej(new Error(`no result within ${c.limitMs} ms`)), c.limitMs)
        }),
      ])
      console.log(`ok ${i + 1} - ${c.name}`)
    } catch (e) {
      failed++
      const why = `${e?.constructor?.name ?? 'Error'}: ${e?.message ?? e}`.replace(/\s+/g, ' ').slice(0, 600)
      console.log(`not ok ${i + 1} - ${c.name} # ${why}`)
      if (e?.stack) console.error(e.stack.split('\n').map((l) => '# ' + l).join('\n'))
    } finally {
      clearTimeout(timer)
    }
    console.error(`# ${c.name}: ${Date.now() - t0} ms`)
  }
  // Whatever a failed case left: kill it (best effort, not a case).
  for (const s of [ctx.a, ctx.b]) if (s) await s.kill().catch(() => {})
  return failed ? 1 : 0
}

process.exitCode = await main()
