package node

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sort"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
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

// startAPI serves the node's HTTP API on cfg.API unless it is "off". The
// listener is bound before New returns, so a port conflict fails start-up.
func (n *Node) startAPI() error {
	if n.cfg.API == "" || n.cfg.API == "off" {
		return nil
	}
	ln, err := net.Listen("tcp", n.cfg.API)
	if err != nil {
		return fmt.Errorf("node: api: listen on %s: %w (pick another --api address, or --api off)", n.cfg.API, err)
	}
	if host, _, _ := net.SplitHostPort(ln.Addr().String()); !net.ParseIP(host).IsLoopback() {
		n.log.Warn("the API listens beyond loopback", "addr", ln.Addr())
	}
	token, err := apiToken(n.cfg.DataDir)
	if err != nil {
		ln.Close()
		return err
	}
	started := n.now()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, n.health(started))
	})
	mux.HandleFunc("GET /api/v1/peers", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, n.Peers())
	})
	mux.HandleFunc("GET /api/v1/gpus", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, nonNil(n.gpus))
	})
	mux.HandleFunc("GET /api/v1/offers", func(w http.ResponseWriter, r *http.Request) {
		f, err := market.ParseFilter(r.URL.Query().Get("filter"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ps, err := n.KnownProfiles()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, nonNil(MatchOffers(ps, f, n.market.book.Asks(""), n.verify.rep)))
	})
	mux.HandleFunc("GET /api/v1/orders", func(w http.ResponseWriter, r *http.Request) {
		f, err := market.ParseFilter(r.URL.Query().Get("filter"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, n.Orders(f))
	})
	mux.HandleFunc("GET /api/v1/leases", func(w http.ResponseWriter, r *http.Request) {
		ls, err := leaseViews(n.store, n.now())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, ls)
	})
	mux.HandleFunc("GET /api/v1/prices", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, nonNil(n.market.index.All()))
	})
	mux.HandleFunc("GET /api/v1/capacity", func(w http.ResponseWriter, r *http.Request) {
		if n.market.supplier == nil {
			writeJSON(w, []market.Capacity{})
			return
		}
		writeJSON(w, nonNil(n.market.supplier.Ledger().Capacity()))
	})
	// Every route but /healthz needs the token: requireToken, below,
	// guards the whole mux, so no route can be added without it.
	n.jobRoutes(mux)
	mux.HandleFunc("POST /api/v1/challenge", func(w http.ResponseWriter, r *http.Request) {
		id, err := peer.Decode(r.URL.Query().Get("peer"))
		if err != nil {
			http.Error(w, "peer: "+err.Error(), http.StatusBadRequest)
			return
		}
		rep, err := n.ChallengePeer(r.Context(), id, r.URL.Query().Get("model"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		writeJSON(w, rep)
	})
	mux.HandleFunc("GET /api/v1/reputation", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, n.ReputationView())
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{}))
	// Go's profiler, for operators chasing CPU or memory use.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	n.api = &http.Server{Handler: requireToken(token, mux), ReadHeaderTimeout: 5 * time.Second}
	n.apiLn = ln
	n.goLoop(func() {
		if err := n.api.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("api stopped", "err", err)
		}
	})
	return nil
}

