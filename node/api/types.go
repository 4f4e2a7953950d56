package api

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/audit"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// Health is the body of GET /healthz.
type Health struct {
	Status     string   `json:"status"`
	PeerID     string   `json:"peer_id"`
	Addrs      []string `json:"addrs"`
	Peers      int      `json:"peers"`
	GPUs       int      `json:"gpus"`
	Region     string   `json:"region"`
	Advertised bool     `json:"advertised"`
	ProfileSeq uint64   `json:"profile_seq"`
	Version    string   `json:"version"`
	Uptime     string   `json:"uptime"`
}

// Peer is one peer of GET /api/v1/peers: what the node knows of it from
// its heartbeats, its connection and its attestations.
type Peer struct {
	ID         peer.ID   `json:"peer_id"`
	LastSeen   time.Time `json:"last_seen"`
	Heartbeats uint64    `json:"heartbeats"`
	GPUsTotal  uint32    `json:"gpus_total"`
	GPUsFree   uint32    `json:"gpus_free"`
	Region     string    `json:"region"`
	Software   string    `json:"software"`
	ProfileSeq uint64    `json:"profile_seq"`
	Connected  bool      `json:"connected"`
	Conn       string    `json:"conn,omitempty"` // "direct", or "relayed" when only a relay (limited connection) joins the two
	// PunchMs is how long hole punching took, the last time a relayed
	// connection to the peer became direct; omitted when that never
	// happened (the peer was dialled directly, or is relay-only).
	PunchMs    float64  `json:"punch_ms,omitempty"`
	LatencyMs  float64  `json:"latency_ms,omitempty"`
	Score      float64  `json:"score"`                // GossipSub peer score; negative after invalid messages
	Reputation float64  `json:"reputation"`           // 0..1 from attestations, 0.5 unknown
	Verified   bool     `json:"verified"`             // passed challenges of enough trusted challengers
	UptimePct  *float64 `json:"uptime_pct,omitempty"` // from uptime pings, when any
}

// OrderView is one order of the book as the CLI and the API show it.
type OrderView struct {
	ID          string    `json:"id"`
	Kind        string    `json:"kind"` // ask | bid
	Peer        string    `json:"peer"`
	Model       string    `json:"model,omitempty"`  // asks
	Filter      string    `json:"filter,omitempty"` // bids
	Count       int       `json:"count"`
	PriceMicros int64     `json:"price_micros"` // ask price, or bid maximum
	Price       string    `json:"price"`
	Region      string    `json:"region,omitempty"`
	Pricing     string    `json:"pricing,omitempty"`
	DurationS   uint32    `json:"duration_s,omitempty"`
	Simulated   bool      `json:"simulated,omitempty"`
	Created     time.Time `json:"created"`
	Expires     time.Time `json:"expires"`
	// Received is when this node's book took the order: Received minus
	// Created is how long gossip took to bring it (asks only).
	Received *time.Time `json:"received,omitempty"`
}

// Orders is the body of GET /api/v1/orders: the asks that the filter
// accepts (cheapest first) and the bids whose models it allows.
type Orders struct {
	Asks []OrderView `json:"asks"`
	Bids []OrderView `json:"bids"`
}

// LeaseView is a lease as the CLI and the API show it.
type LeaseView struct {
	LeaseID     string    `json:"lease_id"`
	Supplier    string    `json:"supplier"`
	Renter      string    `json:"renter"`
	Model       string    `json:"model"`
	Count       int       `json:"count"`
	PriceMicros int64     `json:"price_micros"`
	Price       string    `json:"price"`
	Start       time.Time `json:"start"`
	End         time.Time `json:"end"`
	GPUs        []string  `json:"gpus"`
	Verified    bool      `json:"verified"`
	State       string    `json:"state,omitempty"`
	Role        string    `json:"role,omitempty"`
	Reason      string    `json:"reason,omitempty"` // why a supplier released it
}

// ReputationView is one supplier's standing as the node computes it.
type ReputationView struct {
	PeerID string `json:"peer_id"`
	reputation.Score
}

