package store

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// conflictRetries is how many times a write is retried on badger.ErrConflict.
const conflictRetries = 5

// BadgerOption configures OpenBadger.
type BadgerOption func(*badgerConfig)

type badgerConfig struct {
	inMemory   bool
	syncWrites bool
	logger     *slog.Logger
	gcInterval time.Duration

	// skipSchemaCheck opens a store whatever its schema version. Tests only.
	skipSchemaCheck bool
}

// defaultBadgerConfig holds every default of OpenBadger.
func defaultBadgerConfig() badgerConfig {
	return badgerConfig{
		syncWrites: true,
		logger:     slog.Default(),
		gcInterval: 10 * time.Minute,
	}
}

// WithInMemory keeps all data in memory; the dir passed to OpenBadger is
// ignored and nothing survives Close.
func WithInMemory() BadgerOption {
	return func(c *badgerConfig) { c.inMemory = true }
}

// WithSyncWrites sets whether a write is synced to disk before it returns.
// The default, true, means a write acknowledged by Put has been synced.
// With false, acknowledged writes survive a process crash but not an OS
// crash or power loss.
func WithSyncWrites(sync bool) BadgerOption {
	return func(c *badgerConfig) { c.syncWrites = sync }
}

// WithLogger sends Badger's logs to l: errors and warnings at their own
// levels, Badger's info chatter at Debug. The default is slog.Default().
func WithLogger(l *slog.Logger) BadgerOption {
	return func(c *badgerConfig) {
		if l != nil {
			c.logger = l
		}
	}
}

// WithGCInterval sets how often the value-log garbage collector runs.
// The default is 10 minutes; zero or less turns it off.
func WithGCInterval(d time.Duration) BadgerOption {
	return func(c *badgerConfig) { c.gcInterval = d }
}

// options returns Badger's options for dir, tuned for a small daemon.
func (c *badgerConfig) options(dir string) badger.Options {
	o := badger.DefaultOptions(dir)
	if c.inMemory {
		o = badger.DefaultOptions("").WithInMemory(true)
	}
	return o.
		WithSyncWrites(c.syncWrites).
		WithLogger(slogLogger{c.logger}).
		WithMemTableSize(8 << 20).
		WithNumMemtables(2).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(4).
		WithBlockCacheSize(16 << 20).
		WithIndexCacheSize(8 << 20).
		WithNumCompactors(0). // the store's compactor runs them (compact.go)
		WithValueLogFileSize(64 << 20)
}

// slogLogger adapts an slog.Logger to badger.Logger.
type slogLogger struct{ l *slog.Logger }

func (s slogLogger) Errorf(f string, v ...any)   { s.l.Error(badgerMsg(f, v)) }
func (s slogLogger) Warningf(f string, v ...any) { s.l.Warn(badgerMsg(f, v)) }
func (s slogLogger) Infof(f string, v ...any)    { s.l.Debug(badgerMsg(f, v)) }
func (s slogLogger) Debugf(f string, v ...any)   { s.l.Debug(badgerMsg(f, v)) }

func badgerMsg(f string, v []any) string {
	return "badger: " + strings.TrimSpace(fmt.Sprintf(f, v...))
}

// Badger is a Store on a Badger database.
type Badger struct {
	db       *badger.DB
	dir      string
	inMemory bool
	log      *slog.Logger

	gate gate

	compact   *compactor
	stopGC    chan struct{}
	gcDone    sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

var _ Store = (*Badger)(nil)

// OpenBadger opens, or creates, the store in dir.
//
// A directory written by another schema version gives an error wrapping
// ErrSchema. A directory that is not a gpumesh store, is damaged, or is a
// regular file gives an error naming it and saying what to do; nothing in it
// is overwritten or deleted.
func OpenBadger(dir string, opts ...BadgerOption) (*Badger, error) {
	cfg := defaultBadgerConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if !cfg.inMemory {
		if err := checkDir(dir); err != nil {
			return nil, damaged(dir, err)
		}
	}
	db, err := badger.Open(cfg.options(dir))
	if err != nil {
		if strings.Contains(err.Error(), "Cannot acquire directory lock") {
			return nil, fmt.Errorf("store: %s is in use by another process; stop the other gpumesh daemon or pass another --data: %w", dir, err)
		}
		return nil, damaged(dir, err)
	}
	b := &Badger{
		db:       db,
		dir:      dir,
		inMemory: cfg.inMemory,
		log:      cfg.logger,
		stopGC:   make(chan struct{}),
	}
	b.gate.init()
	b.compact = startCompactor(db, cfg.logger)
	if !cfg.skipSchemaCheck {
		if err := b.checkSchema(); err != nil {
			b.compact.close()
			_ = db.Close()
			return nil, err
		}
	}
	if cfg.gcInterval > 0 && !cfg.inMemory {
		b.gcDone.Add(1)
		go b.gcLoop(cfg.gcInterval)
	}
	return b, nil
}

// damaged says that dir cannot be used and what to do about it.
func damaged(dir string, err error) error {
	return fmt.Errorf("store: %s is not a gpumesh store or is damaged; move it aside or pass another --data: %w", dir, err)
}

// checkDir refuses a path that is not a directory, and a non-empty
// directory without a Badger MANIFEST, before Badger writes anything there.
func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil // Badger creates it.
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return errors.New("it is a file, not a directory")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == badger.ManifestFilename {
			return nil
		}
	}
	for _, e := range entries {
		// A LOCK file alone is left by a process that died while opening.
		if e.Name() != "LOCK" {
			return fmt.Errorf("no %s among its %d entries", badger.ManifestFilename, len(entries))
		}
	}
	return nil
}

