package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/pprof"
	"strconv"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/settle"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/verify/inventory"
)

// Backend is what the handlers need of a node. Package node implements
// it; the handlers only parse requests, call it, and write its answers.
type Backend interface {
	Health() Health
	Peers() []Peer
	GPUs() []inventory.GPU
	// Offers lists the offers the node knows that f accepts.
	Offers(f market.Filter) ([]market.Offer, error)
	Orders(f market.Filter) Orders
	Leases() ([]LeaseView, error)
	// Rent leases GPUs with no job bound to them, as this node's renter.
	Rent(ctx context.Context, req market.RentRequest) (LeaseView, error)
	// ReleaseLease releases the lease this node rented whose ID starts
	// with id (wrapping ErrNoLease when there is none; a supplier's
	// refusal is a *market.ReleaseRefused).
	ReleaseLease(ctx context.Context, id string) (LeaseView, error)
	// Shell starts req's job on the lease this node rented whose ID
	// starts with lease, attaches a shell stream to it and returns that
	// stream (wrapping ErrNoLease when there is no such lease; a
	// supplier's refusal of the stream is a *shell.Refusal).
	Shell(ctx context.Context, lease string, req job.Request) (ShellSession, error)
	Prices() []market.PricePoint
	Capacity() []market.Capacity
	Reputation() []ReputationView
	// Challenge challenges a supplier's GPUs (all models, or model) and
	// attests the verdict.
	Challenge(ctx context.Context, id peer.ID, model string) (ChallengeReport, error)
	// Jobs is the node's job controller, or nil before it is started.
	Jobs() JobService
	// Receipts verifies the bills of the leases whose ID starts with
	// lease (all when empty); ErrNotStarted before jobs are started.
	Receipts(lease string) ([]settle.Report, error)
	// Redeemable lists the best chain voucher the supplier keeps of each
	// chain-settled lease; ErrNotStarted before jobs are started.
	Redeemable() ([]Redeemable, error)
	// Doctor checks what the node needs to be found and rented, as its
	// peers see it.
	Doctor(ctx context.Context) DoctorReport
}

// JobService runs a renter's jobs; *job.Controller implements it.
type JobService interface {
	Submit(ctx context.Context, req job.Request) (job.View, error)
	Jobs() []job.View
	Job(id string) (job.View, error)
	Stop(id, reason string) (job.View, error)
	Logs(ctx context.Context, id string, from int64, follow bool, w io.Writer) (int64, error)
	Forward(id string, p job.Publish) (job.ForwardView, error)
	Forwards(id string) ([]job.ForwardView, error)
	Unforward(id, listen string) error
}

// ErrNotStarted is what a backend returns for a part it has not started
// yet; the handler answers 503.
var ErrNotStarted = errors.New("jobs are not started yet")

type handlerOptions struct {
	metrics  http.Handler
	explorer ExplorerData
	ui       http.Handler
}

// HandlerOption configures NewHandler.
type HandlerOption func(*handlerOptions)

// WithMetrics serves h at /metrics (by default a 404).
func WithMetrics(h http.Handler) HandlerOption {
	return func(o *handlerOptions) { o.metrics = h }
}

// WithExplorer serves the Explorer: its read routes from d and its page
// and assets (GET / and /assets/) from ui. Without it those routes
// answer 503 and the page 404.
func WithExplorer(d ExplorerData, ui http.Handler) HandlerOption {
	return func(o *handlerOptions) { o.explorer, o.ui = d, ui }
}

// NewHandler serves every route of Routes from b, behind RequireToken
// (which leaves the Public ones open).
func NewHandler(b Backend, token string, opts ...HandlerOption) http.Handler {
	o := handlerOptions{metrics: http.NotFoundHandler()}
	for _, opt := range opts {
		opt(&o)
	}
	s := &server{b: b}
	handlers := s.handlers(o)
	maps.Copy(handlers, explorerHandlers(o.explorer))
	mux := http.NewServeMux()
	for _, rt := range Routes() {
		h, ok := handlers[rt]
		if !ok {
			panic("api: no handler for route " + rt.Pattern())
		}
		mux.HandleFunc(rt.Pattern(), h)
	}
	// Go's profiler, for operators chasing CPU or memory use: any
	// method, as net/http/pprof serves it.
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	ui := o.ui
	if ui == nil {
		ui = http.NotFoundHandler()
	}
	mux.Handle("GET "+ExplorerPage+"{$}", ui)
	mux.Handle("GET "+ExplorerAssets, ui)
	// Every route but the Public ones needs the token: RequireToken
	// guards the whole mux, so no route can be added without it.
	return RequireToken(token, mux)
}

type server struct {
	b Backend
}

