package market

import (
	"cmp"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/p2p"
)

// Sealing. Each Seal function signs a copy of its message with key after
// filling in the schema version and the signer's peer-ID field from the key;
// the caller fills in everything else. The result is the envelope to send.

// SealAsk signs an ask; it sets Version and Supplier.
func SealAsk(a *pb.Ask, key crypto.PrivKey) ([]byte, error) {
	return p2p.SealFilled(AskType, a, key, func(m *pb.Ask, id []byte) { m.Version, m.Supplier = p2p.RecordVersion, id })
}

// SealBid signs a bid; it sets Version and Renter.
func SealBid(b *pb.Bid, key crypto.PrivKey) ([]byte, error) {
	return p2p.SealFilled(BidType, b, key, func(m *pb.Bid, id []byte) { m.Version, m.Renter = p2p.RecordVersion, id })
}

// SealCancel signs a cancel; it sets Version and Signer.
func SealCancel(c *pb.Cancel, key crypto.PrivKey) ([]byte, error) {
	return p2p.SealFilled(CancelType, c, key, func(m *pb.Cancel, id []byte) { m.Version, m.Signer = p2p.RecordVersion, id })
}

// SealQuote signs a quote or decline; it sets Version and Supplier.
func SealQuote(q *pb.Quote, key crypto.PrivKey) ([]byte, error) {
	return p2p.SealFilled(QuoteType, q, key, func(m *pb.Quote, id []byte) { m.Version, m.Supplier = p2p.RecordVersion, id })
}

// SealProposal signs a lease proposal; it sets Version and Renter.
func SealProposal(p *pb.LeaseProposal, key crypto.PrivKey) ([]byte, error) {
	return p2p.SealFilled(ProposalType, p, key, func(m *pb.LeaseProposal, id []byte) { m.Version, m.Renter = p2p.RecordVersion, id })
}

// SealLease countersigns a lease; it sets Version and Supplier.
func SealLease(l *pb.Lease, key crypto.PrivKey) ([]byte, error) {
	return p2p.SealFilled(LeaseType, l, key, func(m *pb.Lease, id []byte) { m.Version, m.Supplier = p2p.RecordVersion, id })
}

// SealTradePrint signs a trade print; it sets Version and Supplier.
func SealTradePrint(t *pb.TradePrint, key crypto.PrivKey) ([]byte, error) {
	return p2p.SealFilled(TradeType, t, key, func(m *pb.TradePrint, id []byte) { m.Version, m.Supplier = p2p.RecordVersion, id })
}

// Opening. Each Open function checks a signed envelope as of now — size,
// signature, payload type and key type (p2p.Open), that its author field
// names the signer, then its fields, cheap checks first, then any record it
// embeds — and returns the decoded record. Every error wraps exactly one
// of p2p's named errors or ErrMismatch.

// OpenAsk verifies and decodes a signed ask.
func OpenAsk(data []byte, now time.Time) (*Ask, error) {
	m := &pb.Ask{}
	signer, err := p2p.OpenAuthored(AskType, data, m, func() []byte { return m.Supplier })
	if err != nil {
		return nil, fmt.Errorf("ask: %w", err)
	}
	id := IDOf(data)
	addrs, err := checkAsk(m, now)
	if err != nil {
		return nil, fmt.Errorf("ask %s: %w", id.Short(), err)
	}
	return &Ask{Ask: m, ID: id, Supplier: signer, Addrs: addrs, Raw: data}, nil
}

