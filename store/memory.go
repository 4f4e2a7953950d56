package store

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Memory is a map-based Store for tests. It honours TTLs against an
// injectable clock and is safe for concurrent use.
type Memory struct {
	now func() time.Time

	mu     sync.RWMutex
	closed bool
	spaces map[string]map[string]memEntry // keyspace name → key → entry
}

type memEntry struct {
	value     []byte
	expiresAt time.Time // zero: never
}

func (e memEntry) live(now time.Time) bool {
	return e.expiresAt.IsZero() || now.Before(e.expiresAt)
}

// MemoryOption configures NewMemory.
type MemoryOption func(*Memory)

// WithClock makes the store read the time from now, for TTL expiry.
// The default is time.Now.
func WithClock(now func() time.Time) MemoryOption {
	return func(m *Memory) { m.now = now }
}

// NewMemory returns an empty in-memory Store.
func NewMemory(opts ...MemoryOption) *Memory {
	m := &Memory{now: time.Now, spaces: make(map[string]map[string]memEntry)}
	for _, o := range opts {
		o(m)
	}
	return m
}

var _ Store = (*Memory)(nil)

// Get implements Store.
func (m *Memory) Get(ks Keyspace, key []byte) ([]byte, error) {
	if err := ks.valid(); err != nil {
		return nil, fmt.Errorf("store: get %x: %w", key, err)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return nil, fmt.Errorf("store: get %s/%x: %w", ks.Name(), key, ErrClosed)
	}
	e, ok := m.spaces[ks.name][string(key)]
	if !ok || !e.live(m.now()) {
		return nil, ErrNotFound
	}
	return clone(e.value), nil
}

// Put implements Store.
func (m *Memory) Put(ks Keyspace, key, value []byte) error {
	if err := m.put(ks, key, value, time.Time{}); err != nil {
		return fmt.Errorf("store: put %s/%x: %w", ks.Name(), key, err)
	}
	return nil
}

// PutTTL implements Store.
func (m *Memory) PutTTL(ks Keyspace, key, value []byte, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("store: put %s/%x: ttl %v is not positive", ks.Name(), key, ttl)
	}
	if err := m.put(ks, key, value, m.now().Add(ttl)); err != nil {
		return fmt.Errorf("store: put %s/%x: %w", ks.Name(), key, err)
	}
	return nil
}

func (m *Memory) put(ks Keyspace, key, value []byte, expiresAt time.Time) error {
	if err := ks.valid(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.set(ks.name, string(key), memEntry{value: clone(value), expiresAt: expiresAt})
	return nil
}

// set stores e; the caller holds m.mu for writing.
func (m *Memory) set(space, key string, e memEntry) {
	sp := m.spaces[space]
	if sp == nil {
		sp = make(map[string]memEntry)
		m.spaces[space] = sp
	}
	sp[key] = e
}

// Delete implements Store.
func (m *Memory) Delete(ks Keyspace, key []byte) error {
	if err := ks.valid(); err != nil {
		return fmt.Errorf("store: delete %x: %w", key, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("store: delete %s/%x: %w", ks.Name(), key, ErrClosed)
	}
	delete(m.spaces[ks.name], string(key))
	return nil
}

// Batch implements Store.
func (m *Memory) Batch(fn func(b Batch) error) error {
	ops, err := record(fn)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("store: batch of %d writes: %w", len(ops), ErrClosed)
	}
	for _, op := range ops {
		// op.key is name 0x00 key; names never contain 0x00.
		space, key, _ := strings.Cut(string(op.key), "\x00")
		if op.del {
			delete(m.spaces[space], key)
			continue
		}
		m.set(space, key, memEntry{value: op.value})
	}
	return nil
}

// Iterate implements Store. It copies the matching entries under the lock
// and calls fn without it, so fn may use the store.
func (m *Memory) Iterate(ks Keyspace, prefix []byte, fn func(key, value []byte) error) error {
	if err := ks.valid(); err != nil {
		return fmt.Errorf("store: iterate %x: %w", prefix, err)
	}
	type kv struct{ key, value []byte }
	var hits []kv
	m.mu.RLock()
	if m.closed {
		m.mu.RUnlock()
		return fmt.Errorf("store: iterate %s/%x: %w", ks.Name(), prefix, ErrClosed)
	}
	now := m.now()
	for k, e := range m.spaces[ks.name] {
		if strings.HasPrefix(k, string(prefix)) && e.live(now) {
			hits = append(hits, kv{key: []byte(k), value: clone(e.value)})
		}
	}
	m.mu.RUnlock()

	slices.SortFunc(hits, func(a, b kv) int { return bytes.Compare(a.key, b.key) })
	for _, h := range hits {
		if err := fn(h.key, h.value); err != nil {
			return err
		}
	}
	return nil
}

// Close implements Store. Later calls return nil.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.spaces = nil
	return nil
}
