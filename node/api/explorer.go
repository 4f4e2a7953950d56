package api

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/verify/reputation"
)

// The Explorer's read routes are public: they answer without the token,
// since all they show is what any peer of the network can fetch and
// check for itself (profiles, heartbeats, asks, bids, trade prints,
// attestations), as this node received and checked it. They never show
// job specs, logs, keys, local paths or tokens, nor the node's own
// leases and receipts (those stay behind the token: PathLeases,
// PathReceipts).

// ExplorerData is what the Explorer's routes read; package node
// implements it.
type ExplorerData interface {
	Summary() ExplorerSummary
	Suppliers() []SupplierRow
	// Supplier is one supplier's page; an error that is ErrNotFound
	// (errors.Is) when the node knows nothing of it.
	Supplier(id peer.ID) (SupplierDetail, error)
	// Trades lists the trade prints the node holds, oldest first: of
	// model, or of every model when model is "".
	Trades(model string) []TradeView
	// Attestations lists the attestations the node holds about subject
	// (all when subject is ""), newest first, at most MaxExplorerList.
	Attestations(subject peer.ID) []AttestationView
	// Book is the order book: every live ask and bid.
	Book() Orders
}

// MaxExplorerList bounds the lists of a supplier's page and of
// attestations.
const MaxExplorerList = 200

// ExplorerSummary is the body of GET /api/v1/explorer/summary: the
// network as this node sees it.
type ExplorerSummary struct {
	PeerID            string         `json:"peer_id"` // the node answering
	Time              time.Time      `json:"time"`
	Nodes             int            `json:"nodes"`     // heard from in the last 10 min, this one included
	Suppliers         int            `json:"suppliers"` // of those, nodes with GPUs
	GPUs              GPUCounts      `json:"gpus"`
	Models            []ModelSummary `json:"models"`  // by model
	Regions           []RegionCount  `json:"regions"` // by region
	Asks              int            `json:"asks"`
	Bids              int            `json:"bids"`
	Trades            int            `json:"trades"` // trade prints the node holds
	VerifiedSuppliers int            `json:"verified_suppliers"`
	Attestations      int            `json:"attestations"` // attestations the node holds
}

// GPUCounts counts GPUs by state, from suppliers' heartbeats.
type GPUCounts struct {
	Total  int `json:"total"`
	Free   int `json:"free"`
	Leased int `json:"leased"`
}

// ModelSummary is one GPU model across the network.
type ModelSummary struct {
	Model          string `json:"model"`
	Suppliers      int    `json:"suppliers"`       // with a live ask of it
	GPUs           int    `json:"gpus"`            // offered in live asks
	Asks           int    `json:"asks"`            // live asks
	CheapestMicros int64  `json:"cheapest_micros"` // 0: no ask
	Trades         int    `json:"trades"`
	LastMicros     int64  `json:"last_micros"` // 0: no trade
	VWAPMicros     int64  `json:"vwap_micros"` // 0: no trade
}

// RegionCount is one region's suppliers and GPUs.
type RegionCount struct {
	Region    string `json:"region"`
	Suppliers int    `json:"suppliers"`
	GPUs      int    `json:"gpus"`
}

// ModelCount is a number of GPUs of one model.
type ModelCount struct {
	Model string `json:"model"`
	Count int    `json:"count"`
}

// SupplierRow is one supplier of GET /api/v1/explorer/suppliers.
type SupplierRow struct {
	PeerID         string       `json:"peer_id"`
	Region         string       `json:"region"`
	Software       string       `json:"software"`
	GPUsTotal      int          `json:"gpus_total"`
	GPUsFree       int          `json:"gpus_free"`
	Models         []ModelCount `json:"models"` // from its live asks
	Asks           int          `json:"asks"`
	CheapestMicros int64        `json:"cheapest_micros"` // 0: no ask
	Reputation     float64      `json:"reputation"`
	Verified       bool         `json:"verified"`
	// Simulated: the supplier sells simulated GPUs (an ask of its says
	// so): no hardware stands behind them, and its verdicts prove none.
	Simulated      bool      `json:"simulated"`
	UptimePct      *float64  `json:"uptime_pct"`   // null: no uptime checks
	LastVerdict    *Verdict  `json:"last_verdict"` // null: never challenged
	LastSeen       time.Time `json:"last_seen"`
	Connected      bool      `json:"connected"`
	LeasesServed   int       `json:"leases_served"` // from trade prints
	GPUHoursServed float64   `json:"gpu_hours_served"`
}

// Verdict is the outcome of a challenge.
type Verdict struct {
	Model      string    `json:"model"`
	Passed     bool      `json:"passed"`
	Reason     string    `json:"reason"`
	Challenger string    `json:"challenger"`
	Time       time.Time `json:"time"`
}

