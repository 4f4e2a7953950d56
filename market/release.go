package market

// A renter's release of its lease before its end: the signed record, the
// supplier's check of it (LeaseBook.RenterRelease) and the exchange over
// LeaseReleaseProtocol (docs/PROTOCOL.md, "Releasing a lease").

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/gpumesh/gpumesh/internal/metrics"
	"github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
)

// LeaseReleaseProtocol carries a renter's signed LeaseRelease to the
// lease's supplier and its LeaseReleased answer.
const LeaseReleaseProtocol protocol.ID = "/gpumesh/lease-release/1.0.0"

// The release record: its domain, payload type and largest envelope.
const (
	ReleaseDomain      = "gpumesh-lease-release-v1"
	ReleasePayloadType = "/gpumesh/lease-release/1"
	MaxReleaseSize     = 1 << 10
)

// ReleaseType is the record type of a LeaseRelease.
var ReleaseType = p2p.RecordType{Domain: ReleaseDomain, PayloadType: ReleasePayloadType, MaxSize: MaxReleaseSize}

// Errors of a renter's release, wrapped with what the supplier said.
var (
	// ErrNotYours: the lease is another renter's (or this supplier did
	// not make it).
	ErrNotYours = errors.New("the lease is not yours")
	// ErrLeaseEnded: the lease ended, lapsed or was released already.
	ErrLeaseEnded = errors.New("the lease has ended")
	// ErrLeaseBusy: a job runs on the lease; stop it first.
	ErrLeaseBusy = errors.New("a job runs on the lease")
)

// Release is an opened LeaseRelease: signed by Renter.
type Release struct {
	*pb.LeaseRelease
	Renter   peer.ID
	Supplier peer.ID
	LeaseID  ID
}

// SealRelease signs a release; it sets Version and Renter.
func SealRelease(r *pb.LeaseRelease, key crypto.PrivKey) ([]byte, error) {
	return p2p.SealFilled(ReleaseType, r, key, func(m *pb.LeaseRelease, id []byte) { m.Version, m.Renter = p2p.RecordVersion, id })
}

// OpenRelease verifies and decodes a signed release as of now: its
// signature is its renter's, it is recent (MaxOrderLifetime) and names a
// supplier and a lease.
func OpenRelease(data []byte, now time.Time) (*Release, error) {
	m := &pb.LeaseRelease{}
	signer, err := p2p.OpenAuthored(ReleaseType, data, m, func() []byte { return m.Renter })
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	if err := cmp.Or(checkHeader(m.Version, m.Nonce), checkRecent(m.CreatedMs, now)); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	r := &Release{LeaseRelease: m, Renter: signer}
	if r.Supplier, err = p2p.ParsePeer("supplier", m.Supplier); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	if r.LeaseID, err = parseID("lease_id", m.LeaseId); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	return r, nil
}

// RenterRelease ends the lease rel names, at its renter's signed request,
// before its end: stored as released by its renter, its GPUs freed and
// advertised again, its hold dropped without barring the renter (a
// release is not an unclaimed lease). The lease's time up to now is
// billed as any job's on it is (node/job); a lease with no job was never
// billed. It returns when the lease ended. It changes nothing and fails,
// wrapping ErrNotYours, ErrLeaseEnded (with the earlier release's time,
// for a release sent again) or ErrLeaseBusy, for a lease that is not
// rel's renter's here, has ended, or has a job running on it (claimed,
// not yet released: Claim, Release).
func (b *LeaseBook) RenterRelease(rel *Release) (time.Time, error) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	rec, err := getLeaseRecord(b.store, rel.LeaseID)
	if errors.Is(err, store.ErrNotFound) {
		return time.Time{}, fmt.Errorf("lease %s: %w: no such lease here", rel.LeaseID.Short(), ErrNotYours)
	}
	if err != nil {
		return time.Time{}, err
	}
	sl, err := rec.stored(now)
	switch {
	case err != nil:
		return time.Time{}, fmt.Errorf("lease %s: %w", rel.LeaseID.Short(), err)
	case sl.Role != RoleSupplier || sl.Renter != rel.Renter:
		return time.Time{}, fmt.Errorf("lease %s: %w", rel.LeaseID.Short(), ErrNotYours)
	case sl.State == LeaseReleased:
		return rec.Saved, fmt.Errorf("lease %s: %w: released at %s%s", rel.LeaseID.Short(), ErrLeaseEnded, rec.Saved.UTC().Format(time.RFC3339), reasonSuffix(rec.Reason))
	case sl.State != LeaseConfirmed:
		return time.Time{}, fmt.Errorf("lease %s: %w: it is %s", rel.LeaseID.Short(), ErrLeaseEnded, sl.State)
	case !now.Before(sl.End()):
		return sl.End(), fmt.Errorf("lease %s: %w at %s", rel.LeaseID.Short(), ErrLeaseEnded, sl.End().UTC().Format(time.RFC3339))
	case !b.ledger.Holds(rel.LeaseID):
		return time.Time{}, fmt.Errorf("lease %s: %w: its job is over and its GPUs free", rel.LeaseID.Short(), ErrLeaseEnded)
	case b.running[rel.LeaseID]:
		return time.Time{}, fmt.Errorf("lease %s: %w; stop it first", rel.LeaseID.Short(), ErrLeaseBusy)
	}
	rec.State, rec.Saved = LeaseReleased, now.UTC()
	rec.Reason = ReleasedByRenter(now)
	if err := putLeaseRecord(b.store, rel.LeaseID, rec); err != nil {
		return time.Time{}, fmt.Errorf("lease %s: keep its release: %w", rel.LeaseID.Short(), err)
	}
	if err := b.ledger.Release(rel.LeaseID); err != nil && !errors.Is(err, ErrNoReservation) {
		b.log.Warn("free the GPUs of a released lease", "lease", rel.LeaseID.Short(), "err", err)
	}
	delete(b.holds, rel.LeaseID)
	b.metrics.Lease(metrics.Supplier, metrics.LeaseReleased)
	b.log.Info("lease released by its renter", "lease", rel.LeaseID.Short(), "renter", rel.Renter)
	b.changed()
	return now, nil
}

