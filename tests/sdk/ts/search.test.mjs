// Search over messages: the workspace's, a session's and a peer's, with filters and a limit. DynamoDB fills the
// search index asynchronously: a message is found once the index holds it.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { Message } from '@honcho-ai/sdk'
import { honcho, unique, waitFor } from './helpers.mjs'

const client = honcho(unique('ts-search'))

test('the workspace, a session and a peer each search the messages they hold', async () => {
  const [alice, bob] = await Promise.all([client.peer('alice'), client.peer('bob')])
  const [session, other] = await Promise.all([client.session('s1'), client.session('s2')])
  await session.addMessages([bob.message('Do you make marmalade?'),
    alice.message('I make bitter marmalade every winter.')])
  await other.addMessages([bob.message('Seville oranges make the best marmalade.', { metadata: { topic: 'kitchen' } })])
  const found = await waitFor('all three are found', async () => {
    const hits = await client.search('marmalade')
    return hits.length === 3 && hits
  })
  assert.ok(found.every((m) => m instanceof Message))
  assert.deepEqual(new Set(found.map((m) => m.sessionId)), new Set(['s1', 's2']))
  assert.equal((await session.search('bitter marmalade'))[0].content, 'I make bitter marmalade every winter.')
  assert.deepEqual((await alice.search('marmalade')).map((m) => m.content), ['I make bitter marmalade every winter.'])
  assert.deepEqual((await client.search('marmalade', { filters: { metadata: { topic: 'kitchen' } } })).map(
    (m) => m.sessionId), ['s2'])
  assert.equal((await bob.search('marmalade', { limit: 1 })).length, 1)
  assert.deepEqual(await session.search('nothing like this'), [])
})
