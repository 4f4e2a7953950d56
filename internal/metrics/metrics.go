// Package metrics defines gpumesh's own Prometheus metrics, which a node
// serves at /metrics beside go-libp2p's: gossip records by topic and by
// why they were refused, quotes and leases, receipts and vouchers,
// challenges by verdict, and gauges read at scrape time (jobs by state,
// the store's size). The API's requests are counted by node/api's
// Instrument.
//
// Nothing here is global: New registers a fresh set of collectors with the
// registry it is given (a node's own), so that two nodes in one process
// keep two sets. Every label value is one of the typed constants below,
// so each metric has a small, fixed set of series; New creates them all at
// zero, so that a rate over a counter that has not moved yet is 0, not
// absent. The packages that count take a *Gossip, *Market, *Settle or
// *Audit (nil: count nothing) and never touch prometheus themselves.
//
// docs/API.md lists every metric with its labels.
package metrics

import (
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace prefixes every metric name.
const Namespace = "gpumesh"

// Metrics are one node's metrics.
type Metrics struct {
	Gossip *Gossip
	Market *Market
	Settle *Settle
	Audit  *Audit
	// Profiles counts the peers' profiles this node fetched, by where
	// they came from.
	Profiles *Profiles

	reg prometheus.Registerer
}

// New makes the metrics and registers them with reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Gossip:   newGossip(),
		Market:   newMarket(),
		Settle:   newSettle(),
		Audit:    newAudit(),
		Profiles: newProfiles(),
		reg:      reg,
	}
	for _, c := range []prometheus.Collector{
		m.Gossip.received, m.Gossip.accepted, m.Gossip.rejected, m.Gossip.published,
		m.Market.quotes, m.Market.leases, m.Market.gangs, m.Settle.receipts, m.Settle.vouchers, m.Audit.challenges,
		m.Profiles.fetched,
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	return m, nil
}

// counter is a CounterVec named gpumesh_<name>.
func counter(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
}

// Reason is why a gossip validator refused a record: a small, fixed set,
// each standing for one or a few of the validators' named errors.
type Reason string

// The reasons a record is refused. Those marked (ignored) are the ones
// pubsub ignores (p2p.Verdict): the record is dropped, its relay not
// penalised; the others are rejected, and lower the relay's score.
const (
	ReasonOversize  Reason = "oversize"  // over the record type's size limit
	ReasonRate      Reason = "rate"      // its author over its rate limit (ignored)
	ReasonSignature Reason = "signature" // a bad envelope or signature, or not signed by its author
	ReasonMalformed Reason = "malformed" // does not decode, a bad field or key, an unsupported version
	ReasonExpired   Reason = "expired"   // past its expiry (ignored)
	ReasonFuture    Reason = "future"    // dated in the future beyond the clock skew allowed
	ReasonReplay    Reason = "replay"    // a signer and nonce already accepted
	ReasonStale     Reason = "stale"     // older than one already seen, or already held (ignored)
	ReasonQuota     Reason = "quota"     // valid, but over a cap of ours (ignored)
	ReasonMismatch  Reason = "mismatch"  // contradicts a record it embeds
	ReasonOther     Reason = "other"     // anything else
)

// Reasons are all the reasons, in the order above.
var Reasons = []Reason{ReasonOversize, ReasonRate, ReasonSignature, ReasonMalformed, ReasonExpired,
	ReasonFuture, ReasonReplay, ReasonStale, ReasonQuota, ReasonMismatch, ReasonOther}

// Gossip counts the records of each gossip topic. Received counts every
// record another peer delivered that the topic's validator checked (pubsub
// drops the copies it has seen before); each is then accepted or refused.
type Gossip struct {
	received, accepted, rejected, published *prometheus.CounterVec
}

