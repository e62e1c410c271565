// What the test files share: a client of the local stack that tests/sdk/test_sdk_typescript.py started (its URL in
// PRECIS_URL), each file in workspaces of its own, and waiting on the stack's background work (the deriver, the
// summarizer, the search index) by polling a condition until a deadline, never by sleeping a fixed time.
import { Honcho } from '@honcho-ai/sdk'

export const BASE_URL = process.env.PRECIS_URL
if (!BASE_URL) {
  throw new Error('PRECIS_URL is not set: tests/sdk/test_sdk_typescript.py runs these files against a local stack')
}

// Workspace ids of this run: a stack that served an earlier run (make dev) holds that run's workspaces.
const RUN = Date.now().toString(36)
export const unique = (name) => `${name}-${RUN}`

export function honcho(workspaceId) {
  return new Honcho({ baseURL: BASE_URL, apiKey: 'local', workspaceId, timeout: 30_000, maxRetries: 0 })
}

export async function waitFor(what, condition, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await condition()
    if (value) return value
    if (Date.now() > deadline) throw new Error(`${what}: not so within ${timeoutMs} ms`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

// The SDK's camelCase objects carry every known key, the unset ones undefined: compare what is set.
export const plain = (value) => JSON.parse(JSON.stringify(value))
