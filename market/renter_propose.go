package market

// Proposing a lease from a quote or an ask, and the exchange that makes it.

import (
	"context"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"

	"github.com/gpumesh/gpumesh/internal/metrics"
	"github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/p2p"
)

func (r *Renter) proposeQuote(ctx context.Context, q *Quote, t Terms) (*Lease, string, error) {
	return r.propose(ctx, q.Supplier, r.quoteProposal(q, t))
}

// quoteProposal is the proposal that takes quote q under terms t.
func (r *Renter) quoteProposal(q *Quote, t Terms) *pb.LeaseProposal {
	now := r.cfg.Now()
	return withTerms(&pb.LeaseProposal{
		Supplier: []byte(q.Supplier), Nonce: nonce(), CreatedMs: now.UnixMilli(),
		ExpiresMs: now.Add(ProposalLife).UnixMilli(), Quote: q.Raw,
		Model: q.Model, Count: q.Count, PriceMicros: q.PriceMicros, DurationS: q.DurationS,
	}, t)
}

func withTerms(p *pb.LeaseProposal, t Terms) *pb.LeaseProposal {
	p.JobSpecHash = t.JobSpecHash
	p.ReceiptIntervalMs = uint32(t.ReceiptInterval / time.Millisecond)
	p.CreditLimitMicros = int64(t.CreditLimit)
	return p
}

// TakeAsk leases count GPUs from a posted ask at its price, under the
// metering terms t (zero: defaults).
func (r *Renter) TakeAsk(ctx context.Context, a *Ask, count int, duration time.Duration, t Terms) (*Lease, error) {
	now := r.cfg.Now()
	r.cfg.Net.Host.Peerstore().AddAddrs(a.Supplier, a.Addrs, peerstore.TempAddrTTL)
	l, refused, err := r.propose(ctx, a.Supplier, withTerms(&pb.LeaseProposal{
		Supplier: []byte(a.Supplier), Nonce: nonce(), CreatedMs: now.UnixMilli(),
		ExpiresMs: now.Add(ProposalLife).UnixMilli(), Ask: a.Raw,
		Model: a.Model, Count: uint32(count), PriceMicros: a.PriceMicros, DurationS: uint32(duration / time.Second),
	}, t))
	if err != nil {
		return nil, err
	}
	if refused != "" {
		return nil, &NoMatch{Reasons: []string{fmt.Sprintf("supplier %s refused: %s", a.Supplier, refused)}}
	}
	return l, nil
}

// propose sends a proposal and, on a valid countersigned lease, keeps it
// and confirms it. A refusal is returned as a reason, not an error.
func (r *Renter) propose(ctx context.Context, supplier peer.ID, p *pb.LeaseProposal) (*Lease, string, error) {
	l, refused, err := r.exchange(ctx, supplier, p)
	r.countLease(refused, err)
	return l, refused, err
}

// countLease counts how a lease exchange ended, on the renter's side.
func (r *Renter) countLease(refused string, err error) {
	switch {
	case err != nil:
		r.cfg.Metrics.Lease(metrics.Renter, metrics.LeaseFailed)
	case refused != "":
		r.cfg.Metrics.Lease(metrics.Renter, metrics.LeaseRefused)
	default:
		r.cfg.Metrics.Lease(metrics.Renter, metrics.LeaseConfirmed)
	}
}

// exchange is propose's exchange with the supplier: reserve, then
// confirm on the same stream.
func (r *Renter) exchange(ctx context.Context, supplier peer.ID, p *pb.LeaseProposal) (*Lease, string, error) {
	v, refused, err := r.reserve(ctx, supplier, p)
	if err != nil || refused != "" {
		return nil, refused, err
	}
	return v.confirm()
}

// A reservation is a lease the supplier countersigned and holds until
// its confirm deadline (ConfirmWindow), on a stream kept open: its renter
// ends it with confirm or release, once, so that a renter can hold
// several at a time (a gang lease) and then commit to all or none.
type reservation struct {
	r        *Renter
	st       network.Stream
	cancel   context.CancelFunc
	supplier peer.ID
	lease    *Lease
	raw      []byte // the lease envelope
}