func newGossip() *Gossip {
	return &Gossip{
		received:  counter("gossip_received_total", "Gossip records delivered by other peers and checked by the topic's validator.", "topic"),
		accepted:  counter("gossip_accepted_total", "Gossip records the topic's validator accepted.", "topic"),
		rejected:  counter("gossip_rejected_total", "Gossip records the topic's validator refused, by reason (ignored or rejected: see docs/PROTOCOL.md §8.1).", "topic", "reason"),
		published: counter("gossip_published_total", "Records this node published on the topic.", "topic"),
	}
}

// Topic creates topic's series at zero; a node calls it for each topic it
// joins.
func (g *Gossip) Topic(topic string) {
	if g == nil {
		return
	}
	g.received.WithLabelValues(topic)
	g.accepted.WithLabelValues(topic)
	g.published.WithLabelValues(topic)
	for _, r := range Reasons {
		g.rejected.WithLabelValues(topic, string(r))
	}
}

// Accepted counts a record of topic received and accepted.
func (g *Gossip) Accepted(topic string) {
	if g == nil {
		return
	}
	g.received.WithLabelValues(topic).Inc()
	g.accepted.WithLabelValues(topic).Inc()
}

// Rejected counts a record of topic received and refused for r.
func (g *Gossip) Rejected(topic string, r Reason) {
	if g == nil {
		return
	}
	if !slices.Contains(Reasons, r) {
		r = ReasonOther
	}
	g.received.WithLabelValues(topic).Inc()
	g.rejected.WithLabelValues(topic, string(r)).Inc()
}

// Published counts a record this node published on topic.
func (g *Gossip) Published(topic string) {
	if g == nil {
		return
	}
	g.published.WithLabelValues(topic).Inc()
}

// Side is the part a node plays in a lease.
type Side string

const (
	Supplier Side = "supplier"
	Renter   Side = "renter"
)

// Outcome is how a quote, a lease, a receipt or a voucher ended, seen
// from one side. Each metric takes the outcomes its table below lists.
type Outcome string

const (
	// Quotes, supplier side.
	QuoteSent       Outcome = "sent"       // a priced quote sent to the bidder
	QuoteDeclined   Outcome = "declined"   // a decline sent (supplier) or received (renter)
	QuoteUnanswered Outcome = "unanswered" // a bid it would answer, left unanswered: its author is over its quota of answers
	QuoteFailed     Outcome = "failed"     // a quote or decline that could not be sealed or sent
	// Quotes, renter side.
	QuoteReceived Outcome = "received" // a priced quote received for a bid it waits on
	QuoteInvalid  Outcome = "invalid"  // a quote that failed its checks

	// Leases.
	LeaseConfirmed Outcome = "confirmed" // signed by both and confirmed: kept by both sides
	LeaseRefused   Outcome = "refused"   // the supplier refused the proposal (or the confirmation)
	LeaseLapsed    Outcome = "lapsed"    // supplier: countersigned but not confirmed in time
	LeaseReleased  Outcome = "released"  // supplier: confirmed, but no job started on it within its claim window
	LeaseWithdrawn Outcome = "withdrawn" // countersigned, then given up by the renter before confirmation (a gang's spare)
	LeaseFailed    Outcome = "failed"    // renter: the exchange failed (stream, bad answer, store)

	// Receipts and vouchers.
	Issued   Outcome = "issued"   // a receipt signed by the supplier's meter, a voucher by the renter's payer
	Withheld Outcome = "withheld" // supplier: the meter would not issue a receipt (over credit, stale attempt, ...)
	Accepted Outcome = "accepted" // a receipt the renter checked and paid, a voucher the supplier checked and kept
	Refused  Outcome = "refused"  // refused by its checks, not evidence
	Evidence Outcome = "evidence" // refused as proof of misbehaviour (evidence stored)
)

// outcomes lists, per side, the outcomes a metric takes.
type outcomes map[Side][]Outcome

