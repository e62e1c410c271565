// The SDK's public surface, read from the package itself: every class it exports (errors aside: they are thrown,
// not called), with its public prototype members (methods, getters) and static ones, as JSON on stdout.
// tests/sdk/test_sdk_typescript.py checks that the test files ran each of them.
import * as sdk from '@honcho-ai/sdk'

const isClass = (value) => typeof value === 'function' && /^class\b/.test(Function.prototype.toString.call(value))
const publicNames = (object, skip) =>
  Object.getOwnPropertyNames(object).filter((name) => !name.startsWith('_') && !skip.includes(name))
const classes = new Set(Object.values(sdk).filter((value) => isClass(value) && !(value.prototype instanceof Error)))
const surface = {}
for (const cls of classes) { // by class, not export name: ConclusionScope is ConclusionsView under its old name
  surface[cls.name] = {
    members: publicNames(cls.prototype, ['constructor']),
    statics: publicNames(cls, ['length', 'name', 'prototype']),
  }
}
console.log(JSON.stringify(surface))
