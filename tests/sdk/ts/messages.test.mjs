// Messages: posting, listing in pages, one by id, metadata edits, a file upload; the context a model gets from them
// (OpenAI's and Anthropic's shapes) and the session's summaries once the summarizer has written them.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { Message, NotFoundError, SessionContext, SessionSummaries, Summary } from '@honcho-ai/sdk'
import { honcho, unique, waitFor } from './helpers.mjs'

const client = honcho(unique('ts-messages'))

test('messages are posted in order and listed in pages, filtered, and read and edited one by one', async () => {
  const [alice, bot] = await Promise.all([client.peer('alice'), client.peer('bot')])
  const session = await client.session('chat', { peers: [alice, bot] })
  const posted = await session.addMessages(Array.from({ length: 60 }, (_, i) =>
    (i % 2 ? bot : alice).message(`message ${i}`, { metadata: { i } })))
  assert.equal(posted.length, 60)
  assert.ok(posted.every((m) => m instanceof Message && m.sessionId === 'chat' && m.tokenCount > 0))
  assert.equal(String(posted[0]), `Message(id='${posted[0].id}', peerId='alice', content='message 0')`)

  const page = await session.messages() // 50 a page
  assert.deepEqual([page.total, page.pages, page.length, page.hasNextPage], [60, 2, 50, true])
  const all = await page.toArray()
  assert.deepEqual(all.map((m) => m.content), posted.map((m) => m.content))
  const bots = await session.messages({ filters: { peer_id: 'bot' }, size: 100 })
  assert.equal(bots.total, 30)
  assert.ok(bots.items.every((m) => m.peerId === 'bot'))

  const one = await session.getMessage(posted[7].id)
  assert.deepEqual([one.content, one.metadata, one.peerId], ['message 7', { i: 7 }, 'bot'])
  const edited = await session.updateMessage(one, { reviewed: true })
  assert.deepEqual(edited.metadata, { reviewed: true })
  assert.deepEqual((await session.updateMessage(posted[8].id, { x: [1] })).metadata, { x: [1] })
  assert.deepEqual((await session.getMessage(posted[7].id)).metadata, { reviewed: true })
  await assert.rejects(session.getMessage(`${posted[7].id}x`), NotFoundError)
})

test('a file upload becomes messages of its peer, from a Blob or from bytes with a name and a type', async () => {
  const alice = await client.peer('alice')
  const session = await client.session('uploads')
  const text = 'I moved to Lisbon last spring.\n\nThe light there is famous.'
  const fromBlob = await session.uploadFile(new File([text], 'notes.txt', { type: 'text/plain' }), alice,
    { metadata: { source: 'notes' } })
  assert.ok(fromBlob.length >= 1)
  assert.equal(fromBlob.map((m) => m.content).join('\n\n'), text)
  assert.ok(fromBlob.every((m) => m.peerId === 'alice' && m.metadata.source === 'notes'))
  const json = JSON.stringify({ plan: 'move', when: 'spring' })
  const fromBytes = await session.uploadFile({ filename: 'plan.json', content: Buffer.from(json),
    content_type: 'application/json' }, 'alice', { createdAt: new Date('2025-03-01T00:00:00Z') })
  assert.equal(fromBytes.length, 1)
  assert.deepEqual(JSON.parse(fromBytes[0].content), { plan: 'move', when: 'spring' })
  assert.equal(new Date(fromBytes[0].createdAt).toISOString(), '2025-03-01T00:00:00.000Z')
  const listed = await (await session.messages()).toArray()
  assert.deepEqual(listed.map((m) => m.id), [...fromBlob, ...fromBytes].map((m) => m.id))
})

test('the context holds the newest messages that fit the budget, in OpenAI and Anthropic shapes', async () => {
  const [alice, bot] = await Promise.all([client.peer('alice'), client.peer('bot')])
  const session = await client.session('context')
  await session.addMessages([alice.message('I moved to Lisbon last spring and I love the light.'),
    bot.message('Lisbon light is famous. What brought you there?'),
    alice.message('A job at a small design studio near the river.')])
  const full = await session.context()
  assert.ok(full instanceof SessionContext)
  assert.deepEqual([full.sessionId, full.length, full.summary], ['context', 3, null])
  assert.equal(String(full), 'SessionContext(messages=3, summary=none)')
  assert.deepEqual(full.toOpenAI(bot).map((m) => [m.role, m.name]), [['user', 'alice'], ['assistant', 'bot'],
    ['user', 'alice']])
  assert.deepEqual(full.toAnthropic('bot')[0], { role: 'user',
    content: 'alice: I moved to Lisbon last spring and I love the light.' })
  const last = full.messages[2]
  const small = await session.context({ tokens: last.tokenCount })
  assert.deepEqual(small.messages.map((m) => m.id), [last.id]) // the newest that fits, nothing more

  await alice.setCard(['IDENTITY: alice is a designer'])
  const withTarget = await session.context({ peerTarget: alice, tokens: 2000 })
  assert.deepEqual(withTarget.peerCard, ['IDENTITY: alice is a designer'])
  assert.ok(withTarget.toOpenAI(bot).some((m) => m.role === 'system' && m.content.includes('alice is a designer')))
})

test('the summaries appear once the summarizer has written them, in the context too', async () => {
  const [alice, bot] = await Promise.all([client.peer('alice'), client.peer('bot')])
  const session = await client.session('summarized', { configuration: { summary: { enabled: true,
    messagesPerShortSummary: 10, messagesPerLongSummary: 20 } } })
  const none = await session.summaries()
  assert.ok(none instanceof SessionSummaries)
  assert.deepEqual([none.sessionId, none.shortSummary, none.longSummary], ['summarized', null, null])
  const made = await session.addMessages(Array.from({ length: 12 }, (_, i) =>
    (i % 2 ? bot : alice).message(`Turn ${i}: we talked about moving to Lisbon and the light by the river.`)))
  const summaries = await waitFor('a short summary', async () => {
    const now = await session.summaries()
    return now.shortSummary && now
  })
  const short = summaries.shortSummary
  assert.ok(short instanceof Summary)
  assert.equal(short.messageId, made[9].id) // cadence: it covers the tenth message
  assert.equal(short.summaryType, 'honcho_chat_summary_short')
  assert.ok(short.content.length > 0 && short.tokenCount > 0 && !Number.isNaN(Date.parse(short.createdAt)))
  const context = await session.context({ tokens: 4000 })
  assert.equal(context.summary?.content, short.content)
  assert.deepEqual(context.messages.map((m) => m.id), made.slice(10).map((m) => m.id))
  assert.equal(context.toOpenAI(bot)[0].content, `<summary>${short.content}</summary>`)
})