// counts is a counter by side and outcome whose series start at zero.
func counts(name, help string, valid outcomes) *prometheus.CounterVec {
	c := counter(name, help, "side", "outcome")
	for side, list := range valid {
		for _, o := range list {
			c.WithLabelValues(string(side), string(o))
		}
	}
	return c
}

// Market counts quotes and leases by side and outcome, and gang leases
// by outcome.
type Market struct {
	quotes, leases *prometheus.CounterVec
	gangs          *prometheus.CounterVec
}

// Gang lease outcomes (renter).
const (
	GangLeased Outcome = "leased" // every member confirmed
	GangRetry  Outcome = "retry"  // a try that did not make the gang whole: everything released, tried again
	GangFailed Outcome = "failed" // no gang before RentFor or the context ended
)

func newMarket() *Market {
	return &Market{
		quotes: counts("market_quotes_total", "Answers to bids, by side (supplier: sent; renter: received) and outcome.", outcomes{
			Supplier: {QuoteSent, QuoteDeclined, QuoteUnanswered, QuoteFailed},
			Renter:   {QuoteReceived, QuoteDeclined, QuoteInvalid},
		}),
		leases: counts("market_leases_total", "Lease exchanges, by side and outcome.", outcomes{
			Supplier: {LeaseConfirmed, LeaseRefused, LeaseLapsed, LeaseReleased, LeaseWithdrawn},
			Renter:   {LeaseConfirmed, LeaseRefused, LeaseFailed, LeaseWithdrawn},
		}),
		gangs: gangCounter(),
	}
}

func gangCounter() *prometheus.CounterVec {
	c := counter("market_gangs_total", "Gang leases (leases on several suppliers, all or nothing), by outcome: each try that failed and was retried, and how each gang ended.", "outcome")
	for _, o := range []Outcome{GangLeased, GangRetry, GangFailed} {
		c.WithLabelValues(string(o))
	}
	return c
}

// Gang counts a gang lease's try or end.
func (m *Market) Gang(o Outcome) {
	if m != nil {
		m.gangs.WithLabelValues(string(o)).Inc()
	}
}

// Quote counts an answer to a bid.
func (m *Market) Quote(s Side, o Outcome) {
	if m != nil {
		m.quotes.WithLabelValues(string(s), string(o)).Inc()
	}
}

// Lease counts how a lease exchange ended, or a lease released.
func (m *Market) Lease(s Side, o Outcome) {
	if m != nil {
		m.leases.WithLabelValues(string(s), string(o)).Inc()
	}
}

// Settle counts receipts and vouchers by side and outcome.
type Settle struct {
	receipts, vouchers *prometheus.CounterVec
}

func newSettle() *Settle {
	return &Settle{
		receipts: counts("settle_receipts_total", "Usage receipts, by side (supplier: issued; renter: checked) and outcome.", outcomes{
			Supplier: {Issued, Withheld},
			Renter:   {Accepted, Refused, Evidence},
		}),
		vouchers: counts("settle_vouchers_total", "Payment vouchers, by side (renter: issued; supplier: checked) and outcome.", outcomes{
			Renter:   {Issued},
			Supplier: {Accepted, Refused, Evidence},
		}),
	}
}

// Receipt counts a receipt issued, withheld or checked.
func (m *Settle) Receipt(s Side, o Outcome) {
	if m != nil {
		m.receipts.WithLabelValues(string(s), string(o)).Inc()
	}
}

// Voucher counts a voucher issued or checked.
func (m *Settle) Voucher(s Side, o Outcome) {
	if m != nil {
		m.vouchers.WithLabelValues(string(s), string(o)).Inc()
	}
}

// Verdict is how a challenge of a supplier's GPUs ended.
type Verdict string

