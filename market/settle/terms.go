package settle

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/p2p"
)

// Terms are what metering needs of a lease and its job.
type Terms struct {
	LeaseID     market.ID
	JobID       []byte // 16 bytes
	Renter      peer.ID
	Supplier    peer.ID
	GPUs        int
	PriceMicros int64 // per GPU-hour
	Start, End  time.Time
	Interval    time.Duration // how often the supplier issues a receipt
	CreditLimit int64         // micros the supplier runs ahead of payment
}

// TermsOf gives the metering terms of a validated lease for the job
// jobID, with the lease's defaults filled in (market.Lease.Terms). A
// lease that binds no job spec (rented with no job) takes its jobs one
// after another on one meter: its terms name LeaseJobID, whatever job
// runs (docs/PROTOCOL.md §15.5).
func TermsOf(l *market.Lease, jobID []byte) Terms {
	lt := l.Terms()
	if len(lt.JobSpecHash) == 0 {
		jobID = LeaseJobID(l.ID)
	}
	return Terms{
		LeaseID:     l.ID,
		JobID:       jobID,
		Renter:      l.Renter,
		Supplier:    l.Supplier,
		GPUs:        int(l.Count),
		PriceMicros: l.PriceMicros,
		Start:       l.Start(),
		End:         l.End(),
		Interval:    lt.ReceiptInterval,
		CreditLimit: int64(lt.CreditLimit),
	}
}

// check checks the terms' fields.
func (t Terms) check() error {
	switch {
	case t.LeaseID == market.ID{}:
		return p2p.Errf(p2p.ErrMalformed, "terms: zero lease ID")
	case len(t.JobID) != JobIDBytes:
		return p2p.Errf(p2p.ErrMalformed, "terms: job ID is %d bytes, want %d", len(t.JobID), JobIDBytes)
	case t.Renter == "" || t.Supplier == "" || t.Renter == t.Supplier:
		return p2p.Errf(p2p.ErrMalformed, "terms: renter %q and supplier %q must be two peers", t.Renter, t.Supplier)
	case t.GPUs <= 0 || t.GPUs > market.MaxCount:
		return p2p.Errf(p2p.ErrMalformed, "terms: %d gpus not in 1..%d", t.GPUs, market.MaxCount)
	case t.PriceMicros <= 0 || t.PriceMicros > market.MaxPriceMicros:
		return p2p.Errf(p2p.ErrMalformed, "terms: price %d micros not in 1..%d", t.PriceMicros, int64(market.MaxPriceMicros))
	case t.Start.UnixMilli() <= 0 || !t.End.After(t.Start):
		return p2p.Errf(p2p.ErrMalformed, "terms: lease from %s to %s", t.Start, t.End)
	case t.Interval <= 0:
		return p2p.Errf(p2p.ErrMalformed, "terms: receipt interval %s", t.Interval)
	case t.CreditLimit < 0:
		return p2p.Errf(p2p.ErrMalformed, "terms: credit limit %d micros", t.CreditLimit)
	}
	return nil
}

// leaseMeta is what a ledger keeps of a lease it meters or pays: its role
// and the terms, so an audit needs nothing else.
type leaseMeta struct {
	Role        market.Role `json:"role"`
	JobID       string      `json:"job_id"` // hex
	Renter      string      `json:"renter"`
	Supplier    string      `json:"supplier"`
	GPUs        int         `json:"gpus"`
	PriceMicros int64       `json:"price_micros"`
	StartMs     int64       `json:"start_ms"`
	EndMs       int64       `json:"end_ms"`
	IntervalMs  int64       `json:"interval_ms"`
	CreditLimit int64       `json:"credit_limit_micros"`
}

func metaOf(role market.Role, t Terms) leaseMeta {
	return leaseMeta{
		Role:        role,
		JobID:       hex.EncodeToString(t.JobID),
		Renter:      t.Renter.String(),
		Supplier:    t.Supplier.String(),
		GPUs:        t.GPUs,
		PriceMicros: t.PriceMicros,
		StartMs:     t.Start.UnixMilli(),
		EndMs:       t.End.UnixMilli(),
		IntervalMs:  t.Interval.Milliseconds(),
		CreditLimit: t.CreditLimit,
	}
}

// terms are the Terms m keeps for lease.
func (m leaseMeta) terms(lease market.ID) (Terms, error) {
	job, err := hex.DecodeString(m.JobID)
	if err != nil {
		return Terms{}, fmt.Errorf("job id: %w", err)
	}
	renter, err := peer.Decode(m.Renter)
	if err != nil {
		return Terms{}, fmt.Errorf("renter: %w", err)
	}
	supplier, err := peer.Decode(m.Supplier)
	if err != nil {
		return Terms{}, fmt.Errorf("supplier: %w", err)
	}
	return Terms{
		LeaseID:     lease,
		JobID:       job,
		Renter:      renter,
		Supplier:    supplier,
		GPUs:        m.GPUs,
		PriceMicros: m.PriceMicros,
		Start:       time.UnixMilli(m.StartMs),
		End:         time.UnixMilli(m.EndMs),
		Interval:    time.Duration(m.IntervalMs) * time.Millisecond,
		CreditLimit: m.CreditLimit,
	}, nil
}

// LeaseJobID is the job ID that the receipts of a lease binding no job
// spec carry: the first JobIDBytes of SHA-256("gpumesh-lease-jobs" ||
// lease ID), the same for every job on it.
func LeaseJobID(lease market.ID) []byte {
	h := sha256.Sum256(append([]byte("gpumesh-lease-jobs"), lease[:]...))
	return h[:JobIDBytes]
}