// requireToken serves h only to requests that carry the node's token as
// a bearer token; GET /healthz alone is open, so that supervisors and the
// testnet can check a node is up. Loopback is no trust boundary: every
// local user, and every job a supplier runs (they share its network until
// jobs get a network of their own), can connect to it, and none of them
// can read the token (mode 0600, hidden from jobs).
func requireToken(token string, h http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			h.ServeHTTP(w, r)
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			http.Error(w, "a bearer token (DATA/"+TokenFile+") is required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// APIAddr is the address the API listens on, or "" when it is off.
func (n *Node) APIAddr() string {
	if n.apiLn == nil {
		return ""
	}
	return n.apiLn.Addr().String()
}

func (n *Node) health(started time.Time) Health {
	advertised := false
	select {
	case <-n.advertOK:
		advertised = true
	default:
	}
	h := Health{
		Status: "ok", PeerID: n.id.String(), Peers: len(n.net.Host.Network().Peers()),
		GPUs: len(n.gpus), Region: n.cfg.Region, Advertised: advertised,
		ProfileSeq: n.currentProfileSeq(), Version: Version,
		Uptime: n.now().Sub(started).Truncate(time.Second).String(),
	}
	for _, a := range n.Addrs() {
		h.Addrs = append(h.Addrs, a.String())
	}
	return h
}

// Peers lists connected peers and those heard from by heartbeat.
func (n *Node) Peers() []PeerState {
	states := n.peers.list(n.now())
	byID := map[string]int{}
	for i, s := range states {
		byID[s.ID.String()] = i
	}
	scores := n.net.PeerScores()
	for i := range states {
		states[i].Score = scores[states[i].ID]
	}
	for _, id := range n.net.Host.Network().Peers() {
		i, ok := byID[id.String()]
		if !ok {
			states = append(states, PeerState{ID: id, Score: scores[id]})
			i = len(states) - 1
		}
		states[i].Connected = true
		if rtt := n.net.Host.Peerstore().LatencyEWMA(id); rtt > 0 {
			states[i].LatencyMs = float64(rtt.Microseconds()) / 1000
		}
	}
	for i := range states {
		s := n.verify.rep.Score(states[i].ID)
		states[i].Reputation, states[i].Verified = s.Reputation, s.Verified
		if s.Pings > 0 {
			u := s.Uptime * 100
			states[i].UptimePct = &u
		}
	}
	return states
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
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
	Expires     time.Time `json:"expires"`
}

// Orders is the order book, asks that f accepts (cheapest first) and the
// bids whose models f allows.
type Orders struct {
	Asks []OrderView `json:"asks"`
	Bids []OrderView `json:"bids"`
}

// Orders lists the live orders of the node's book that f accepts.
func (n *Node) Orders(f market.Filter) Orders {
	out := Orders{Asks: []OrderView{}, Bids: []OrderView{}}
	for _, a := range n.market.book.Asks("") {
		o := n.offerOfAsk(a)
		if ok, _ := f.Match(o); !ok {
			continue
		}
		out.Asks = append(out.Asks, OrderView{
			ID: a.ID.String(), Kind: "ask", Peer: a.Supplier.String(), Model: a.Model, Count: int(a.Count),
			PriceMicros: a.PriceMicros, Price: money.Micros(a.PriceMicros).String(), Region: a.Region,
			Pricing: a.Pricing, Simulated: a.Simulated, Expires: a.Expires().UTC(),
		})
	}
	models := f.Models()
	for _, b := range n.market.book.Bids("") {
		if models != nil && !overlaps(models, b.Filter.Models()) {
			continue
		}
		out.Bids = append(out.Bids, OrderView{
			ID: b.ID.String(), Kind: "bid", Peer: b.Renter.String(), Filter: b.Filter.String(), Count: int(b.Count),
			PriceMicros: b.MaxPriceMicros, Price: money.Micros(b.MaxPriceMicros).String(), DurationS: b.DurationS,
			Expires: b.Expires().UTC(),
		})
	}
	return out
}

// offerOfAsk describes an ask as an offer, with the device-profile
// attributes of its model, so that filters apply to asks as to search.
func (n *Node) offerOfAsk(a *market.Ask) market.Offer {
	o := market.Offer{
		PeerID: a.Supplier.String(), Model: a.Model, Count: int(a.Count), Free: int(a.Count),
		Region: a.Region, Simulated: a.Simulated, PriceMicros: money.Micros(a.PriceMicros),
	}
	if prof, ok := catalog.Lookup(a.Model); ok {
		o.VRAMGiB, o.TFLOPS = prof.MemoryGiB, prof.TFLOPS()
		o.ComputeCapability = fmt.Sprintf("%d.%d", prof.CCMajor, prof.CCMinor)
	}
	return o
}

func overlaps(a, b []string) bool {
	if b == nil {
		return true
	}
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

// ReputationView is one supplier's standing as this node computes it.
type ReputationView struct {
	PeerID string `json:"peer_id"`
	reputation.Score
}

// ReputationView lists every peer the node has attestations about.
func (n *Node) ReputationView() []ReputationView {
	out := []ReputationView{}
	for id, s := range n.verify.rep.Scores() {
		out = append(out, ReputationView{PeerID: id.String(), Score: s})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PeerID < out[j].PeerID })
	return out
}