// reserve sends a proposal and returns the supplier's countersigned
// lease, whose GPUs it holds until confirmed or released. A refusal is
// returned as a reason, not an error.
func (r *Renter) reserve(ctx context.Context, supplier peer.ID, p *pb.LeaseProposal) (*reservation, string, error) {
	raw, err := SealProposal(p, r.cfg.Key)
	if err != nil {
		return nil, "", err
	}
	ctx, cancel := context.WithTimeout(ctx, p2p.StreamTimeout)
	ok := false
	defer func() {
		if !ok {
			cancel()
		}
	}()
	// A proposal and its countersignature are a few kilobytes: they may
	// go over a limited (relayed) connection while hole punching makes a
	// direct one for what the lease is for.
	ctx = network.WithAllowLimitedConn(ctx, string(LeaseProtocol))
	st, err := r.cfg.Net.Host.NewStream(ctx, supplier, LeaseProtocol)
	if err != nil {
		return nil, "", fmt.Errorf("lease: open stream to %s: %w", supplier, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = st.SetDeadline(dl)
	}
	fail := func(err error) (*reservation, string, error) {
		st.Reset()
		return nil, "", err
	}
	if err := p2p.WriteRaw(st, raw); err != nil {
		return fail(fmt.Errorf("lease: send proposal to %s: %w", supplier, err))
	}
	var resp pb.LeaseResponse
	if err := p2p.ReadMsg(st, LeaseType.MaxSize+1024, &resp); err != nil {
		return fail(fmt.Errorf("lease: read answer of %s: %w", supplier, err))
	}
	if resp.Refused != "" {
		_ = st.Close()
		return nil, resp.Refused, nil
	}
	l, err := OpenLease(resp.Lease, r.cfg.Now())
	if err != nil {
		return fail(fmt.Errorf("lease from %s: %w", supplier, err))
	}
	if l.ID != IDOf(raw) || l.Supplier != supplier || l.Renter != r.self {
		return fail(fmt.Errorf("lease from %s: %w: it is not the lease proposed", supplier, ErrMismatch))
	}
	ok = true
	return &reservation{r: r, st: st, cancel: cancel, supplier: supplier, lease: l, raw: resp.Lease}, "", nil
}

// confirm confirms the reserved lease and returns it once the supplier
// kept it, or the supplier's refusal as a reason.
func (v *reservation) confirm() (*Lease, string, error) {
	r, st, l := v.r, v.st, v.lease
	defer v.cancel()
	defer st.Close()
	// Keep the lease durably before confirming it: a renter that crashes
	// now has a lease the supplier will let lapse, never the reverse.
	if r.cfg.Store != nil {
		if err := saveLease(r.cfg.Store, l.ID, v.raw, LeaseConfirmed, RoleRenter, r.cfg.Now()); err != nil {
			st.Reset()
			return nil, "", fmt.Errorf("lease %s: keep: %w", l.ID.Short(), err)
		}
	}
	if err := p2p.WriteMsg(st, &pb.LeaseConfirm{LeaseId: l.ID[:]}); err != nil {
		return nil, "", fmt.Errorf("lease %s: confirm: %w", l.ID.Short(), err)
	}
	_ = st.CloseWrite()
	// The supplier answers once the confirmed lease is kept on its side,
	// so that anything the renter does next with the lease (start a job)
	// finds it there.
	var ok pb.LeaseConfirmed
	if err := p2p.ReadMsg(st, 1024, &ok); err != nil {
		st.Reset()
		return nil, "", fmt.Errorf("lease %s: no word from %s that it kept the lease: %w", l.ID.Short(), v.supplier, err)
	}
	if ok.Refused != "" {
		if r.cfg.Store != nil {
			_ = saveLease(r.cfg.Store, l.ID, v.raw, LeaseLapsed, RoleRenter, r.cfg.Now())
		}
		return nil, ok.Refused, nil
	}
	return l, "", nil
}

// release gives the reservation up (LeaseConfirm.release_id): the
// supplier frees its GPUs at once and does not count it against the
// renter (within MaxWithdrawals a claim window). It fails when the
// supplier did not say it released it: an older supplier, or one the
// answer did not come from, lets the reservation lapse at its confirm
// deadline instead (and may bar the renter a while).
func (v *reservation) release() error {
	r, st, l := v.r, v.st, v.lease
	defer v.cancel()
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(releaseTimeout))
	if err := p2p.WriteMsg(st, &pb.LeaseConfirm{ReleaseId: l.ID[:]}); err != nil {
		st.Reset()
		return fmt.Errorf("lease %s: release: %w", l.ID.Short(), err)
	}
	_ = st.CloseWrite()
	var ans pb.LeaseConfirmed
	if err := p2p.ReadMsg(st, 1024, &ans); err != nil {
		st.Reset()
		return fmt.Errorf("lease %s: no word from %s that it released the reservation (it lapses at its confirm deadline): %w", l.ID.Short(), v.supplier, err)
	}
	if ans.Refused != ReleasedUnconfirmed {
		return fmt.Errorf("lease %s: %s did not release the reservation: %q", l.ID.Short(), v.supplier, ans.Refused)
	}
	r.cfg.Metrics.Lease(metrics.Renter, metrics.LeaseWithdrawn)
	return nil
}

// releaseTimeout bounds the release of a reservation: the supplier
// frees it by its confirm deadline anyway.
const releaseTimeout = ConfirmWindow
