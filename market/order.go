package market

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpumesh/gpumesh/market/pb"
)

// ID names a signed record: the SHA-256 of its envelope bytes. Orders,
// quotes and leases (a lease's ID is its proposal's) are named this way.
type ID [32]byte

// IDOf is the ID of a signed envelope.
func IDOf(envelope []byte) ID { return sha256.Sum256(envelope) }

// String is the full lowercase hex form.
func (id ID) String() string { return hex.EncodeToString(id[:]) }

// Short is the first 12 hex digits, for tables.
func (id ID) Short() string { return id.String()[:12] }

// ParseID parses the hex form made by String.
func ParseID(s string) (ID, error) {
	var id ID
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(id) {
		return id, &FilterError{Term: s, Reason: "not a 64-digit hex ID"}
	}
	copy(id[:], b)
	return id, nil
}

// Order is what the orders topic carries (OrderValidator.Check): an
// *Ask, a *Bid or a *Cancel, and nothing else.
type Order interface{ order() }

func (*Ask) order()    {}
func (*Bid) order()    {}
func (*Cancel) order() {}

// Ask is a validated ask.
type Ask struct {
	*pb.Ask
	ID       ID
	Supplier peer.ID
	Addrs    []ma.Multiaddr
	Raw      []byte // the signed envelope
	// Received is when a Book first took the ask (zero until then), by
	// the book's clock: with Created, how long gossip took to bring it.
	Received time.Time
}

// Created and Expires are the ask's timestamps.
func (a *Ask) Created() time.Time { return time.UnixMilli(a.CreatedMs) }
func (a *Ask) Expires() time.Time { return time.UnixMilli(a.ExpiresMs) }

// Bid is a validated bid.
type Bid struct {
	*pb.Bid
	ID     ID
	Renter peer.ID
	Filter Filter // parsed from Bid.Filter
	Addrs  []ma.Multiaddr
	Raw    []byte
}

// Created and Expires are the bid's timestamps.
func (b *Bid) Created() time.Time { return time.UnixMilli(b.CreatedMs) }
func (b *Bid) Expires() time.Time { return time.UnixMilli(b.ExpiresMs) }

// Cancel is a validated cancellation.
type Cancel struct {
	*pb.Cancel
	ID      ID
	Signer  peer.ID
	OrderID ID
	Raw     []byte
}

// Quote is a validated quote (or decline).
type Quote struct {
	*pb.Quote
	ID       ID
	Supplier peer.ID
	Renter   peer.ID
	BidID    ID
	Raw      []byte
}

// Expires is when the quote lapses.
func (q *Quote) Expires() time.Time { return time.UnixMilli(q.ExpiresMs) }

// Proposal is a validated lease proposal, with the quote or ask it accepts.
type Proposal struct {
	*pb.LeaseProposal
	ID       ID // also the lease ID
	Renter   peer.ID
	Supplier peer.ID
	Quote    *Quote // set when it accepts a quote
	Ask      *Ask   // set when it takes an ask at its price
	Raw      []byte
}

// Lease is a validated, countersigned lease: both signatures checked.
type Lease struct {
	*pb.Lease
	ID       ID
	Supplier peer.ID
	Renter   peer.ID
	Proposal *Proposal
	Raw      []byte
}

// Start and End bound the lease.
func (l *Lease) Start() time.Time { return time.UnixMilli(l.StartMs) }
func (l *Lease) End() time.Time   { return time.UnixMilli(l.EndMs) }

// TradePrint is a validated trade print and the lease it reports.
type TradePrint struct {
	*pb.TradePrint
	ID       ID
	Supplier peer.ID
	Lease    *Lease
	Raw      []byte
}
