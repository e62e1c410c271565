// Peers: get-or-create (Honcho's: what an existing peer is sent replaces its own), metadata and configuration, the
// workspace's peers and a peer's sessions in pages, and the message builder.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { ConclusionsView, Peer } from '@honcho-ai/sdk'
import { honcho, plain, unique } from './helpers.mjs'

const client = honcho(unique('ts-peers'))

test('getting a peer that exists replaces its metadata and configuration with what is sent', async () => {
  const first = await client.peer('alice', { metadata: { first: true }, configuration: { observeMe: false } })
  assert.ok(first instanceof Peer)
  assert.deepEqual([first.id, first.workspaceId, first.metadata], ['alice', client.workspaceId, { first: true }])
  assert.deepEqual(plain(first.configuration), { observeMe: false })
  assert.ok(!Number.isNaN(Date.parse(first.createdAt)))
  const second = await client.peer('alice', { metadata: { second: true }, configuration: { observeMe: true } })
  assert.deepEqual(second.metadata, { second: true }) // Honcho's get-or-create: the sent metadata wins
  assert.deepEqual(plain(second.configuration), { observeMe: true })
  assert.equal(second.createdAt, first.createdAt)
  const plainGet = await client.peer('alice') // sends neither: both stay
  assert.deepEqual([plainGet.metadata, plain(plainGet.configuration)], [{ second: true }, { observeMe: true }])
  assert.equal(String(plainGet), "Peer(id='alice')")
})

test('a peer reads and sets its metadata and configuration, and refreshes what it holds', async () => {
  const bob = await client.peer('bob')
  assert.deepEqual(await bob.getMetadata(), {})
  await bob.setMetadata({ role: 'assistant', nested: { x: [1, 2] } })
  assert.deepEqual(bob.metadata, { role: 'assistant', nested: { x: [1, 2] } })
  await bob.setConfiguration({ observeMe: false })
  assert.deepEqual(plain(await bob.getConfiguration()), { observeMe: false })
  const stale = new Peer('bob', client.workspaceId, client.http)
  assert.equal(stale.metadata, undefined)
  await stale.refresh()
  assert.deepEqual([stale.metadata, plain(stale.configuration)], [{ role: 'assistant', nested: { x: [1, 2] } },
    { observeMe: false }])
})

test('the workspace lists its peers in pages, filtered by metadata', async () => {
  for (const name of ['p1', 'p2', 'p3']) await client.peer(name, { metadata: { group: 'listed' } })
  const page = await client.peers({ filters: { metadata: { group: 'listed' } }, size: 2 })
  assert.deepEqual([page.total, page.pages, page.items.map((p) => p.id)], [3, 2, ['p1', 'p2']])
  assert.ok(page.items.every((p) => p instanceof Peer && p.metadata.group === 'listed'))
  assert.deepEqual((await page.toArray()).map((p) => p.id), ['p1', 'p2', 'p3'])
  const all = await client.peers()
  assert.ok(['alice', 'bob', 'p1', 'p2', 'p3'].every((id) => all.items.some((p) => p.id === id)))
})

test("a peer lists the sessions it belongs to, and builds messages that carry it", async () => {
  const carol = await client.peer('carol')
  await client.session('with-carol', { peers: [carol] })
  await client.session('without-carol')
  const sessions = await carol.sessions()
  assert.deepEqual(sessions.items.map((s) => s.id), ['with-carol'])
  const message = carol.message('hello', { metadata: { turn: 1 }, createdAt: new Date('2025-01-02T03:04:05Z') })
  assert.deepEqual(plain(message), { peerId: 'carol', content: 'hello', metadata: { turn: 1 },
    createdAt: '2025-01-02T03:04:05.000Z' })
})

test("a peer's conclusions are views of its own collection, or of what it concluded about another", async () => {
  const dave = await client.peer('dave')
  const own = dave.conclusions
  assert.ok(own instanceof ConclusionsView)
  assert.deepEqual([own.observer, own.observed], ['dave', 'dave'])
  const ofAlice = dave.conclusionsOf('alice')
  assert.deepEqual([ofAlice.observer, ofAlice.observed], ['dave', 'alice'])
  assert.equal(String(ofAlice), `ConclusionsView(workspaceId='${client.workspaceId}', observer='dave', observed='alice')`)
})