const (
	Passed      Verdict = "passed"      // the GPUs of one model proved what they claim
	Failed      Verdict = "failed"      // they did not (too slow, wrong rows, ...)
	Unreachable Verdict = "unreachable" // the prover could not be reached
	Busy        Verdict = "busy"        // the prover was busy with another challenge
	Error       Verdict = "error"       // any other failure to challenge
	// NoProver and Version judge nothing: the supplier's GPUs are real
	// and it has no GPU prover, or it speaks only a retired protocol.
	NoProver Verdict = "no-prover"
	Version  Verdict = "version"
)

// Verdicts are all the verdicts.
var Verdicts = []Verdict{Passed, Failed, Unreachable, Busy, Error, NoProver, Version}

// Audit counts the challenges this node ran.
type Audit struct {
	challenges *prometheus.CounterVec
}

func newAudit() *Audit {
	c := counter("challenges_total", "Challenges this node ran, by verdict: one per GPU model challenged, or one per failed attempt.", "verdict")
	for _, v := range Verdicts {
		c.WithLabelValues(string(v))
	}
	return &Audit{challenges: c}
}

// Challenge counts one challenge's verdict.
func (a *Audit) Challenge(v Verdict) {
	if a != nil {
		a.challenges.WithLabelValues(string(v)).Inc()
	}
}

// Source is where a fetched profile came from.
type Source string

const (
	FromDirectory Source = "directory" // a connected peer's directory, in a batch
	FromDHT       Source = "dht"       // a DHT walk
)

// Profiles counts the peers' profiles a node fetched.
type Profiles struct {
	fetched *prometheus.CounterVec
}

func newProfiles() *Profiles {
	c := counter("profiles_fetched_total", "Peers' profiles fetched and kept after a heartbeat announced them, by source: a connected peer's directory or a DHT walk.", "source")
	for _, s := range []Source{FromDirectory, FromDHT} {
		c.WithLabelValues(string(s))
	}
	return &Profiles{fetched: c}
}

// Fetched counts one profile kept, fetched from s.
func (p *Profiles) Fetched(s Source) {
	if p != nil {
		p.fetched.WithLabelValues(string(s)).Inc()
	}
}

// WatchJobs registers gpumesh_jobs{state}: the renter's jobs by state,
// counted by count at every scrape; states are reported even at zero.
func (m *Metrics) WatchJobs(states []string, count func() map[string]int64) error {
	return m.watch("jobs", "Jobs this node runs as a renter, by state (read at scrape).", "state", states, count)
}

// WatchAttempts registers gpumesh_job_attempts{state}: the attempts a
// supplier's executor holds, by state, counted at every scrape.
func (m *Metrics) WatchAttempts(states []string, count func() map[string]int64) error {
	return m.watch("job_attempts", "Job attempts this node runs as a supplier, by state (read at scrape).", "state", states, count)
}

// WatchStore registers gpumesh_store_size_bytes{part}: the store's
// LSM tree ("lsm") and value log ("vlog") on disk, read at every scrape.
func (m *Metrics) WatchStore(size func() (lsm, vlog int64)) error {
	return m.watch("store_size_bytes", "Size on disk of the store's LSM tree (lsm) and value log (vlog) (read at scrape).", "part",
		[]string{"lsm", "vlog"}, func() map[string]int64 {
			lsm, vlog := size()
			return map[string]int64{"lsm": lsm, "vlog": vlog}
		})
}

func (m *Metrics) watch(name, help, label string, keys []string, read func() map[string]int64) error {
	c := &gauges{
		desc: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, []string{label}, nil),
		keys: keys, read: read,
	}
	if err := m.reg.Register(c); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// gauges is a gauge with one label whose values read calls at scrape
// time: every key in keys (zero if read has none), then any other read
// returns.
type gauges struct {
	desc *prometheus.Desc
	keys []string
	read func() map[string]int64
}

func (g *gauges) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *gauges) Collect(ch chan<- prometheus.Metric) {
	vals := g.read()
	for _, k := range g.keys {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(vals[k]), k)
	}
	for k, v := range vals {
		if !slices.Contains(g.keys, k) {
			ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(v), k)
		}
	}
}
