// bench.mjs - the E2B SDK's side of the `make bench` rows of issue 23, driven
// by tests/bench/e2b_bench.py one request at a time, so the bench can
// alternate it with sbx's own exec route in the same rounds.
//
// Configured like scenario.mjs by E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY
// only. Reads one word a line on stdin and answers one JSON line on stdout:
//   create   Sandbox.create('base') kept as the current sandbox
//            -> {"id": ..., "token": envd access token, "ms": ...} (the token
//            lets the bench call envd without the SDK; it is never printed)
//   run      commands.run('true') in the current sandbox -> {"ms": ...}
//   cold     a new sandbox and its first command, then kill it (not timed)
//            -> {"create_ms": ..., "first_ms": ..., "ms": create + first}
//   kill     kill the current sandbox -> {"ms": ...}
// An error answers {"error": "Class: message"}; end of input kills what is
// left and exits. Times are wall milliseconds (performance.now) around the
// SDK call alone, not this process's pipe.

import { createInterface } from 'node:readline'
import { Sandbox } from 'e2b'

const TEMPLATE = 'base'
let cur = null

async function handle(word) {
  let t0 = performance.now()
  switch (word) {
    case 'create':
      cur = await Sandbox.create(TEMPLATE, { timeoutMs: 600_000 })
      return { id: cur.sandboxId, token: cur.envdAccessToken, ms: performance.now() - t0 }
    case 'run': {
      if (!cur) throw new Error('no sandbox: send create first')
      await cur.commands.run('true')
      return { ms: performance.now() - t0 }
    }
    case 'cold': {
      const s = await Sandbox.create(TEMPLATE, { timeoutMs: 120_000 })
      const created = performance.now()
      let done
      try {
        await s.commands.run('true')
      } finally {
        done = performance.now()
        await s.kill().catch(() => {})
      }
      return { create_ms: created - t0, first_ms: done - created, ms: done - t0 }
    }
    case 'kill':
      if (cur) await cur.kill()
      cur = null
      return { ms: performance.now() - t0 }
    default:
      throw new Error(`unknown request ${JSON.stringify(word)}`)
  }
}

for await (const line of createInterface({ input: process.stdin })) {
  const word = line.trim()
  if (!word) continue
  let ans
  try {
    ans = await handle(word)
  } catch (e) {
    ans = { error: `${e?.constructor?.name ?? 'Error'}: ${e?.message ?? e}`.slice(0, 500) }
  }
  process.stdout.write(JSON.stringify(ans) + '\n')
}
if (cur) await cur.kill().catch(() => {})