// handleRelease serves LeaseReleaseProtocol: a signed LeaseRelease in,
// LeaseReleased out. The release must be signed by the peer that sends
// it and addressed to this supplier.
func (s *Supplier) handleRelease(st network.Stream) error {
	raw, err := p2p.ReadRaw(st, ReleaseType.MaxSize)
	if err != nil {
		return err
	}
	answer := func(at time.Time, refused string) error {
		m := &pb.LeaseReleased{Refused: refused}
		if !at.IsZero() {
			m.ReleasedMs = at.UnixMilli()
		}
		return p2p.WriteMsg(st, m)
	}
	rel, err := OpenRelease(raw, s.cfg.Now())
	switch {
	case err != nil:
		return answer(time.Time{}, fmt.Sprintf("invalid release: %v", err))
	case rel.Supplier != s.self:
		return answer(time.Time{}, fmt.Sprintf("release is addressed to %s", rel.Supplier))
	case rel.Renter != st.Conn().RemotePeer():
		return answer(time.Time{}, fmt.Sprintf("release signed by %s but sent by %s", rel.Renter, st.Conn().RemotePeer()))
	}
	at, err := s.leases.RenterRelease(rel)
	if err != nil {
		s.log.Info("release refused", "renter", rel.Renter, "lease", rel.LeaseID.Short(), "err", err)
		return answer(at, err.Error())
	}
	return answer(at, "")
}

// Release ends lease l, which this renter holds, before its end: it
// sends the supplier a signed LeaseRelease over a connection to it
// (Renter dials it as the host can) and, once released, keeps the lease
// as released. It returns when the lease ended, or the supplier's
// refusal as an error.
func (r *Renter) Release(ctx context.Context, l *Lease) (time.Time, error) {
	if l.Renter != r.self {
		return time.Time{}, fmt.Errorf("release lease %s: %w", l.ID.Short(), ErrNotYours)
	}
	raw, err := SealRelease(&pb.LeaseRelease{Supplier: []byte(l.Supplier), LeaseId: l.ID[:], Nonce: nonce(), CreatedMs: r.cfg.Now().UnixMilli()}, r.cfg.Key)
	if err != nil {
		return time.Time{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, p2p.StreamTimeout)
	defer cancel()
	ctx = network.WithAllowLimitedConn(ctx, string(LeaseReleaseProtocol))
	st, err := r.cfg.Net.Host.NewStream(ctx, l.Supplier, LeaseReleaseProtocol)
	if err != nil {
		return time.Time{}, fmt.Errorf("release lease %s: open stream to %s: %w", l.ID.Short(), l.Supplier, err)
	}
	defer st.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = st.SetDeadline(dl)
	}
	if err := p2p.WriteRaw(st, raw); err != nil {
		st.Reset()
		return time.Time{}, fmt.Errorf("release lease %s: send: %w", l.ID.Short(), err)
	}
	_ = st.CloseWrite()
	var resp pb.LeaseReleased
	if err := p2p.ReadMsg(st, 4096, &resp); err != nil {
		st.Reset()
		return time.Time{}, fmt.Errorf("release lease %s: read answer of %s: %w", l.ID.Short(), l.Supplier, err)
	}
	at := time.Time{}
	if resp.ReleasedMs > 0 {
		at = time.UnixMilli(resp.ReleasedMs)
	}
	if resp.Refused != "" {
		return at, &ReleaseRefused{Lease: l.ID, Reason: resp.Refused}
	}
	if r.cfg.Store != nil {
		if err := r.keepReleased(l, at); err != nil {
			return at, err
		}
	}
	return at, nil
}

// ReleasedByRenter is the reason kept with a lease its renter released
// at at.
func ReleasedByRenter(at time.Time) string {
	return "released by its renter at " + at.UTC().Format(time.RFC3339)
}

// ReleaseRefused is a supplier's refusal of a release, in its words.
type ReleaseRefused struct {
	Lease  ID
	Reason string
}

func (e *ReleaseRefused) Error() string {
	return fmt.Sprintf("the supplier refused to release lease %s: %s", e.Lease.Short(), e.Reason)
}

// keepReleased stores the renter's lease l as released at at.
func (r *Renter) keepReleased(l *Lease, at time.Time) error {
	rec := LeaseRecord{Envelope: l.Raw, State: LeaseReleased, Role: RoleRenter, Saved: at.UTC(),
		Reason: ReleasedByRenter(at)}
	if err := putLeaseRecord(r.cfg.Store, l.ID, rec); err != nil {
		return fmt.Errorf("release lease %s: keep: %w", l.ID.Short(), err)
	}
	return nil
}