func checkAsk(m *pb.Ask, now time.Time) ([]ma.Multiaddr, error) {
	// Cheap checks first, each evaluated; cmp.Or keeps the first failure.
	err := cmp.Or(
		checkHeader(m.Version, m.Nonce),
		checkWindow(m.CreatedMs, m.ExpiresMs, now),
		checkCount("count", m.Count),
		checkPrice("price_micros", m.PriceMicros),
		checkDuration("min_duration_s", m.MinDurationS),
		checkDuration("max_duration_s", m.MaxDurationS),
	)
	switch {
	case err != nil:
		return nil, err
	case m.MinDurationS > m.MaxDurationS:
		return nil, p2p.Errf(p2p.ErrMalformed, "min_duration_s %d above max_duration_s %d", m.MinDurationS, m.MaxDurationS)
	case !validPricing(m.Pricing):
		return nil, p2p.Errf(p2p.ErrMalformed, "pricing %q is not fixed, auction or dynamic", m.Pricing)
	}
	if err := cmp.Or(checkRegion(m.Region), checkModel(m.Model)); err != nil {
		return nil, err
	}
	return parseAddrs(m.Addrs, 0)
}

// OpenBid verifies and decodes a signed bid, parsing its filter.
func OpenBid(data []byte, now time.Time) (*Bid, error) {
	m := &pb.Bid{}
	signer, err := p2p.OpenAuthored(BidType, data, m, func() []byte { return m.Renter })
	if err != nil {
		return nil, fmt.Errorf("bid: %w", err)
	}
	id := IDOf(data)
	b, err := checkBid(m, now)
	if err != nil {
		return nil, fmt.Errorf("bid %s: %w", id.Short(), err)
	}
	b.ID, b.Renter, b.Raw = id, signer, data
	return b, nil
}

func checkBid(m *pb.Bid, now time.Time) (*Bid, error) {
	err := cmp.Or(
		checkHeader(m.Version, m.Nonce),
		checkWindow(m.CreatedMs, m.ExpiresMs, now),
		checkCount("count", m.Count),
		checkDuration("duration_s", m.DurationS),
		checkPrice("max_price_micros", m.MaxPriceMicros),
	)
	switch {
	case err != nil:
		return nil, err
	case len(m.Filter) > MaxBidFilterBytes:
		return nil, p2p.Errf(p2p.ErrMalformed, "filter is %d bytes (limit %d)", len(m.Filter), MaxBidFilterBytes)
	}
	addrs, err := parseAddrs(m.Addrs, 1)
	if err != nil {
		return nil, err
	}
	// A peer may know models this build's catalog does not, so any model
	// slug is accepted here; matching decides what it means.
	f, err := ParseFilter(m.Filter, AnyModel())
	if err != nil {
		return nil, p2p.Errf(p2p.ErrMalformed, "%v", err)
	}
	return &Bid{Bid: m, Filter: f, Addrs: addrs}, nil
}

// OpenCancel verifies and decodes a signed cancel. Whether the cancelled
// order is the signer's is for the order book to check.
func OpenCancel(data []byte, now time.Time) (*Cancel, error) {
	m := &pb.Cancel{}
	signer, err := p2p.OpenAuthored(CancelType, data, m, func() []byte { return m.Signer })
	if err != nil {
		return nil, fmt.Errorf("cancel: %w", err)
	}
	id := IDOf(data)
	err = cmp.Or(checkHeader(m.Version, m.Nonce), checkRecent(m.CreatedMs, now))
	var order ID
	if err == nil {
		order, err = parseID("order_id", m.OrderId)
	}
	if err != nil {
		return nil, fmt.Errorf("cancel %s: %w", id.Short(), err)
	}
	return &Cancel{Cancel: m, ID: id, Signer: signer, OrderID: order, Raw: data}, nil
}

// OpenQuote verifies and decodes a signed quote or decline.
func OpenQuote(data []byte, now time.Time) (*Quote, error) {
	m := &pb.Quote{}
	signer, err := p2p.OpenAuthored(QuoteType, data, m, func() []byte { return m.Supplier })
	if err != nil {
		return nil, fmt.Errorf("quote: %w", err)
	}
	id := IDOf(data)
	q, err := checkQuote(m, now)
	if err != nil {
		return nil, fmt.Errorf("quote %s: %w", id.Short(), err)
	}
	q.ID, q.Supplier, q.Raw = id, signer, data
	return q, nil
}

