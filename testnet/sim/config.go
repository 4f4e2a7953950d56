package sim

import (
	"cmp"
	"io"
	"log/slog"
	"time"
)

// Config sizes and seeds one simulation. The zero value of every field
// takes the default that fill sets.
type Config struct {
	// Nodes is how many nodes run (100).
	Nodes int
	// Seed seeds the order flow (1): the same seed and Nodes give the
	// same suppliers, requests and departures.
	Seed uint64
	// Slots is how many slots of order flow run (30); Slot is the
	// simulated length of one (2 min), RealSlot the real time over which
	// one slot's arrivals are spread (2 s). A slot must hold its renting
	// (Settle, RealSlot and a rent's 30 s) with the market's shortest
	// lease (1 min) to spare: a one-slot lease is sized to end on the
	// next slot's boundary (Sim.Run).
	Slots    int
	Slot     time.Duration
	RealSlot time.Duration
	// Settle is the real time gossip is given after the clock jumps to
	// the next slot, before its renters bid (1 s).
	Settle time.Duration
	// SupplierShare, ImpostorShare: the shares of nodes that sell honest
	// GPUs (0.3) and that claim GPUs they do not have (0.04, at least
	// one). The other nodes rent.
	SupplierShare, ImpostorShare float64
	// LeaveShare is the share of honest suppliers that leave mid-run
	// (0.1, at least one), half of them without withdrawing their asks.
	LeaveShare float64
	// Load is the offered load: mean GPUs asked for at once over the
	// honest suppliers' GPUs (0.9).
	Load float64
	// Warm is the share of the honest GPUs already leased when the first
	// slot begins (0: none, a cold start), for remaining lengths drawn
	// as in a market in its steady state: a short run then measures
	// allocation under load, not a market filling up.
	Warm float64
	// Patience is how many slots after its arrival an unfilled request
	// tries again (2).
	Patience int
	// Degree is how many random peers each node dials at start (5, so
	// about 10 connections each before renting adds more).
	Degree int
	// Wait bounds a renter's collection of quotes (1 s).
	Wait time.Duration
	// Log receives the nodes' logs; none when nil.
	Log *slog.Logger
}

func (c Config) fill() Config {
	c.Nodes = cmp.Or(c.Nodes, 100)
	c.Seed = cmp.Or(c.Seed, 1)
	c.Slots = cmp.Or(c.Slots, 30)
	c.Slot = cmp.Or(c.Slot, 2*time.Minute)
	c.RealSlot = cmp.Or(c.RealSlot, 2*time.Second)
	c.Settle = cmp.Or(c.Settle, time.Second)
	c.SupplierShare = cmp.Or(c.SupplierShare, 0.3)
	c.ImpostorShare = cmp.Or(c.ImpostorShare, 0.04)
	c.LeaveShare = cmp.Or(c.LeaveShare, 0.1)
	c.Load = cmp.Or(c.Load, 0.9)
	c.Patience = cmp.Or(c.Patience, 2)
	c.Degree = cmp.Or(c.Degree, 5)
	c.Wait = cmp.Or(c.Wait, time.Second)
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}
