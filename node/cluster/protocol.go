package cluster

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/cluster/pb"
	"github.com/gpumesh/gpumesh/p2p"
)

// The cluster protocol and its limits (docs/PROTOCOL.md §41).
const (
	// Protocol carries one TCP connection from one member's job to a port
	// of another member's job.
	Protocol protocol.ID = p2p.ClusterProtocol
	// Version is ClusterOpen.version.
	Version = 1
	// MaxNodes bounds the members of a cluster.
	MaxNodes = 64
	// MaxAddrs bounds the addresses a manifest gives per member.
	MaxAddrs = 8
	// MaxOpenSize bounds an Open: everything a supplier reads from a
	// stream before it has checked the membership.
	MaxOpenSize = 128
	// MaxReplySize bounds a Reply.
	MaxReplySize = 1024
	// OpenTimeout bounds the read of an Open and of the Reply (default).
	OpenTimeout = 10 * time.Second
	// DialTimeout bounds the connect to the own job's port (default).
	DialTimeout = 5 * time.Second
	// LinkWait is how long a connection waits for a direct link to the
	// target's supplier (default).
	LinkWait = 30 * time.Second
	// PerAttempt and PerPeer bound the admitted streams of one
	// membership, and of one remote peer in it (defaults).
	PerAttempt = 1024
	PerPeer    = 256
)

// Prefix is the cluster network inside every member's job: rank r has
// Addr(r) on the job's cluster interface.
var Prefix = netip.MustParsePrefix("100.64.0.0/24")

// Addr is rank's cluster address, 100.64.0.(rank+1).
func Addr(rank int) netip.Addr {
	return netip.AddrFrom4([4]byte{100, 64, 0, byte(rank + 1)})
}

// Hostname is rank's host name on every member, "rank<r>".
func Hostname(rank int) string { return "rank" + strconv.Itoa(rank) }

// RankOf is the rank whose cluster address a is, for a cluster of n
// members; false when a is no member's address.
func RankOf(a netip.Addr, n int) (int, bool) {
	a = a.Unmap()
	if !Prefix.Contains(a) {
		return 0, false
	}
	r := int(a.As4()[3]) - 1
	if r < 0 || r >= n {
		return 0, false
	}
	return r, true
}

// Refusal codes (ClusterReply.refused).
const (
	// RefusedRelayed: the stream came over a limited (relayed)
	// connection; cluster streams run on direct ones only.
	RefusedRelayed = "relayed"
	// RefusedMalformed: the Open did not decode or a field is out of range.
	RefusedMalformed = "malformed"
	// RefusedVersion: an Open version this supplier does not speak.
	RefusedVersion = "version"
	// RefusedNoMember: no membership here has the lease and lists the
	// stream's peer as the supplier of from_rank (another rank than the
	// own). One code for every mismatch, so that nothing leaks.
	RefusedNoMember = "no-member"
	// RefusedStale: the membership runs another cluster attempt.
	RefusedStale = "stale"
	// RefusedNotRunning: the own job is not running (starting, stopping,
	// ended).
	RefusedNotRunning = "not-running"
	// RefusedUnpaid: the own job is halted until the renter pays.
	RefusedUnpaid = "unpaid"
	// RefusedBusy: too many streams to this attempt, or from this peer.
	RefusedBusy = "busy"
	// RefusedUnreachable: nothing accepted the connection on the port of
	// the own job's cluster address.
	RefusedUnreachable = "unreachable"
)

// Refusal is a supplier's refusal of an Open, as either side sees it.
type Refusal = p2p.Refusal

// refusalOf names this protocol in its refusals.
const refusalOf = "cluster stream"

// Refuse makes a Refusal.
func Refuse(code, format string, args ...any) *Refusal {
	return p2p.Refuse(refusalOf, code, format, args...)
}

// IsRefusal reports whether err is a supplier's refusal of this protocol
// with one of codes (any code when none is given).
func IsRefusal(err error, codes ...string) bool {
	return p2p.IsRefusal(err, refusalOf, codes...)
}

