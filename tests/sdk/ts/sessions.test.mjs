// Sessions: get-or-create (Honcho's: the metadata sent replaces, the configuration sent is merged in), metadata and
// configuration, members and their session configuration, clone, delete; scopes, the named sets of sessions.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { NotFoundError, Page, Scope, Session } from '@honcho-ai/sdk'
import { honcho, plain, unique } from './helpers.mjs'

const client = honcho(unique('ts-sessions'))

test('getting a session that exists replaces its metadata and merges the configuration sent into its own', async () => {
  const first = await client.session('s1', { metadata: { topic: 'moving' },
    configuration: { summary: { enabled: false } } })
  assert.ok(first instanceof Session)
  assert.deepEqual([first.id, first.workspaceId, first.isActive], ['s1', client.workspaceId, true])
  assert.ok(!Number.isNaN(Date.parse(first.createdAt)))
  const second = await client.session('s1', { metadata: { topic: 'work' },
    configuration: { reasoning: { enabled: false } } })
  assert.deepEqual(second.metadata, { topic: 'work' })
  assert.deepEqual(plain(second.configuration), { summary: { enabled: false }, reasoning: { enabled: false } })
  assert.equal(second.createdAt, first.createdAt)
  assert.equal(String(second), "Session(id='s1')")
})

test('a session reads and sets its metadata and configuration, and refreshes what it holds', async () => {
  const session = await client.session('s2')
  assert.deepEqual(await session.getMetadata(), {})
  await session.setMetadata({ topic: 'plans', n: [1, 2] })
  await session.setConfiguration({ summary: { messagesPerShortSummary: 10, messagesPerLongSummary: 30 } })
  assert.deepEqual(plain(await session.getConfiguration()),
    { summary: { messagesPerShortSummary: 10, messagesPerLongSummary: 30 } })
  const stale = new Session('s2', client.workspaceId, client.http)
  await stale.refresh()
  assert.deepEqual(stale.metadata, { topic: 'plans', n: [1, 2] })
  assert.deepEqual(plain(stale.configuration), { summary: { messagesPerShortSummary: 10, messagesPerLongSummary: 30 } })
  const listed = await client.sessions({ filters: { metadata: { topic: 'plans' } } })
  assert.ok(listed instanceof Page)
  assert.deepEqual(listed.items.map((s) => s.id), ['s2'])
})

test('members are added, set and removed, each with its session configuration', async () => {
  const [alice, bob, carol] = await Promise.all(['alice', 'bob', 'carol'].map((id) => client.peer(id)))
  const session = await client.session('members', { peers: [alice] })
  await session.addPeers([bob, [carol, { observeOthers: true }]])
  assert.deepEqual((await session.peers()).map((p) => p.id), ['alice', 'bob', 'carol'])
  assert.deepEqual(await session.getPeerConfiguration(carol), { observeMe: true, observeOthers: true })
  await session.setPeerConfiguration('bob', { observeMe: false })
  assert.deepEqual(await session.getPeerConfiguration('bob'), { observeMe: false, observeOthers: false })
  await session.removePeers(bob)
  assert.deepEqual((await session.peers()).map((p) => p.id), ['alice', 'carol'])
  await session.setPeers(['bob'])
  assert.deepEqual((await session.peers()).map((p) => p.id), ['bob'])
})

test('a clone holds the messages up to the one named, and a deleted session is gone', async () => {
  const alice = await client.peer('alice')
  const session = await client.session('to-clone', { metadata: { kept: true } })
  const sent = await session.addMessages([1, 2, 3].map((i) => alice.message(`message ${i}`)))
  const whole = await session.clone()
  assert.notEqual(whole.id, session.id)
  assert.deepEqual(whole.metadata, { kept: true })
  assert.deepEqual((await (await whole.messages()).toArray()).map((m) => m.content), ['message 1', 'message 2',
    'message 3'])
  const cut = await session.clone(sent[1].id)
  assert.deepEqual((await (await cut.messages()).toArray()).map((m) => m.content), ['message 1', 'message 2'])

  await whole.delete() // gone at once; its data is purged in the background
  await assert.rejects(whole.getMessage(sent[0].id), NotFoundError)
  assert.ok(!(await (await client.sessions()).toArray()).some((s) => s.id === whole.id))
  assert.equal((await cut.getMessage(sent[0].id)).content, 'message 1') // the other clone is its own session
})

test('a scope is a named set of sessions: sessions are added, listed and removed, with their backfill status', async () => {
  const [s3, s4] = await Promise.all(['s3', 's4'].map((id) => client.session(id)))
  const scope = await client.scope('team', { metadata: { kind: 'team' } })
  assert.ok(scope instanceof Scope)
  assert.deepEqual([scope.id, scope.metadata], ['team', { kind: 'team' }])
  assert.ok(!Number.isNaN(Date.parse(scope.createdAt)))
  assert.equal(String(scope), `Scope(id='team', workspaceId='${client.workspaceId}')`)
  await scope.addSessions([s3, 's4'])
  assert.deepEqual((await scope.sessions()).items.map((s) => s.id), ['s3', 's4'])
  const status = await scope.status()
  assert.deepEqual(Object.keys(status.backfillStatus).sort(), ['s3', 's4'])
  await scope.removeSession(s4)
  assert.deepEqual((await scope.sessions()).items.map((s) => s.id), ['s3'])
  assert.deepEqual((await client.getScope('team')).metadata, { kind: 'team' })
  assert.deepEqual((await client.scopes()).items.map((s) => s.id), ['team'])
  await assert.rejects(client.getScope('nobody'), (error) => error instanceof NotFoundError && error.status === 404)
})
