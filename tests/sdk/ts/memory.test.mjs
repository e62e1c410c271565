// Derived memory: the conclusions the deriver draws from messages and those a client states, the peer card (also
// for a target that is not a peer yet), the representation and the peer context, the queue status until the work
// is done, and dreams.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { Conclusion, NotFoundError, Page, PeerContext, WorkspaceConclusions } from '@honcho-ai/sdk'
import { honcho, unique, waitFor } from './helpers.mjs'

const client = honcho(unique('ts-memory'))

test('the deriver draws conclusions from messages; the queue status counts the work until it is done', async () => {
  const alice = await client.peer('alice')
  const session = await client.session('s1', { peers: [alice] })
  await session.addMessages([alice.message('I work as a nurse.'), alice.message('I have a dog named Rover.')])
  const pending = await session.queueStatus({ sender: alice }) // one session's status: exact at once, and flat
  assert.deepEqual([pending.totalWorkUnits, pending.sessions], [2, undefined])
  const done = await waitFor('the session is derived', async () => {
    const status = await session.queueStatus({ observer: alice })
    return status.pendingWorkUnits === 0 && status.inProgressWorkUnits === 0 && status
  })
  assert.equal(done.completedWorkUnits, 2)
  const workspace = await waitFor("the workspace's status has the session", async () => {
    const status = await client.queueStatus()
    return status.sessions?.s1 && status
  }) // a workspace's status sums the deriver's cursors: work the stream has not delivered yet is not seen
  assert.deepEqual([workspace.sessions.s1.sessionId, workspace.sessions.s1.completedWorkUnits], ['s1', 2])
  const stated = await waitFor('two conclusions', async () => {
    const page = await alice.conclusions.list()
    return page.total >= 2 && page
  })
  assert.ok(stated instanceof Page)
  const contents = stated.items.map((c) => c.content)
  assert.ok(contents.includes('alice works as a nurse'), contents)
  const nurse = stated.items.find((c) => c.content === 'alice works as a nurse')
  assert.ok(nurse instanceof Conclusion)
  assert.deepEqual([nurse.observerId, nurse.observedId, nurse.sessionId, nurse.level], ['alice', 'alice', 's1',
    'explicit'])
  assert.equal(String(nurse), `Conclusion(id='${nurse.id}', content='alice works as a nurse')`)
  const card = await waitFor("alice's card holds both facts", async () => {
    const entries = await alice.getCard()
    return ['nurse', 'Rover'].every((word) => entries?.some((entry) => entry.includes(word))) && entries
  })

  await alice.setCard(['written by hand']) // the dream rebuilds the card from alice's conclusions
  await client.scheduleDream({ observer: alice, session })
  const rebuilt = await waitFor('the dream refreshes the card', async () => {
    const now = await alice.getCard()
    return now[0] !== 'written by hand' && now
  })
  assert.deepEqual(new Set(rebuilt), new Set(card))
  await waitFor('the queue settles', async () => {
    const status = await client.queueStatus({ observer: alice })
    return status.pendingWorkUnits === 0 && status.inProgressWorkUnits === 0
  })
  const after = (await alice.conclusions.list()).items.map((c) => c.id) // an extractive dream keeps what was stated
  assert.ok(stated.items.every((c) => after.includes(c.id)))
})

