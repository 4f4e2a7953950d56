package store

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// compactCheck is the most often the compactor looks at Badger's levels,
// and how often it looks while writes are in flight.
const compactCheck = time.Second

// compactor runs Badger's compactions for the store.
//
// Badger's own compactors (Options.NumCompactors, at least two) each wake
// every 50 ms to look for work, whether or not anything was written: 40
// wake-ups a second, a quarter of an idle node's CPU on a small machine,
// and the same again for every node process on it. The store opens Badger
// with none (which Badger documents as turning compaction off) and
// compacts from here instead, only around writes: once a write starts or
// ends it looks at the levels, at most every compactCheck, and keeps
// looking every compactCheck while any write is in flight (one may be
// waiting for level 0 to drain). When level 0 holds NumLevelZeroTables
// tables or another level is over its target it compacts the tree with
// DB.Flatten. An idle store never wakes.
//
// The cost: Flatten is Badger's only public way to compact, and it moves
// every level down into one, where Badger's compactors would move only
// the levels over their targets. Each compaction therefore rewrites the
// bottom level's tables that overlap what comes down, up to the whole
// store, once per NumLevelZeroTables memtables written (16 MiB): cheap
// for a node's store of receipts, leases and attestations while it is
// small, and a write amplification that grows with the store's size. A
// store of many GiB would want Badger's own compactors back, or a
// targeted compaction if Badger exposes one.
type compactor struct {
	db       *badger.DB
	log      *slog.Logger
	l0Tables int

	inflight atomic.Int64
	wake     chan struct{}
	stop     chan struct{}
	done     sync.WaitGroup
}

func startCompactor(db *badger.DB, log *slog.Logger) *compactor {
	c := &compactor{
		db:       db,
		log:      log,
		l0Tables: db.Opts().NumLevelZeroTables,
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
	}
	c.done.Add(1)
	go c.run()
	return c
}

// writing marks a write in flight until the returned func runs.
func (c *compactor) writing() (done func()) {
	c.inflight.Add(1)
	c.poke()
	return func() {
		c.inflight.Add(-1)
		c.poke()
	}
}

func (c *compactor) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *compactor) run() {
	defer c.done.Done()
	for {
		select {
		case <-c.stop:
			return
		case <-c.wake:
		}
		for {
			c.compactIfDue()
			t := time.NewTimer(compactCheck)
			select {
			case <-c.stop:
				t.Stop()
				return
			case <-t.C:
			}
			if c.inflight.Load() == 0 {
				break // a write since the check left a token in wake
			}
		}
	}
}

// due reports whether the tree needs a compaction, as Badger's compactors
// would judge it.
func (c *compactor) due() bool {
	for _, l := range c.db.Levels() {
		if l.Level == 0 && l.NumTables >= c.l0Tables || l.Level > 0 && l.Score > 1 {
			return true
		}
	}
	return false
}

func (c *compactor) compactIfDue() {
	if !c.due() {
		return
	}
	start := time.Now()
	if err := c.db.Flatten(1); err != nil {
		c.log.Warn("store: compaction", "err", err)
		return
	}
	c.log.Debug("store: compacted", "took", time.Since(start))
}

// close stops the compactor and waits for a compaction under way.
func (c *compactor) close() {
	close(c.stop)
	c.done.Wait()
}