// handlers maps each route to its handler.
func (s *server) handlers(o handlerOptions) map[Route]http.HandlerFunc {
	get, post, del := http.MethodGet, http.MethodPost, http.MethodDelete
	return map[Route]http.HandlerFunc{
		{get, PathHealth}:        func(w http.ResponseWriter, r *http.Request) { writeJSON(w, s.b.Health()) },
		{get, PathPeers}:         func(w http.ResponseWriter, r *http.Request) { writeJSON(w, nonNil(s.b.Peers())) },
		{get, PathGPUs}:          func(w http.ResponseWriter, r *http.Request) { writeJSON(w, nonNil(s.b.GPUs())) },
		{get, PathOffers}:        s.offers,
		{get, PathOrders}:        s.orders,
		{get, PathLeases}:        s.leases,
		{post, PathLeases}:       s.rent,
		{post, PathLeaseRelease}: s.releaseLease,
		{post, PathLeaseShell}:   s.shell,
		{get, PathPrices}:        func(w http.ResponseWriter, r *http.Request) { writeJSON(w, nonNil(s.b.Prices())) },
		{get, PathCapacity}:      func(w http.ResponseWriter, r *http.Request) { writeJSON(w, nonNil(s.b.Capacity())) },
		{get, PathReputation}:    func(w http.ResponseWriter, r *http.Request) { writeJSON(w, nonNil(s.b.Reputation())) },
		{post, PathChallenge}:    s.challenge,
		{post, PathJobs}:         s.submitJob,
		{get, PathJobs}:          s.jobs,
		{get, PathJob}:           s.job,
		{post, PathJobStop}:      s.stopJob,
		{get, PathJobLogs}:       s.logs,
		{get, PathForwards}:      s.forwards,
		{post, PathForwards}:     s.forward,
		{del, PathForwards}:      s.unforward,
		{get, PathReceipts}:      s.receipts,
		{get, PathRedeemable}:    s.redeemable,
		{get, PathDoctor}:        s.doctor,
		{get, PathMetrics}:       o.metrics.ServeHTTP,
		{"", PathPprof}:          pprof.Index,
		{get, PathOpenAPI}:       serveOpenAPI,
	}
}

func (s *server) offers(w http.ResponseWriter, r *http.Request) {
	f, err := market.ParseFilter(r.URL.Query().Get(QueryFilter))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	offers, err := s.b.Offers(f)
	if err != nil {
		fail(w, err, http.StatusInternalServerError)
		return
	}
	writeJSON(w, nonNil(offers))
}

func (s *server) orders(w http.ResponseWriter, r *http.Request) {
	f, err := market.ParseFilter(r.URL.Query().Get(QueryFilter))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o := s.b.Orders(f)
	o.Asks, o.Bids = nonNil(o.Asks), nonNil(o.Bids)
	writeJSON(w, o)
}

func (s *server) leases(w http.ResponseWriter, r *http.Request) {
	ls, err := s.b.Leases()
	if err != nil {
		fail(w, err, http.StatusInternalServerError)
		return
	}
	writeJSON(w, nonNil(ls))
}

func (s *server) challenge(w http.ResponseWriter, r *http.Request) {
	id, err := peer.Decode(r.URL.Query().Get(QueryPeer))
	if err != nil {
		http.Error(w, "peer: "+err.Error(), http.StatusBadRequest)
		return
	}
	rep, err := s.b.Challenge(r.Context(), id, r.URL.Query().Get(QueryModel))
	if err != nil {
		fail(w, err, http.StatusBadGateway)
		return
	}
	writeJSON(w, rep)
}

// jobService returns the backend's jobs, or answers 503 and nil.
func (s *server) jobService(w http.ResponseWriter) JobService {
	js := s.b.Jobs()
	if js == nil {
		fail(w, ErrNotStarted, http.StatusServiceUnavailable)
	}
	return js
}

func (s *server) submitJob(w http.ResponseWriter, r *http.Request) {
	js := s.jobService(w)
	if js == nil {
		return
	}
	var jr JobRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, job.MaxSpecSize*2)).Decode(&jr); err != nil {
		http.Error(w, "job request: "+err.Error(), http.StatusBadRequest)
		return
	}
	req, err := jr.ToRequest()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	v, err := js.Submit(r.Context(), req)
	var nm *market.NoMatch
	if errors.As(err, &nm) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_ = json.NewEncoder(w).Encode(ConflictBody{"no lease made", nm.Reasons})
		return
	}
	if err != nil {
		fail(w, err, http.StatusBadGateway)
		return
	}
	writeJSON(w, v)
}

func (s *server) jobs(w http.ResponseWriter, r *http.Request) {
	if js := s.jobService(w); js != nil {
		writeJSON(w, nonNil(js.Jobs()))
	}
}

func (s *server) job(w http.ResponseWriter, r *http.Request) {
	s.jobView(w, func(js JobService) (job.View, error) { return js.Job(r.PathValue("id")) })
}

func (s *server) stopJob(w http.ResponseWriter, r *http.Request) {
	s.jobView(w, func(js JobService) (job.View, error) {
		return js.Stop(r.PathValue("id"), r.URL.Query().Get(QueryReason))
	})
}