func checkQuote(m *pb.Quote, now time.Time) (*Quote, error) {
	err := cmp.Or(
		checkHeader(m.Version, m.Nonce),
		checkWindow(m.CreatedMs, m.ExpiresMs, now),
		checkTerms(m),
		checkCountMax("free", m.Free),
		checkHeld(m),
		checkPriceMax("min_price_micros", m.MinPriceMicros),
		checkRegion(m.Region),
		checkModel(m.Model),
	)
	if err != nil {
		return nil, err
	}
	q := &Quote{Quote: m}
	if q.BidID, err = parseID("bid_id", m.BidId); err != nil {
		return nil, err
	}
	if q.Renter, err = p2p.ParsePeer("renter", m.Renter); err != nil {
		return nil, err
	}
	return q, nil
}

// checkTerms checks what a quote offers; a decline may leave count, price
// and duration unset.
func checkTerms(m *pb.Quote) error {
	switch {
	case m.Decline == "":
		return cmp.Or(
			checkCount("count", m.Count),
			checkPrice("price_micros", m.PriceMicros),
			checkDuration("duration_s", m.DurationS),
		)
	case !Decline(m.Decline).Valid():
		return p2p.Errf(p2p.ErrMalformed, "decline %q is not a reason code", m.Decline)
	case m.DurationS != 0:
		if err := checkDuration("duration_s", m.DurationS); err != nil {
			return err
		}
	}
	return cmp.Or(checkCountMax("count", m.Count), checkPriceMax("price_micros", m.PriceMicros))
}

// OpenProposal verifies and decodes a signed lease proposal and the quote
// or ask it embeds, all as of now: the embedded record must be valid now,
// signed by the proposal's supplier, and agree with the proposal.
func OpenProposal(data []byte, now time.Time) (*Proposal, error) {
	return openProposal(data, now, false)
}

// openProposal opens a proposal as of now or, with atCreation, as of its
// own creation time: a lease checks the proposal it embeds as it was when
// the lease was made.
func openProposal(data []byte, now time.Time, atCreation bool) (*Proposal, error) {
	m := &pb.LeaseProposal{}
	signer, err := p2p.OpenAuthored(ProposalType, data, m, func() []byte { return m.Renter })
	if err != nil {
		return nil, fmt.Errorf("proposal: %w", err)
	}
	id := IDOf(data)
	if atCreation {
		now = time.UnixMilli(m.CreatedMs)
	}
	p, err := checkProposal(m, signer, now)
	if err != nil {
		return nil, fmt.Errorf("proposal %s: %w", id.Short(), err)
	}
	p.ID, p.Raw = id, data
	return p, nil
}

func checkProposal(m *pb.LeaseProposal, renter peer.ID, now time.Time) (*Proposal, error) {
	err := cmp.Or(
		checkHeader(m.Version, m.Nonce),
		checkWindow(m.CreatedMs, m.ExpiresMs, now),
		checkCount("count", m.Count),
		checkPrice("price_micros", m.PriceMicros),
		checkDuration("duration_s", m.DurationS),
		checkModel(m.Model),
	)
	switch {
	case err != nil:
		return nil, err
	case len(m.Quote) == 0 && len(m.Ask) == 0:
		return nil, p2p.Errf(p2p.ErrMalformed, "carries neither a quote nor an ask")
	case len(m.Quote) > 0 && len(m.Ask) > 0:
		return nil, p2p.Errf(p2p.ErrMalformed, "carries both a quote and an ask")
	case len(m.JobSpecHash) != 0 && len(m.JobSpecHash) != 32:
		return nil, p2p.Errf(p2p.ErrMalformed, "job_spec_hash is %d bytes, want 32 or none", len(m.JobSpecHash))
	case m.ReceiptIntervalMs != 0 && (m.ReceiptIntervalMs < MinReceiptInterval || m.ReceiptIntervalMs > MaxReceiptInterval):
		return nil, p2p.Errf(p2p.ErrMalformed, "receipt_interval_ms %d outside %d..%d", m.ReceiptIntervalMs, MinReceiptInterval, MaxReceiptInterval)
	case m.CreditLimitMicros < 0:
		return nil, p2p.Errf(p2p.ErrMalformed, "credit_limit_micros %d is negative", m.CreditLimitMicros)
	}
	p := &Proposal{LeaseProposal: m, Renter: renter}
	if p.Supplier, err = p2p.ParsePeer("supplier", m.Supplier); err != nil {
		return nil, err
	}
	if len(m.Quote) > 0 {
		q, err := OpenQuote(m.Quote, now)
		if err != nil {
			return nil, err
		}
		p.Quote = q
		return p, agreesWithQuote(m, p.Supplier, renter, q)
	}
	a, err := OpenAsk(m.Ask, now)
	if err != nil {
		return nil, err
	}
	p.Ask = a
	return p, agreesWithAsk(m, p.Supplier, a)
}