test('stated conclusions are created, listed, queried, read and deleted, in a view and in the workspace', async () => {
  const [bob, carol] = await Promise.all([client.peer('bob'), client.peer('carol')])
  const session = await client.session('s2')
  const view = bob.conclusionsOf(carol)
  const made = await view.create([{ content: 'carol likes green tea', sessionId: session },
    { content: 'carol runs on Sundays' }])
  assert.deepEqual(made.map((c) => [c.content, c.observerId, c.observedId, c.sessionId]), [
    ['carol likes green tea', 'bob', 'carol', 's2'], ['carol runs on Sundays', 'bob', 'carol', null]])
  assert.deepEqual((await view.list()).items.map((c) => c.content).sort(), ['carol likes green tea',
    'carol runs on Sundays'])
  assert.deepEqual((await view.list({ session })).items.map((c) => c.id), [made[0].id])
  const found = await waitFor('the query finds the tea', async () => {
    const hits = await view.query('what tea does carol like?', 1)
    return hits[0]?.id === made[0].id && hits
  })
  assert.equal(found.length, 1)
  assert.equal((await view.get(made[1].id)).content, 'carol runs on Sundays')
  assert.deepEqual((await view.getMany(made.map((c) => c.id))).map((c) => c.id).sort(), made.map((c) => c.id).sort())
  assert.equal((await view.derived(made[0].id)).total, 0) // nothing inferred from it: no dream has run
  assert.ok((await view.representation()).includes('carol likes green tea'))
  await assert.rejects(bob.conclusions.get(made[0].id), NotFoundError) // another view's conclusion

  const everywhere = client.conclusions
  assert.ok(everywhere instanceof WorkspaceConclusions)
  assert.equal(String(everywhere), `WorkspaceConclusions(workspaceId='${client.workspaceId}')`)
  const listed = await everywhere.list({ filters: { observer_id: 'bob' } })
  assert.deepEqual(listed.items.map((c) => c.id).sort(), made.map((c) => c.id).sort())
  assert.equal((await everywhere.get(made[0].id)).content, 'carol likes green tea')
  assert.deepEqual((await everywhere.getMany([made[1].id])).map((c) => c.content), ['carol runs on Sundays'])

  await view.delete(made[1].id)
  assert.deepEqual((await view.list()).items.map((c) => c.id), [made[0].id])
  await assert.rejects(everywhere.get(made[1].id), NotFoundError)
})

test('a card is set and read for the peer itself, for another peer, and for a target not created yet', async () => {
  const [erin, frank] = await Promise.all([client.peer('erin'), client.peer('frank')])
  assert.equal(await erin.getCard(), null)
  assert.deepEqual(await erin.setCard(['IDENTITY: erin is a pilot']), ['IDENTITY: erin is a pilot'])
  assert.deepEqual(await erin.card(), ['IDENTITY: erin is a pilot'])
  assert.deepEqual(await erin.setCard(['frank likes chess'], frank), ['frank likes chess'])
  assert.deepEqual(await erin.getCard(frank), ['frank likes chess'])
  assert.deepEqual(await erin.setCard(['gina is new here'], 'gina'), ['gina is new here']) // no peer gina yet
  assert.deepEqual(await erin.getCard('gina'), ['gina is new here'])
  assert.deepEqual(await erin.getCard(), ['IDENTITY: erin is a pilot']) // each pair its own card
})

test("a peer's representation and context hold its conclusions and card, in a session too", async () => {
  const hana = await client.peer('hana')
  const session = await client.session('s3', { peers: [hana] })
  await hana.conclusions.create([{ content: 'hana moved to Lisbon last spring', sessionId: session }])
  await hana.setCard(['IDENTITY: hana is a designer'])
  const representation = await waitFor('the representation', async () => {
    const text = await hana.representation({ searchQuery: 'Lisbon', maxConclusions: 5 })
    return text.includes('hana moved to Lisbon last spring') && text
  })
  assert.ok(representation.startsWith('## Explicit Observations'), representation)
  assert.equal(await hana.representation({ target: 'alice' }), '') // hana observes no one else
  const context = await hana.context({ searchQuery: 'where does hana live', searchTopK: 1 })
  assert.ok(context instanceof PeerContext)
  assert.deepEqual([context.peerId, context.targetId, context.peerCard], ['hana', 'hana',
    ['IDENTITY: hana is a designer']])
  assert.ok(context.representation.includes('Lisbon'))
  assert.equal(String(context), "PeerContext(peerId='hana', targetId='hana')")
  assert.ok((await session.representation(hana, { searchQuery: 'Lisbon' })).includes('Lisbon'))
})