// Request is a checked Open.
type Request struct {
	Lease    market.ID
	Attempt  uint32
	FromRank int
	Port     uint16
}

// CheckOpen checks a decoded Open, in order: the version, the lease ID's
// length, from_rank's range, the port's range. Errors wrap
// p2p.ErrUnsupported or p2p.ErrMalformed.
func CheckOpen(m *pb.ClusterOpen) (Request, error) {
	var r Request
	switch {
	case m.Version != Version:
		return r, p2p.Errf(p2p.ErrUnsupported, "cluster open version %d, want %d", m.Version, Version)
	case len(m.LeaseId) != len(r.Lease):
		return r, p2p.Errf(p2p.ErrMalformed, "lease_id is %d bytes, want %d", len(m.LeaseId), len(r.Lease))
	case m.FromRank >= MaxNodes:
		return r, p2p.Errf(p2p.ErrMalformed, "from_rank %d outside 0..%d", m.FromRank, MaxNodes-1)
	case m.Port == 0 || m.Port > 65535:
		return r, p2p.Errf(p2p.ErrMalformed, "port %d outside 1..65535", m.Port)
	}
	copy(r.Lease[:], m.LeaseId)
	r.Attempt, r.FromRank, r.Port = m.Attempt, int(m.FromRank), uint16(m.Port)
	return r, nil
}

// Member is one member of a cluster attempt, as the renter leased it.
type Member struct {
	Rank     int
	Supplier peer.ID
	Lease    market.ID
	// Addrs are where the other members dial the supplier (at most
	// MaxAddrs).
	Addrs []ma.Multiaddr
}

// Manifest is a cluster attempt as the renter gave it to every member.
type Manifest struct {
	Job     string // hex job ID
	Attempt uint32
	Self    int      // this member's rank
	Members []Member // in rank order, distinct suppliers
}

// Check checks m as the member self received it: 1..MaxNodes members,
// ranks 0..n-1 in order, distinct valid suppliers and leases, at most
// MaxAddrs addresses each, and Members[Self] is self.
func (m Manifest) Check(self peer.ID) error {
	n := len(m.Members)
	if n < 1 || n > MaxNodes {
		return fmt.Errorf("cluster manifest: %d members, want 1..%d", n, MaxNodes)
	}
	if m.Job == "" {
		return errors.New("cluster manifest: no job ID")
	}
	if m.Self < 0 || m.Self >= n {
		return fmt.Errorf("cluster manifest: own rank %d outside 0..%d", m.Self, n-1)
	}
	suppliers := make(map[peer.ID]int, n)
	leases := make(map[market.ID]int, n)
	for i, mb := range m.Members {
		if mb.Rank != i {
			return fmt.Errorf("cluster manifest: member %d has rank %d", i, mb.Rank)
		}
		if err := mb.Supplier.Validate(); err != nil {
			return fmt.Errorf("cluster manifest: rank %d: supplier: %w", i, err)
		}
		if j, dup := suppliers[mb.Supplier]; dup {
			return fmt.Errorf("cluster manifest: ranks %d and %d have the same supplier %s", j, i, mb.Supplier)
		}
		suppliers[mb.Supplier] = i
		if mb.Lease == (market.ID{}) {
			return fmt.Errorf("cluster manifest: rank %d has no lease", i)
		}
		if j, dup := leases[mb.Lease]; dup {
			return fmt.Errorf("cluster manifest: ranks %d and %d have the same lease %s", j, i, mb.Lease.Short())
		}
		leases[mb.Lease] = i
		if len(mb.Addrs) > MaxAddrs {
			return fmt.Errorf("cluster manifest: rank %d has %d addresses, at most %d", i, len(mb.Addrs), MaxAddrs)
		}
	}
	if got := m.Members[m.Self].Supplier; got != self {
		return fmt.Errorf("cluster manifest: own rank %d names supplier %s, not this node %s", m.Self, got, self)
	}
	return nil
}

// Lease is this member's own lease.
func (m Manifest) Lease() market.ID { return m.Members[m.Self].Lease }
