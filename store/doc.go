// Package store is the Badger store behind a small interface: typed
// keyspaces, a schema version, durable writes.
//
// # Layout
//
// Every key belongs to a [Keyspace], a short lower-case name such as
// "profiles", "peers" or "leases". On disk a key is stored as
//
//	name 0x00 key
//
// Keyspace names cannot contain 0x00, so a keyspace whose name is a prefix of
// another's ("peer" and "peers") never sees the other's keys.
//
// One internal keyspace, "_meta", is reserved for the store itself; callers
// cannot name it because [NewKeyspace] refuses a leading underscore. It holds
// the schema version under the key "schema" as a decimal string. Opening a
// directory whose schema version differs from [SchemaVersion] fails with an
// error wrapping [ErrSchema] and leaves the data as it was.
//
// # Durability
//
// [Badger] syncs every write before Put, PutTTL, Delete or Batch returns
// unless [WithSyncWrites](false) is given; either way a write that has
// returned survives the process being killed. A [Store.Batch] is one
// transaction: all of its writes or none.
//
// # Implementations
//
// [OpenBadger] is the on-disk store used by the daemon. [NewMemory] is a
// map-based store for tests, with an injectable clock for TTLs. The package
// storetest holds the conformance suite both pass.
package store