// checkSchema writes SchemaVersion into a fresh store and refuses a store
// written with another one.
func (b *Badger) checkSchema() error {
	want := strconv.Itoa(SchemaVersion)
	got, err := b.Get(metaKeyspace, schemaKey)
	switch {
	case err == nil:
		if string(got) != want {
			return fmt.Errorf("store: %s has schema version %q, this build reads %s; use a gpumesh release that reads it or pass another --data: %w", b.dir, got, want, ErrSchema)
		}
		return nil
	case !errors.Is(err, ErrNotFound):
		return damaged(b.dir, err)
	}
	empty := true
	err = b.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{})
		defer it.Close()
		it.Rewind()
		empty = !it.Valid()
		return nil
	})
	if err != nil {
		return damaged(b.dir, err)
	}
	if !empty {
		return fmt.Errorf("store: %s holds data but no schema version; it is not a gpumesh store, move it aside or pass another --data: %w", b.dir, ErrSchema)
	}
	if err := b.Put(metaKeyspace, schemaKey, []byte(want)); err != nil {
		return fmt.Errorf("store: write schema version: %w", err)
	}
	return nil
}

// runValueLogGC runs one value-log GC pass. It writes too (the entries it
// keeps go back into the LSM tree), so the compactor counts it as a write.
func (b *Badger) runValueLogGC() error {
	defer b.compact.writing()()
	return b.db.RunValueLogGC(0.5)
}

// gcLoop runs value-log GC every interval until Close.
func (b *Badger) gcLoop(interval time.Duration) {
	defer b.gcDone.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-b.stopGC:
			return
		case <-t.C:
		}
		for n := 0; ; n++ {
			select {
			case <-b.stopGC:
				return
			default:
			}
			err := b.runValueLogGC()
			if err == nil {
				continue
			}
			if !errors.Is(err, badger.ErrNoRewrite) && !errors.Is(err, badger.ErrRejected) {
				b.log.Warn("store: value log gc", "dir", b.dir, "err", err)
			} else if n > 0 {
				b.log.Debug("store: value log gc", "dir", b.dir, "rewrites", n)
			}
			break
		}
	}
}

// update runs fn in a read-write transaction, retrying on ErrConflict.
func (b *Badger) update(fn func(txn *badger.Txn) error) error {
	if err := b.gate.enter(); err != nil {
		return err
	}
	defer b.gate.leave()
	defer b.compact.writing()()
	var err error
	for range conflictRetries {
		err = b.db.Update(fn)
		if !errors.Is(err, badger.ErrConflict) {
			break
		}
	}
	return err
}

// Get implements Store.
func (b *Badger) Get(ks Keyspace, key []byte) ([]byte, error) {
	if err := ks.valid(); err != nil {
		return nil, fmt.Errorf("store: get %x: %w", key, err)
	}
	if err := b.gate.enter(); err != nil {
		return nil, fmt.Errorf("store: get %s/%x: %w", ks.Name(), key, err)
	}
	defer b.gate.leave()
	var v []byte
	err := b.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(ks.fullKey(key))
		if err != nil {
			return err
		}
		v, err = item.ValueCopy(nil)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: get %s/%x: %w", ks.Name(), key, err)
	}
	if v == nil {
		v = []byte{}
	}
	return v, nil
}

// Put implements Store.
func (b *Badger) Put(ks Keyspace, key, value []byte) error {
	if err := ks.valid(); err != nil {
		return fmt.Errorf("store: put %x: %w", key, err)
	}
	fk := ks.fullKey(key)
	err := b.update(func(txn *badger.Txn) error { return txn.Set(fk, value) })
	if err != nil {
		return fmt.Errorf("store: put %s/%x: %w", ks.Name(), key, err)
	}
	return nil
}