func agreesWithQuote(m *pb.LeaseProposal, supplier, renter peer.ID, q *Quote) error {
	switch {
	case q.Supplier != supplier:
		return p2p.Errf(ErrMismatch, "quote %s signed by %s, proposal names supplier %s", q.ID.Short(), q.Supplier, supplier)
	case q.Decline != "":
		return p2p.Errf(ErrMismatch, "quote %s is a decline (%s), not an offer", q.ID.Short(), q.Decline)
	case q.Renter != renter:
		return p2p.Errf(ErrMismatch, "quote %s is addressed to %s, not to the proposing renter %s", q.ID.Short(), q.Renter, renter)
	case m.Model != q.Model:
		return p2p.Errf(ErrMismatch, "model %q, quote has %q", m.Model, q.Model)
	case m.Count != q.Count:
		return p2p.Errf(ErrMismatch, "count %d, quote has %d", m.Count, q.Count)
	case m.PriceMicros != q.PriceMicros:
		return p2p.Errf(ErrMismatch, "price_micros %d, quote has %d", m.PriceMicros, q.PriceMicros)
	case m.DurationS != q.DurationS:
		return p2p.Errf(ErrMismatch, "duration_s %d, quote has %d", m.DurationS, q.DurationS)
	}
	return nil
}

func agreesWithAsk(m *pb.LeaseProposal, supplier peer.ID, a *Ask) error {
	switch {
	case a.Supplier != supplier:
		return p2p.Errf(ErrMismatch, "ask %s signed by %s, proposal names supplier %s", a.ID.Short(), a.Supplier, supplier)
	case m.Model != a.Model:
		return p2p.Errf(ErrMismatch, "model %q, ask has %q", m.Model, a.Model)
	case m.Count > a.Count:
		return p2p.Errf(ErrMismatch, "count %d, ask offers %d", m.Count, a.Count)
	case m.PriceMicros != a.PriceMicros:
		return p2p.Errf(ErrMismatch, "price_micros %d, ask has %d", m.PriceMicros, a.PriceMicros)
	case m.DurationS < a.MinDurationS || m.DurationS > a.MaxDurationS:
		return p2p.Errf(ErrMismatch, "duration_s %d outside the ask's %d..%d", m.DurationS, a.MinDurationS, a.MaxDurationS)
	}
	return nil
}

// OpenLease verifies and decodes a countersigned lease: the supplier's
// signature, the renter's proposal inside it and the quote or ask inside
// that. A lease outlives its quote, so the embedded records are checked as
// of the proposal's creation time (they were valid when the lease was
// made); as of now, only a lease that starts in the future is refused.
// The returned Lease's ID is its lease_id, the proposal's ID.
func OpenLease(data []byte, now time.Time) (*Lease, error) {
	m := &pb.Lease{}
	signer, err := p2p.OpenAuthored(LeaseType, data, m, func() []byte { return m.Supplier })
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	l, err := checkLease(m, signer, now)
	if err != nil {
		return nil, fmt.Errorf("lease %s: %w", IDOf(data).Short(), err)
	}
	l.Raw = data
	return l, nil
}