// ChallengeReport is the outcome of challenging every model (or one) of
// a supplier. JSON names are a contract of `gpumesh challenge --json`.
type ChallengeReport struct {
	PeerID            string         `json:"peer_id"`
	Passed            bool           `json:"passed"`
	Reason            string         `json:"reason"`
	GPUs              int            `json:"gpus"`
	Claimed           int            `json:"claimed"`
	Measured          float64        `json:"measured"`
	Expected          float64        `json:"expected"`
	RowsChecked       int            `json:"rows_checked"`
	VerifierCostRatio float64        `json:"verifier_cost_ratio"`
	Attested          bool           `json:"attested"`
	Models            []audit.Result `json:"models"`
}

// ConflictBody is the body of a 409 from POST /api/v1/jobs: no supplier
// matched, and why each was passed over.
type ConflictBody struct {
	Error   string   `json:"error"`
	Reasons []string `json:"reasons"`
}

// The statuses of a Check, from good to bad.
const (
	StatusOK   = "ok"
	StatusWarn = "warn"
	StatusFail = "fail"
)

// Check is one finding of `gpumesh doctor`. JSON names are a contract of
// `gpumesh doctor --json` and GET /api/v1/doctor.
type Check struct {
	Name   string `json:"name"`          // e.g. "reachability", "disk"
	Status string `json:"status"`        // StatusOK, StatusWarn or StatusFail
	Detail string `json:"detail"`        // what was found
	Fix    string `json:"fix,omitempty"` // what to do, for warn and fail
}

// DoctorReport is the body of GET /api/v1/doctor: the checks in a fixed
// order, the reachability facts they rest on (absent when no node was
// asked) and when the report was made.
type DoctorReport struct {
	PeerID string         `json:"peer_id,omitempty"`
	Checks []Check        `json:"checks"`
	Reach  *p2p.ReachInfo `json:"reach,omitempty"`
	Time   time.Time      `json:"time"`
}

// Failed reports whether any check failed.
func (r DoctorReport) Failed() bool {
	for _, c := range r.Checks {
		if c.Status == StatusFail {
			return true
		}
	}
	return false
}

// Check returns the check called name, if the report has it.
func (r DoctorReport) Check(name string) (Check, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

// Redeemable is one chain-settled lease's best chain voucher, as a
// supplier keeps it (GET /api/v1/chain/redeemable).
type Redeemable struct {
	LeaseID   string       `json:"lease_id"`
	Nonce     uint64       `json:"nonce"`
	CumMicros money.Micros `json:"cum_micros"`
	Renter    string       `json:"renter"`   // the renter's payment address
	Supplier  string       `json:"supplier"` // this supplier's
	ChainID   string       `json:"chain_id"`
	Contract  string       `json:"contract"`
	// Raw is the chainpay.Redeemable encoding, hex: what a redeemer
	// decodes (chainpay.DecodeRedeemable) and sends to the contract.
	Raw string `json:"raw"`
}

// SettleStatus is `gpumesh settle status --json`: the node's chain, its
// payment address, its channels as a renter to the suppliers asked
// about, and, as a supplier, what it may redeem.
type SettleStatus struct {
	Chain      string          `json:"chain"`
	ChainID    string          `json:"chain_id"`
	Contract   string          `json:"contract"`
	Address    string          `json:"address"`
	Channels   []ChannelStatus `json:"channels"`
	Redeemable []RedeemStatus  `json:"redeemable"`
}

// ChannelStatus is a renter's channel to one supplier.
type ChannelStatus struct {
	Supplier string       `json:"supplier"`
	Balance  money.Micros `json:"balance_micros"`
	Window   string       `json:"window"`
	ClosesAt string       `json:"closes_at,omitempty"` // RFC 3339; empty while open
}

// RedeemStatus is one kept chain voucher and what its lease's lane has
// been paid on chain.
type RedeemStatus struct {
	LeaseID    string       `json:"lease_id"`
	Renter     string       `json:"renter"`
	Nonce      uint64       `json:"nonce"`
	Cum        money.Micros `json:"cum_micros"`
	Redeemed   money.Micros `json:"redeemed_micros"`
	Unredeemed money.Micros `json:"unredeemed_micros"`
	Closing    bool         `json:"closing"` // the renter started closing the channel: redeem now
}
