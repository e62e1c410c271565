// Chat: a peer's question to its memory, answered whole, as JSON of a schema, or streamed; a session's; the
// workspace's. Without an LLM (the stack's default) the offline engine answers with the memory's own lines.
import assert from 'node:assert/strict'
import { before, test } from 'node:test'
import { DialecticStreamResponse, Peer } from '@honcho-ai/sdk'
import { z } from 'zod'
import { honcho, unique, waitFor } from './helpers.mjs'

const client = honcho(unique('ts-chat'))
const FACT = 'alice moved to Tallinn last spring'

async function settledMemory() {
  const [alice, bob] = await Promise.all([client.peer('alice'), client.peer('bob')])
  const session = await client.session('s1', { peers: [alice, bob] })
  await session.addMessages([bob.message('Where are you living these days?'),
    alice.message('I moved to Tallinn last spring.')])
  await waitFor("alice's card follows her conclusions", () => alice.getCard())
  const answer = await waitFor('the chat finds the fact', async () => {
    const text = await alice.chat('where did alice move?')
    return text?.split('\n').includes(`- ${FACT}`) && text
  })
  return { alice, bob, session, answer }
}

let memory
before(async () => { memory = await settledMemory() })

test('a peer asks its memory: the answer holds the fact, as text or as JSON of a schema', async () => {
  const { alice, bob, session, answer } = memory
  assert.ok(answer.includes(FACT))
  const Facts = z.object({ facts: z.array(z.string()) })
  assert.deepEqual(Peer.toResponseFormatSchema(Facts).type, 'object')
  const structured = await alice.chat('where did alice move?', { responseFormat: Facts })
  assert.ok(structured.facts.includes(FACT), structured)
  const withEvidence = await alice.chat('where did alice move?', { session, includeEvidence: true,
    reasoningLevel: 'minimal' })
  assert.equal(withEvidence.content, `From alice's memory of alice:\n- ${FACT}`)
  assert.ok(withEvidence.evidence.messages.every((m) => m.session_id === 's1'), withEvidence.evidence)
  assert.equal(await bob.chat('what does bob like?'), null) // nothing concluded about bob
})

test("a peer's answer streams in pieces that add up to the whole one, with the evidence at the end", async () => {
  const { alice, answer } = memory
  const stream = await alice.chatStream('where did alice move?', { includeEvidence: true })
  assert.ok(stream instanceof DialecticStreamResponse)
  const chunks = []
  for await (const chunk of stream) chunks.push(chunk)
  assert.ok(chunks.length > 1, chunks)
  assert.equal(chunks.join(''), answer)
  assert.equal(await stream.getFinalResponse(), answer)
  assert.deepEqual(await stream.toArray(), chunks) // read again from what it kept
  assert.ok(stream.evidence.conclusions.some((c) => c.content === FACT), stream.evidence)
  const plainStream = await alice.chatStream('where did alice move?')
  assert.equal(await plainStream.getFinalResponse(), answer)
  assert.equal(plainStream.evidence, null)
})

test("the workspace's chat answers from every peer's memory, whole or streamed", async () => {
  const whole = await client.chat('who moved to Tallinn?', { reasoningLevel: 'minimal' })
  assert.ok(whole.includes('Tallinn'), whole)
  const streamed = await client.chatStream('who moved to Tallinn?')
  const chunks = await streamed.toArray()
  assert.ok(chunks.join('').includes('Tallinn'), chunks)
})