func checkLease(m *pb.Lease, supplier peer.ID, now time.Time) (*Lease, error) {
	switch start := time.UnixMilli(m.StartMs); {
	case m.Version != p2p.RecordVersion:
		return nil, p2p.Errf(p2p.ErrUnsupported, "version %d", m.Version)
	case m.StartMs <= 0 || m.EndMs <= m.StartMs:
		return nil, p2p.Errf(p2p.ErrMalformed, "start_ms %d, end_ms %d: not a positive interval", m.StartMs, m.EndMs)
	case m.ConfirmByMs < m.StartMs:
		return nil, p2p.Errf(p2p.ErrMalformed, "confirm_by_ms %d before start_ms %d", m.ConfirmByMs, m.StartMs)
	case start.After(now.Add(p2p.ClockSkew)):
		return nil, p2p.Errf(p2p.ErrFutureDated, "starts %s", start.UTC().Format(time.RFC3339))
	}
	err := cmp.Or(
		checkCount("count", m.Count),
		checkPrice("price_micros", m.PriceMicros),
		checkModel(m.Model),
		checkUUIDs(m.GpuUuids, m.Count),
	)
	if err != nil {
		return nil, err
	}
	l := &Lease{Lease: m, Supplier: supplier}
	if l.ID, err = parseID("lease_id", m.LeaseId); err != nil {
		return nil, err
	}
	if l.Renter, err = p2p.ParsePeer("renter", m.Renter); err != nil {
		return nil, err
	}
	p, err := openProposal(m.Proposal, now, true)
	if err != nil {
		return nil, err
	}
	l.Proposal = p
	proposalStart := time.UnixMilli(p.CreatedMs).Add(-p2p.ClockSkew)
	proposalEnd := time.UnixMilli(p.ExpiresMs).Add(p2p.ClockSkew)
	switch start := time.UnixMilli(m.StartMs); {
	case l.ID != p.ID:
		return nil, p2p.Errf(ErrMismatch, "lease_id %s is not the proposal's ID %s", l.ID.Short(), p.ID.Short())
	case p.Supplier != supplier:
		return nil, p2p.Errf(ErrMismatch, "countersigned by %s, proposal names supplier %s", supplier, p.Supplier)
	case p.Renter != l.Renter:
		return nil, p2p.Errf(ErrMismatch, "renter %s, proposal signed by %s", l.Renter, p.Renter)
	case m.Model != p.Model:
		return nil, p2p.Errf(ErrMismatch, "model %q, proposal has %q", m.Model, p.Model)
	case m.Count != p.Count:
		return nil, p2p.Errf(ErrMismatch, "count %d, proposal has %d", m.Count, p.Count)
	case m.PriceMicros != p.PriceMicros:
		return nil, p2p.Errf(ErrMismatch, "price_micros %d, proposal has %d", m.PriceMicros, p.PriceMicros)
	case m.EndMs-m.StartMs != int64(p.DurationS)*1000:
		return nil, p2p.Errf(ErrMismatch, "end_ms - start_ms = %d ms, proposal's duration is %d s", m.EndMs-m.StartMs, p.DurationS)
	case start.Before(proposalStart) || !start.Before(proposalEnd):
		return nil, p2p.Errf(ErrMismatch, "starts %s, outside the proposal's validity", start.UTC().Format(time.RFC3339))
	}
	return l, nil
}

// OpenTradePrint verifies and decodes a signed trade print and the lease it
// reports (checked as OpenLease does): the print must be recent, signed by
// the lease's supplier and made after the lease started.
func OpenTradePrint(data []byte, now time.Time) (*TradePrint, error) {
	m := &pb.TradePrint{}
	signer, err := p2p.OpenAuthored(TradeType, data, m, func() []byte { return m.Supplier })
	if err != nil {
		return nil, fmt.Errorf("trade print: %w", err)
	}
	id := IDOf(data)
	t, err := checkTradePrint(m, signer, now)
	if err != nil {
		return nil, fmt.Errorf("trade print %s: %w", id.Short(), err)
	}
	t.ID, t.Raw = id, data
	return t, nil
}

