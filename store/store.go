package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"
)

// SchemaVersion is the version of the on-disk layout written by this build.
const SchemaVersion = 1

var (
	// ErrNotFound is returned by Get when the key is absent or expired.
	ErrNotFound = errors.New("store: not found")
	// ErrSchema is returned, wrapped, when a directory holds a schema version
	// this build does not know.
	ErrSchema = errors.New("store: unsupported schema version")
	// ErrClosed is returned, wrapped, by every operation after Close.
	ErrClosed = errors.New("store: closed")
)

// errZeroKeyspace is returned when a zero Keyspace is passed in.
var errZeroKeyspace = errors.New("zero keyspace; use NewKeyspace or MustKeyspace")

// keyspaceName is the form of a caller's keyspace name.
var keyspaceName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// Keyspace names one family of keys (profiles, peers, leases, receipts ...).
// Keys are stored as name + 0x00 + key. The zero Keyspace is invalid.
type Keyspace struct {
	name string
}

// NewKeyspace returns the keyspace called name, which must match
// ^[a-z][a-z0-9_-]{0,31}$.
func NewKeyspace(name string) (Keyspace, error) {
	if !keyspaceName.MatchString(name) {
		return Keyspace{}, fmt.Errorf("store: bad keyspace name %q: want ^[a-z][a-z0-9_-]{0,31}$", name)
	}
	return Keyspace{name: name}, nil
}

// MustKeyspace is NewKeyspace for package-level variables declared by
// callers; it panics on a bad name.
func MustKeyspace(name string) Keyspace {
	ks, err := NewKeyspace(name)
	if err != nil {
		panic(err)
	}
	return ks
}

// Name returns the keyspace's name.
func (k Keyspace) Name() string { return k.name }

// fullKey returns name + 0x00 + key in a new slice.
func (k Keyspace) fullKey(key []byte) []byte {
	fk := make([]byte, len(k.name)+1+len(key))
	copy(fk, k.name)
	copy(fk[len(k.name)+1:], key)
	return fk
}

func (k Keyspace) valid() error {
	if k.name == "" {
		return errZeroKeyspace
	}
	return nil
}

// metaKeyspace is reserved for the store itself: its name starts with a
// character NewKeyspace refuses, so no caller can reach it.
var metaKeyspace = Keyspace{name: "_meta"}

// schemaKey holds SchemaVersion, as a decimal string, in metaKeyspace.
var schemaKey = []byte("schema")

// Store is durable key-value storage split into keyspaces.
// Implementations are safe for concurrent use.
type Store interface {
	// Get returns a copy of the value under key, or ErrNotFound.
	Get(ks Keyspace, key []byte) ([]byte, error)
	// Put stores value under key, durably per the store's sync setting.
	Put(ks Keyspace, key, value []byte) error
	// PutTTL stores value under key until ttl has passed; ttl must be positive.
	PutTTL(ks Keyspace, key, value []byte, ttl time.Duration) error
	// Delete removes key; deleting an absent key is not an error.
	Delete(ks Keyspace, key []byte) error
	// Batch calls fn once and applies its writes atomically: all of them,
	// or none if fn returns an error.
	Batch(fn func(b Batch) error) error
	// Iterate calls fn for each key in ks starting with prefix, in ascending
	// order, with the keyspace prefix removed. The slices are valid only
	// during the call. An error from fn stops the iteration and is returned.
	Iterate(ks Keyspace, prefix []byte, fn func(key, value []byte) error) error
	// Close releases the store; it is safe to call twice.
	Close() error
}

// Batch collects the writes of one Store.Batch call.
type Batch interface {
	Put(ks Keyspace, key, value []byte) error
	Delete(ks Keyspace, key []byte) error
}

// batchOp is one recorded write: a put, or a delete when del is set.
type batchOp struct {
	key   []byte // full key: keyspace prefix included
	value []byte
	del   bool
}

// recorder is the Batch handed to fn: it copies each write so fn may reuse
// its buffers, and the store applies the lot in one transaction afterwards.
type recorder struct {
	ops []batchOp
}

func (r *recorder) Put(ks Keyspace, key, value []byte) error {
	if err := ks.valid(); err != nil {
		return fmt.Errorf("store: batch put %x: %w", key, err)
	}
	r.ops = append(r.ops, batchOp{key: ks.fullKey(key), value: clone(value)})
	return nil
}

func (r *recorder) Delete(ks Keyspace, key []byte) error {
	if err := ks.valid(); err != nil {
		return fmt.Errorf("store: batch delete %x: %w", key, err)
	}
	r.ops = append(r.ops, batchOp{key: ks.fullKey(key), del: true})
	return nil
}

// record runs fn against a recorder and returns its writes.
func record(fn func(b Batch) error) ([]batchOp, error) {
	r := &recorder{}
	if err := fn(r); err != nil {
		return nil, err
	}
	return r.ops, nil
}

// clone returns a copy of b that is never nil.
func clone(b []byte) []byte {
	c := make([]byte, len(b))
	copy(c, b)
	return c
}

// Codec turns values of T into bytes and back.
type Codec[T any] interface {
	Marshal(T) ([]byte, error)
	Unmarshal([]byte) (T, error)
}

// JSONCodec is a Codec that stores T as JSON.
type JSONCodec[T any] struct{}

// Marshal encodes v as JSON.
func (JSONCodec[T]) Marshal(v T) ([]byte, error) { return json.Marshal(v) }

// Unmarshal decodes JSON into a new T.
func (JSONCodec[T]) Unmarshal(b []byte) (T, error) {
	var v T
	err := json.Unmarshal(b, &v)
	return v, err
}

// Typed is a keyspace with a value codec, so callers read and write T, not
// bytes.
type Typed[T any] struct {
	s  Store
	ks Keyspace
	c  Codec[T]
}

// NewTyped returns the keyspace ks of s holding values of T encoded by c.
func NewTyped[T any](s Store, ks Keyspace, c Codec[T]) Typed[T] {
	return Typed[T]{s: s, ks: ks, c: c}
}

// Get returns the value under key, or ErrNotFound.
func (t Typed[T]) Get(key []byte) (T, error) {
	var zero T
	raw, err := t.s.Get(t.ks, key)
	if err != nil {
		return zero, err
	}
	v, err := t.c.Unmarshal(raw)
	if err != nil {
		return zero, fmt.Errorf("store: decode %s/%x: %w", t.ks.Name(), key, err)
	}
	return v, nil
}

// Put stores v under key.
func (t Typed[T]) Put(key []byte, v T) error {
	raw, err := t.c.Marshal(v)
	if err != nil {
		return fmt.Errorf("store: encode %s/%x: %w", t.ks.Name(), key, err)
	}
	return t.s.Put(t.ks, key, raw)
}

// Delete removes key.
func (t Typed[T]) Delete(key []byte) error { return t.s.Delete(t.ks, key) }

// Iterate calls fn for each key starting with prefix, in ascending order,
// with its decoded value. A value that does not decode stops the iteration
// with an error.
func (t Typed[T]) Iterate(prefix []byte, fn func(key []byte, v T) error) error {
	return t.s.Iterate(t.ks, prefix, func(key, raw []byte) error {
		v, err := t.c.Unmarshal(raw)
		if err != nil {
			return fmt.Errorf("store: decode %s/%x: %w", t.ks.Name(), key, err)
		}
		return fn(key, v)
	})
}