// jobView answers the view of one job that f returns, or 404 for its
// error.
func (s *server) jobView(w http.ResponseWriter, f func(JobService) (job.View, error)) {
	js := s.jobService(w)
	if js == nil {
		return
	}
	v, err := f(js)
	if err != nil {
		fail(w, err, http.StatusNotFound)
		return
	}
	writeJSON(w, v)
}

func (s *server) logs(w http.ResponseWriter, r *http.Request) {
	js := s.jobService(w)
	if js == nil {
		return
	}
	id := r.PathValue("id")
	q := r.URL.Query()
	if t := q.Get(QueryTask); t != "" {
		// One task of a task group: its own job's log.
		i, err := strconv.Atoi(t)
		tj, ok := js.(interface {
			TaskJob(group string, index int) (string, error)
		})
		if err != nil || !ok {
			fail(w, fmt.Errorf("task %q: want a task index of a task group", t), http.StatusBadRequest)
			return
		}
		if id, err = tj.TaskJob(id, i); err != nil {
			fail(w, err, http.StatusNotFound)
			return
		}
	}
	if _, err := js.Job(id); err != nil {
		fail(w, err, http.StatusNotFound)
		return
	}
	from, _ := strconv.ParseInt(q.Get(QueryFrom), 10, 64)
	follow := q.Get(QueryFollow) == "1" || q.Get(QueryFollow) == "true"
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	fw := &flushWriter{w: bufio.NewWriter(w), rw: w}
	_, _ = js.Logs(r.Context(), id, from, follow, fw)
	fw.Flush()
}

// ForwardRequest is the body of POST /api/v1/forwards.
type ForwardRequest struct {
	Job    string `json:"job"`    // a job ID or its unique prefix
	Listen string `json:"listen"` // local host:port; "" = 127.0.0.1 and a free port
	Port   uint16 `json:"port"`   // a port the job declares
}

func (s *server) forwards(w http.ResponseWriter, r *http.Request) {
	if js := s.jobService(w); js != nil {
		fs, err := js.Forwards(r.URL.Query().Get(QueryJob))
		if err != nil {
			fail(w, err, http.StatusNotFound)
			return
		}
		writeJSON(w, nonNil(fs))
	}
}

func (s *server) forward(w http.ResponseWriter, r *http.Request) {
	js := s.jobService(w)
	if js == nil {
		return
	}
	var fr ForwardRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&fr); err != nil {
		http.Error(w, "forward request: "+err.Error(), http.StatusBadRequest)
		return
	}
	if fr.Job == "" || fr.Port == 0 {
		http.Error(w, "forward request: give the job and its port", http.StatusBadRequest)
		return
	}
	v, err := js.Forward(fr.Job, job.Publish{Listen: fr.Listen, Port: fr.Port})
	switch {
	case errors.Is(err, job.ErrNoJob):
		fail(w, err, http.StatusNotFound)
	case err != nil:
		fail(w, err, http.StatusBadRequest)
	default:
		writeJSON(w, v)
	}
}

func (s *server) unforward(w http.ResponseWriter, r *http.Request) {
	if js := s.jobService(w); js != nil {
		q := r.URL.Query()
		if q.Get(QueryJob) == "" {
			http.Error(w, "unforward: give the job (?job=ID)", http.StatusBadRequest)
			return
		}
		if err := js.Unforward(q.Get(QueryJob), q.Get(QueryListen)); err != nil {
			fail(w, err, http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *server) receipts(w http.ResponseWriter, r *http.Request) {
	reps, err := s.b.Receipts(r.URL.Query().Get(QueryLease))
	if err != nil {
		fail(w, err, http.StatusBadRequest)
		return
	}
	writeJSON(w, nonNil(reps))
}

func (s *server) redeemable(w http.ResponseWriter, _ *http.Request) {
	rs, err := s.b.Redeemable()
	if err != nil {
		fail(w, err, http.StatusInternalServerError)
		return
	}
	writeJSON(w, nonNil(rs))
}

func (s *server) doctor(w http.ResponseWriter, r *http.Request) {
	rep := s.b.Doctor(r.Context())
	rep.Checks = nonNil(rep.Checks)
	writeJSON(w, rep)
}

// fail answers err with status, or 503 for a part not started yet.
func fail(w http.ResponseWriter, err error, status int) {
	if errors.Is(err, ErrNotStarted) {
		status = http.StatusServiceUnavailable
	}
	http.Error(w, err.Error(), status)
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

// flushWriter flushes every write through to the client, for following.
type flushWriter struct {
	w  *bufio.Writer
	rw http.ResponseWriter
}

func (f *flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err == nil {
		f.Flush()
	}
	return n, err
}

func (f *flushWriter) Flush() {
	_ = f.w.Flush()
	if fl, ok := f.rw.(http.Flusher); ok {
		fl.Flush()
	}
}