// VerifyTradePrint checks a kept trade print's signature, and that the
// supplier field names its signer, without its time bounds (for showing
// prints older than gossip accepts), and returns the signer: the caller
// compares it with the supplier of the print's lease.
func VerifyTradePrint(data []byte) (peer.ID, error) {
	m := &pb.TradePrint{}
	signer, err := p2p.OpenAuthored(TradeType, data, m, func() []byte { return m.Supplier })
	if err != nil {
		return "", fmt.Errorf("trade print: %w", err)
	}
	return signer, nil
}

func checkTradePrint(m *pb.TradePrint, supplier peer.ID, now time.Time) (*TradePrint, error) {
	if err := cmp.Or(checkHeader(m.Version, m.Nonce), checkRecent(m.CreatedMs, now)); err != nil {
		return nil, err
	}
	l, err := OpenLease(m.Lease, now)
	if err != nil {
		return nil, err
	}
	switch {
	case l.Supplier != supplier:
		return nil, p2p.Errf(ErrMismatch, "signed by %s, lease supplier is %s", supplier, l.Supplier)
	case time.UnixMilli(m.CreatedMs).Before(l.Start().Add(-p2p.ClockSkew)):
		return nil, p2p.Errf(ErrMismatch, "created %s, before its lease starts at %s", time.UnixMilli(m.CreatedMs).UTC().Format(time.RFC3339), l.Start().UTC().Format(time.RFC3339))
	}
	return &TradePrint{TradePrint: m, Supplier: supplier, Lease: l}, nil
}

// open checks a record's envelope and that the peer its author field names
// is its signer.

// checkHeader checks the schema version and the nonce.
func checkHeader(version uint32, nonce uint64) error {
	switch {
	case version != p2p.RecordVersion:
		return p2p.Errf(p2p.ErrUnsupported, "version %d", version)
	case nonce == 0:
		return p2p.Errf(p2p.ErrMalformed, "nonce is 0")
	}
	return nil
}

// checkWindow checks the timestamps of a record that holds from created
// until expires.
func checkWindow(createdMs, expiresMs int64, now time.Time) error {
	switch {
	case createdMs <= 0:
		return p2p.Errf(p2p.ErrMalformed, "created_ms %d", createdMs)
	case expiresMs <= createdMs:
		return p2p.Errf(p2p.ErrMalformed, "expires_ms %d not after created_ms %d", expiresMs, createdMs)
	case expiresMs-createdMs > MaxOrderLifetime.Milliseconds():
		return p2p.Errf(p2p.ErrMalformed, "lifetime %s over %s", time.Duration(expiresMs-createdMs)*time.Millisecond, MaxOrderLifetime)
	}
	return checkTimes(time.UnixMilli(createdMs), time.UnixMilli(expiresMs), now)
}

// checkRecent checks the timestamp of a record without an expiry (a
// cancel, a trade print): it holds for MaxOrderLifetime after created.
func checkRecent(createdMs int64, now time.Time) error {
	if createdMs <= 0 {
		return p2p.Errf(p2p.ErrMalformed, "created_ms %d", createdMs)
	}
	created := time.UnixMilli(createdMs)
	return checkTimes(created, created.Add(MaxOrderLifetime), now)
}

func checkTimes(created, expires, now time.Time) error {
	switch {
	case created.After(now.Add(p2p.ClockSkew)):
		return p2p.Errf(p2p.ErrFutureDated, "created %s", created.UTC().Format(time.RFC3339))
	case !now.Before(expires):
		return p2p.Errf(p2p.ErrExpired, "at %s", expires.UTC().Format(time.RFC3339))
	}
	return nil
}

func checkCount(field string, n uint32) error {
	if n == 0 || n > MaxCount {
		return p2p.Errf(p2p.ErrMalformed, "%s %d not in 1..%d", field, n, MaxCount)
	}
	return nil
}