// SupplierDetail is the body of GET /api/v1/explorer/suppliers/{peer}.
type SupplierDetail struct {
	Supplier     SupplierRow       `json:"supplier"`
	Asks         []OrderView       `json:"asks"`
	Attestations []AttestationView `json:"attestations"` // newest first
	Uptime       []UptimeDay       `json:"uptime"`       // 30 days, oldest first
	Trades       []TradeView       `json:"trades"`       // leases it served, newest first
	Reputation   reputation.Score  `json:"reputation"`
	VouchedBy    []string          `json:"vouched_by"` // challengers whose latest challenge of it passed
}

// UptimeDay is one UTC day of a supplier's uptime checks.
type UptimeDay struct {
	Day    string   `json:"day"` // YYYY-MM-DD
	Checks int      `json:"checks"`
	Passed int      `json:"passed"`
	Pct    *float64 `json:"pct"` // null: no checks that day
}

// AttestationView is one attestation as the Explorer shows it.
type AttestationView struct {
	ID               string    `json:"id"` // first 12 hex digits of its ID
	Challenger       string    `json:"challenger"`
	Subject          string    `json:"subject"`
	Kind             string    `json:"kind"` // challenge | uptime
	Model            string    `json:"model"`
	Passed           bool      `json:"passed"`
	Reason           string    `json:"reason"`
	GPUs             int       `json:"gpus"`
	MeasuredMilliOps int64     `json:"measured_milli_ops"`
	ExpectedMilliOps int64     `json:"expected_milli_ops"`
	Time             time.Time `json:"time"`
	// SignatureOK: the node checked the record's signature again when
	// it first read it back from its store (reputation.Book.List).
	SignatureOK bool `json:"signature_ok"`
}

// TradeView is one trade print: a lease a supplier made, as it announced
// it.
type TradeView struct {
	ID          string    `json:"id"` // first 12 hex digits of the lease ID
	Model       string    `json:"model"`
	Supplier    string    `json:"supplier"`
	Count       int       `json:"count"`
	PriceMicros int64     `json:"price_micros"`
	Price       string    `json:"price"`
	GPUHours    float64   `json:"gpu_hours"`
	Time        time.Time `json:"time"`
	SignatureOK bool      `json:"signature_ok"` // checked again as the node answers
}

// explorerHandlers are the handlers of the Explorer's routes, from d
// (nil: 503, the node serves no Explorer).
func explorerHandlers(d ExplorerData) map[Route]http.HandlerFunc {
	get := http.MethodGet
	with := func(f func(w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if d == nil {
				http.Error(w, "this node serves no Explorer", http.StatusServiceUnavailable)
				return
			}
			f(w, r)
		}
	}
	peerParam := func(w http.ResponseWriter, s string) (peer.ID, bool) {
		if s == "" {
			return "", true
		}
		id, err := peer.Decode(s)
		if err != nil {
			http.Error(w, "peer: "+err.Error(), http.StatusBadRequest)
			return "", false
		}
		return id, true
	}
	return map[Route]http.HandlerFunc{
		{get, PathExplorerSummary}:   with(func(w http.ResponseWriter, r *http.Request) { writeJSON(w, d.Summary()) }),
		{get, PathExplorerSuppliers}: with(func(w http.ResponseWriter, r *http.Request) { writeJSON(w, nonNil(d.Suppliers())) }),
		{get, PathExplorerSupplier}: with(func(w http.ResponseWriter, r *http.Request) {
			id, ok := peerParam(w, r.PathValue("peer"))
			if !ok {
				return
			}
			if id == "" {
				http.Error(w, "peer: missing", http.StatusBadRequest)
				return
			}
			sd, err := d.Supplier(id)
			if errors.Is(err, ErrNotFound) {
				http.Error(w, "this node knows no supplier "+id.String(), http.StatusNotFound)
				return
			}
			if err != nil {
				fail(w, err, http.StatusInternalServerError)
				return
			}
			writeJSON(w, sd)
		}),
		{get, PathExplorerTrades}: with(func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, nonNil(d.Trades(r.URL.Query().Get(QueryModel))))
		}),
		{get, PathExplorerAttestations}: with(func(w http.ResponseWriter, r *http.Request) {
			id, ok := peerParam(w, r.URL.Query().Get(QueryPeer))
			if !ok {
				return
			}
			writeJSON(w, nonNil(d.Attestations(id)))
		}),
		{get, PathExplorerBook}: with(func(w http.ResponseWriter, r *http.Request) {
			o := d.Book()
			o.Asks, o.Bids = nonNil(o.Asks), nonNil(o.Bids)
			writeJSON(w, o)
		}),
	}
}

// Public reports whether r may be served without the token: GET (or
// HEAD) of /healthz, of the Explorer's page and assets, of its read
// routes and of the OpenAPI document.
func Public(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	p := r.URL.Path
	switch {
	case p == PathHealth, p == ExplorerPage, p == PathOpenAPI:
		return true
	case strings.HasPrefix(p, ExplorerAssets), strings.HasPrefix(p, ExplorerRoutes):
		return true
	}
	return false
}
