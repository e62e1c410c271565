// Workspaces: the client's own workspace (created on first use), its metadata and configuration, the list of
// workspaces and its pages, and a delete.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { Page } from '@honcho-ai/sdk'
import { BASE_URL, honcho, plain, unique } from './helpers.mjs'

test('a client creates its workspace on first use and reads and sets its metadata and configuration', async () => {
  const workspace = unique('ts-workspace')
  const client = honcho(workspace)
  assert.equal(client.workspaceId, workspace)
  assert.equal(client.baseURL, BASE_URL)
  assert.equal(client.http.baseURL, BASE_URL)
  assert.equal(String(client), `Honcho(workspaceId='${workspace}', baseURL='${BASE_URL}')`)
  assert.equal(client.metadata, undefined) // nothing read yet

  assert.deepEqual(await client.getMetadata(), {})
  await client.setMetadata({ team: 'search', tags: ['a', { b: 1 }] })
  assert.deepEqual(client.metadata, { team: 'search', tags: ['a', { b: 1 }] })
  await client.setConfiguration({ reasoning: { enabled: false } })
  assert.deepEqual(plain(client.configuration), { reasoning: { enabled: false } })

  const again = honcho(workspace) // another client of the same workspace sees what the first stored
  assert.deepEqual(await again.getMetadata(), { team: 'search', tags: ['a', { b: 1 }] })
  assert.deepEqual(plain(await again.getConfiguration()), { reasoning: { enabled: false } })
  await client.setMetadata({ team: 'memory' })
  await again.refresh()
  assert.deepEqual(again.metadata, { team: 'memory' })
  assert.deepEqual(plain(again.configuration), { reasoning: { enabled: false } })
})

test('workspaces are listed in pages of ids, and a deleted one is gone from the list', async () => {
  const ids = ['ts-list-a', 'ts-list-b', 'ts-list-c'].map(unique)
  for (const id of ids) await honcho(id).getMetadata()
  const first = await honcho(ids[0]).workspaces({ filters: { id: { in: ids } }, size: 2 })
  assert.ok(first instanceof Page)
  assert.deepEqual([first.total, first.page, first.size, first.pages, first.length], [3, 1, 2, 2, 2])
  assert.deepEqual(first.items, ids.slice(0, 2))
  assert.equal(first.get(1), ids[1])
  assert.equal(first.hasNextPage, true)
  const second = await first.getNextPage()
  assert.deepEqual([second.items, second.page, second.hasNextPage], [[ids[2]], 2, false])
  assert.equal(await second.getNextPage(), null)
  assert.deepEqual(await first.toArray(), ids) // every page, from the first
  const reversed = await honcho(ids[0]).workspaces({ filters: { id: { in: ids } }, reverse: true })
  assert.deepEqual(reversed.items, [...ids].reverse())

  await honcho(ids[0]).deleteWorkspace(ids[2])
  const left = await honcho(ids[0]).workspaces({ filters: { id: { in: ids } } })
  assert.deepEqual(left.items, ids.slice(0, 2))
})

test("any list answer becomes a page that pages on through the client's own transport", async () => {
  const ids = ['ts-page-a', 'ts-page-b'].map(unique)
  for (const id of ids) await honcho(id).getMetadata()
  const client = honcho(ids[0])
  const list = (page, size) => client.http.post('/v3/workspaces/list', { body: { filters: { id: { in: ids } } },
    query: { page, size } })
  const answer = await list(1, 1)
  const raw = Page.from(answer, list)
  assert.deepEqual([raw.total, raw.items.map((w) => w.id)], [2, [ids[0]]])
  const everything = []
  for await (const workspace of raw) everything.push(workspace.id) // this page, then the next ones
  assert.deepEqual(everything, ids)
  const named = Page.fromWithTransform(answer, (workspace) => workspace.id)
  assert.deepEqual([named.items, named.hasNextPage], [[ids[0]], true])
  assert.equal(await named.getNextPage(), null) // no way to fetch one was given
  assert.throws(() => named.get(1), RangeError)
})
