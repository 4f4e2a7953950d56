package store

import "github.com/dgraph-io/badger/v4"

// Hooks for the external tests in package store_test.

// WithoutSchemaCheck opens a store whatever its schema version.
func WithoutSchemaCheck() BadgerOption {
	return func(c *badgerConfig) { c.skipSchemaCheck = true }
}

// SetSchemaVersion overwrites the schema version recorded in b.
func SetSchemaVersion(b *Badger, v string) error {
	return b.Put(metaKeyspace, schemaKey, []byte(v))
}

// SchemaVersionOf returns the schema version recorded in b.
func SchemaVersionOf(b *Badger) (string, error) {
	v, err := b.Get(metaKeyspace, schemaKey)
	return string(v), err
}

// TunedBadgerOptions returns the Badger options OpenBadger uses for dir, for
// benchmarks of raw Badger, with Badger's own compactors.
func TunedBadgerOptions(dir string, opts ...BadgerOption) badger.Options {
	c := defaultBadgerConfig()
	for _, o := range opts {
		o(&c)
	}
	// Raw Badger runs its own compactors: nothing else would.
	return c.options(dir).WithNumCompactors(2)
}

// Levels returns the levels of b's LSM tree.
func Levels(b *Badger) []badger.LevelInfo { return b.db.Levels() }