// PutTTL implements Store. Badger keeps expiry times in whole seconds, so
// the key is rounded up: it lives at least ttl and less than ttl + 1s.
func (b *Badger) PutTTL(ks Keyspace, key, value []byte, ttl time.Duration) error {
	if err := ks.valid(); err != nil {
		return fmt.Errorf("store: put %x: %w", key, err)
	}
	if ttl <= 0 {
		return fmt.Errorf("store: put %s/%x: ttl %v is not positive", ks.Name(), key, ttl)
	}
	e := badger.NewEntry(ks.fullKey(key), value)
	e.ExpiresAt = uint64(time.Now().Add(ttl).Unix()) + 1
	err := b.update(func(txn *badger.Txn) error { return txn.SetEntry(e) })
	if err != nil {
		return fmt.Errorf("store: put %s/%x: %w", ks.Name(), key, err)
	}
	return nil
}

// Delete implements Store.
func (b *Badger) Delete(ks Keyspace, key []byte) error {
	if err := ks.valid(); err != nil {
		return fmt.Errorf("store: delete %x: %w", key, err)
	}
	fk := ks.fullKey(key)
	if err := b.update(func(txn *badger.Txn) error { return txn.Delete(fk) }); err != nil {
		return fmt.Errorf("store: delete %s/%x: %w", ks.Name(), key, err)
	}
	return nil
}

// Batch implements Store. fn runs once, before the transaction starts; its
// writes are then committed in one transaction. A batch larger than Badger's
// transaction limit (about 1 MiB with our memtables) fails whole.
func (b *Badger) Batch(fn func(b Batch) error) error {
	ops, err := record(fn)
	if err != nil {
		return err
	}
	err = b.update(func(txn *badger.Txn) error {
		for _, op := range ops {
			var err error
			if op.del {
				err = txn.Delete(op.key)
			} else {
				err = txn.Set(op.key, op.value)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: batch of %d writes: %w", len(ops), err)
	}
	return nil
}

// Iterate implements Store.
func (b *Badger) Iterate(ks Keyspace, prefix []byte, fn func(key, value []byte) error) error {
	if err := ks.valid(); err != nil {
		return fmt.Errorf("store: iterate %x: %w", prefix, err)
	}
	if err := b.gate.enter(); err != nil {
		return fmt.Errorf("store: iterate %s/%x: %w", ks.Name(), prefix, err)
	}
	defer b.gate.leave()
	nameLen := len(ks.name) + 1
	full := ks.fullKey(prefix)
	var fnErr error
	err := b.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: full})
		defer it.Close()
		for it.Seek(full); it.ValidForPrefix(full); it.Next() {
			item := it.Item()
			key := item.Key()[nameLen:]
			err := item.Value(func(v []byte) error {
				fnErr = fn(key, v)
				return fnErr
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("store: iterate %s/%x: %w", ks.Name(), prefix, err)
	}
	return nil
}

// Size is the size on disk of the LSM tree's tables (*.sst) and of the
// value log (*.vlog) now, counted as Badger counts them (Badger's own
// DB.Size is refreshed once a minute); 0, 0 in memory. A value log file
// being written is counted at the size Badger mapped for it.
func (b *Badger) Size() (lsm, vlog int64) {
	if b.inMemory {
		return 0, 0
	}
	entries, err := os.ReadDir(b.dir)
	if err != nil {
		return 0, 0
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue // removed by a compaction meanwhile
		}
		switch filepath.Ext(e.Name()) {
		case ".sst":
			lsm += info.Size()
		case ".vlog":
			vlog += info.Size()
		}
	}
	return lsm, vlog
}

// Close waits for running operations, stops the GC loop and closes the
// database. Later calls return the first call's result. Close must not be
// called from inside an Iterate callback.
func (b *Badger) Close() error {
	b.closeOnce.Do(func() {
		b.gate.close()
		close(b.stopGC)
		b.gcDone.Wait()
		b.compact.close()
		if err := b.db.Close(); err != nil {
			b.closeErr = fmt.Errorf("store: close %s: %w", b.dir, err)
		}
	})
	return b.closeErr
}

// gate lets operations run until close, which waits for those running.
// Unlike a sync.RWMutex, an operation started from inside another one (a
// Put from an Iterate callback) never blocks behind a waiting close.
type gate struct {
	mu     sync.Mutex
	idle   *sync.Cond
	n      int
	closed bool
}

func (g *gate) init() { g.idle = sync.NewCond(&g.mu) }

func (g *gate) enter() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return ErrClosed
	}
	g.n++
	return nil
}

func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.n == 0 {
		g.idle.Broadcast()
	}
}

func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	for g.n > 0 {
		g.idle.Wait()
	}
}