// checkHeld checks what a busy decline says of GPUs held with no job:
// counts in bounds, held at most total, and a retry within a lease's
// longest duration, all only on a busy decline.
func checkHeld(m *pb.Quote) error {
	switch {
	case m.Held == 0 && m.Total == 0 && m.RetryAfterMs == 0:
		return nil
	case Decline(m.Decline) != DeclineBusy:
		return p2p.Errf(p2p.ErrMalformed, "held, total or retry_after_ms on a quote that is not a busy decline")
	case m.Held > m.Total:
		return p2p.Errf(p2p.ErrMalformed, "held %d over total %d", m.Held, m.Total)
	case m.RetryAfterMs < 0 || m.RetryAfterMs > MaxDuration.Milliseconds():
		return p2p.Errf(p2p.ErrMalformed, "retry_after_ms %d not in 0..%d", m.RetryAfterMs, MaxDuration.Milliseconds())
	}
	return checkCountMax("total", m.Total)
}

func checkCountMax(field string, n uint32) error {
	if n > MaxCount {
		return p2p.Errf(p2p.ErrMalformed, "%s %d over %d", field, n, MaxCount)
	}
	return nil
}

func checkPrice(field string, p int64) error {
	if p <= 0 || p > MaxPriceMicros {
		return p2p.Errf(p2p.ErrMalformed, "%s %d not in 1..%d", field, p, int64(MaxPriceMicros))
	}
	return nil
}

func checkPriceMax(field string, p int64) error {
	if p < 0 || p > MaxPriceMicros {
		return p2p.Errf(p2p.ErrMalformed, "%s %d not in 0..%d", field, p, int64(MaxPriceMicros))
	}
	return nil
}

func checkDuration(field string, s uint32) error {
	if d := time.Duration(s) * time.Second; d < MinDuration || d > MaxDuration {
		return p2p.Errf(p2p.ErrMalformed, "%s %d not within %s..%s", field, s, MinDuration, MaxDuration)
	}
	return nil
}

func checkRegion(s string) error {
	if len(s) > MaxRegionBytes {
		return p2p.Errf(p2p.ErrMalformed, "region is %d bytes (limit %d)", len(s), MaxRegionBytes)
	}
	return nil
}

// checkModel checks that s is a model slug: ^[a-z0-9][a-z0-9-]{0,31}$.
func checkModel(s string) error {
	ok := len(s) > 0 && len(s) <= 32
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0
	}
	if !ok {
		return p2p.Errf(p2p.ErrMalformed, "model %q is not a model slug", s)
	}
	return nil
}

func checkUUIDs(uuids []string, count uint32) error {
	if len(uuids) == 0 {
		return nil
	}
	if len(uuids) != int(count) {
		return p2p.Errf(p2p.ErrMalformed, "%d gpu_uuids for count %d", len(uuids), count)
	}
	seen := make(map[string]bool, len(uuids))
	for i, u := range uuids {
		if u == "" || len(u) > MaxUUIDBytes || seen[u] {
			return p2p.Errf(p2p.ErrMalformed, "gpu_uuids[%d] %q empty, too long or repeated", i, u)
		}
		seen[u] = true
	}
	return nil
}

func parseAddrs(raw [][]byte, least int) ([]ma.Multiaddr, error) {
	if len(raw) < least || len(raw) > MaxAddrs {
		return nil, p2p.Errf(p2p.ErrMalformed, "%d addrs, want %d..%d", len(raw), least, MaxAddrs)
	}
	addrs := make([]ma.Multiaddr, 0, len(raw))
	for i, b := range raw {
		a, err := ma.NewMultiaddrBytes(b)
		if err != nil {
			return nil, p2p.Errf(p2p.ErrMalformed, "addrs[%d]: %v", i, err)
		}
		addrs = append(addrs, a)
	}
	return addrs, nil
}

func parseID(field string, b []byte) (ID, error) {
	var id ID
	if len(b) != len(id) {
		return id, p2p.Errf(p2p.ErrMalformed, "%s is %d bytes, want %d", field, len(b), len(id))
	}
	copy(id[:], b)
	return id, nil
}
