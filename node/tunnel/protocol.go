package tunnel

import (
	"time"

	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/gpumesh/gpumesh/node/tunnel/pb"
	"github.com/gpumesh/gpumesh/p2p"
)

// The tunnel protocol and its limits (docs/PROTOCOL.md §39).
const (
	// Protocol carries one TCP connection to a port of a renter's job.
	Protocol protocol.ID = p2p.TunnelProtocol
	// Version is Open.version.
	Version = 1
	// MaxOpenSize bounds an Open: everything a supplier reads from a
	// stream before it has checked the attempt, the renter and the port.
	MaxOpenSize = 128
	// MaxReplySize bounds a Reply.
	MaxReplySize = 1024
	// OpenTimeout bounds the read of an Open (supplier) and of the Reply
	// (renter).
	OpenTimeout = 10 * time.Second
	// DialTimeout bounds the supplier's connect to the job's port.
	DialTimeout = 5 * time.Second
	// MaxPerAttempt is how many tunnels one attempt may have open at once
	// (a supplier's default).
	MaxPerAttempt = 128
	// MaxTunnels is how many tunnels a supplier carries at once, over all
	// attempts (a supplier's default).
	MaxTunnels = 512
)

// Refusal codes (Reply.refused).
const (
	// RefusedMalformed: the Open did not decode or a field is out of range.
	RefusedMalformed = "malformed"
	// RefusedVersion: an Open version this supplier does not speak.
	RefusedVersion = "version"
	// RefusedNoAttempt: no such attempt runs here for this peer. A
	// supplier says the same whether the lease is unknown, another
	// renter's, or ran another attempt, so that nothing about other
	// renters' leases leaks.
	RefusedNoAttempt = "no-attempt"
	// RefusedNotRunning: the attempt is starting or has ended.
	RefusedNotRunning = "not-running"
	// RefusedUnpaid: the job is halted until the renter pays.
	RefusedUnpaid = "unpaid"
	// RefusedPort: the job's spec does not declare the port.
	RefusedPort = "port"
	// RefusedBusy: too many tunnels, to this attempt or in all.
	RefusedBusy = "busy"
	// RefusedNoNetwork: the job has no network of its own to reach the
	// port in.
	RefusedNoNetwork = "no-network"
	// RefusedUnreachable: nothing accepted the connection on the job's
	// port (not listening yet, or gone).
	RefusedUnreachable = "unreachable"
)

// Refusal is a supplier's refusal of an Open, as either side sees it.
type Refusal = p2p.Refusal

// refusalOf names this protocol in its refusals.
const refusalOf = "tunnel"

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
	LeaseID [32]byte
	Attempt uint32
	Port    uint16
}

// CheckOpen checks a decoded Open, in order: the version, the lease ID's
// length, the port's range. Errors wrap p2p.ErrUnsupported or
// p2p.ErrMalformed.
func CheckOpen(m *pb.Open) (Request, error) {
	var r Request
	switch {
	case m.Version != Version:
		return r, p2p.Errf(p2p.ErrUnsupported, "tunnel open version %d, want %d", m.Version, Version)
	case len(m.LeaseId) != 32:
		return r, p2p.Errf(p2p.ErrMalformed, "lease_id is %d bytes, want 32", len(m.LeaseId))
	case m.Port == 0 || m.Port > 65535:
		return r, p2p.Errf(p2p.ErrMalformed, "port %d outside 1..65535", m.Port)
	}
	copy(r.LeaseID[:], m.LeaseId)
	r.Attempt, r.Port = m.Attempt, uint16(m.Port)
	return r, nil
}
