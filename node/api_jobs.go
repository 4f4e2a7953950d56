package node

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/settle"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// JobRequest is the body of POST /api/v1/jobs: what to rent and what to
// run on it (docs/PROTOCOL.md, API).
type JobRequest struct {
	Filter          string     `json:"filter"`
	Count           int        `json:"count"`
	Hours           float64    `json:"hours"`
	MaxPrice        string     `json:"max_price"`        // per GPU-hour, e.g. "2.50"
	MinRep          *float64   `json:"min_rep"`          // default reputation.DefaultFloor
	AllowUnproven   bool       `json:"allow_unproven"`   // lease from suppliers no trusted challenger passed, too
	ReceiptInterval string     `json:"receipt_interval"` // e.g. "10s"; "" market default
	CreditLimit     string     `json:"credit_limit"`     // amount; "" two intervals' worth
	Argv            []string   `json:"argv"`
	Env             []string   `json:"env"` // NAME=VALUE
	Files           []JobFile  `json:"files"`
	CheckpointEvery string     `json:"checkpoint_every"` // e.g. "30s"
	CheckpointDir   string     `json:"checkpoint_dir"`   // in the working dir; "" a folder of its own
	Restart         string     `json:"restart"`          // never | on-failure[:N]
	Limits          *pb.Limits `json:"limits"`
	Runtime         string     `json:"runtime"`
	Image           string     `json:"image"`
}

// JobFile is an input file of a JobRequest.
type JobFile struct {
	Path string `json:"path"`
	Mode uint32 `json:"mode"`
	Data []byte `json:"data"` // base64 in JSON
}

// ToRequest checks a JobRequest and turns it into the controller's form.
func (r JobRequest) ToRequest() (job.Request, error) {
	f, err := market.ParseFilter(r.Filter)
	if err != nil {
		return job.Request{}, err
	}
	if r.Count < 1 || r.Count > market.MaxCount {
		return job.Request{}, fmt.Errorf("count %d: want 1 to %d", r.Count, market.MaxCount)
	}
	if r.Hours == 0 {
		r.Hours = 1
	}
	d := time.Duration(r.Hours * float64(time.Hour)).Round(time.Second)
	if d < market.MinDuration || d > market.MaxDuration {
		return job.Request{}, fmt.Errorf("hours %g: want %s to %s", r.Hours, market.MinDuration, market.MaxDuration)
	}
	maxP, err := money.ParseMicros(r.MaxPrice)
	if err != nil || maxP <= 0 {
		return job.Request{}, fmt.Errorf("max_price %q: want a positive amount per GPU-hour, e.g. 2.50", r.MaxPrice)
	}
	req := job.Request{Filter: f.String(), Count: r.Count, Duration: d, MaxPrice: int64(maxP), MinReputation: reputation.DefaultFloor, AllowUnproven: r.AllowUnproven}
	if r.MinRep != nil {
		req.MinReputation = *r.MinRep
	}
	if r.ReceiptInterval != "" {
		req.ReceiptInterval, err = time.ParseDuration(r.ReceiptInterval)
		lo, hi := market.MinReceiptInterval*time.Millisecond, market.MaxReceiptInterval*time.Millisecond
		if err != nil || req.ReceiptInterval < lo || req.ReceiptInterval > hi {
			return job.Request{}, fmt.Errorf("receipt_interval %q: want a duration from %s to %s", r.ReceiptInterval, lo, hi)
		}
	}
	if r.CreditLimit != "" {
		credit, err := money.ParseMicros(r.CreditLimit)
		if err != nil {
			return job.Request{}, fmt.Errorf("credit_limit %q: want an amount, e.g. 0.05", r.CreditLimit)
		}
		req.CreditLimit = int64(credit)
	}
	spec := &pb.JobSpec{Argv: r.Argv, Gpus: uint32(r.Count), Limits: r.Limits, Runtime: r.Runtime, Image: r.Image, CheckpointDir: r.CheckpointDir}
	for _, e := range r.Env {
		name, value, ok := strings.Cut(e, "=")
		if !ok {
			return job.Request{}, fmt.Errorf("env %q: want NAME=VALUE", e)
		}
		spec.Env = append(spec.Env, &pb.EnvVar{Name: name, Value: value})
	}
	for _, fl := range r.Files {
		spec.Files = append(spec.Files, &pb.File{Path: fl.Path, Mode: fl.Mode, Data: fl.Data})
	}
	if r.CheckpointEvery != "" {
		ce, err := time.ParseDuration(r.CheckpointEvery)
		if err != nil || ce < time.Second {
			return job.Request{}, fmt.Errorf("checkpoint_every %q: want a duration of 1s or more", r.CheckpointEvery)
		}
		spec.CheckpointEveryS = uint32(ce / time.Second)
	}
	if spec.Restart, err = parseRestart(r.Restart); err != nil {
		return job.Request{}, err
	}
	req.Spec = spec
	if _, err := job.EncodeSpec(spec); err != nil && !strings.Contains(err.Error(), "job_id") {
		return job.Request{}, err
	}
	return req, nil
}

// parseRestart reads never | on-failure[:N] (N restarts, default 3).
func parseRestart(s string) (*pb.Restart, error) {
	switch {
	case s == "" || s == "never":
		return nil, nil
	case s == "on-failure":
		return &pb.Restart{Policy: "on-failure", MaxRestarts: 3}, nil
	case strings.HasPrefix(s, "on-failure:"):
		n, err := strconv.Atoi(strings.TrimPrefix(s, "on-failure:"))
		if err != nil || n < 0 || n > 100 {
			return nil, fmt.Errorf("restart %q: want on-failure:N with N from 0 to 100", s)
		}
		return &pb.Restart{Policy: "on-failure", MaxRestarts: uint32(n)}, nil
	}
	return nil, fmt.Errorf("restart %q: want never, on-failure or on-failure:N", s)
}

// jobRoutes serves the job and receipt endpoints. All of them need the
// token: jobs, their logs and bills are the renter's own.
func (n *Node) jobRoutes(mux *http.ServeMux) {
	ctrl := func(w http.ResponseWriter) *job.Controller {
		if n.jobs.ctrl == nil {
			http.Error(w, "jobs are not started yet", http.StatusServiceUnavailable)
		}
		return n.jobs.ctrl
	}
	mux.HandleFunc("POST /api/v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		c := ctrl(w)
		if c == nil {
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
		v, err := c.Submit(r.Context(), req)
		if err != nil {
			var nm *market.NoMatch
			if errors.As(err, &nm) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusConflict)
				_ = json.NewEncoder(w).Encode(struct {
					Error   string   `json:"error"`
					Reasons []string `json:"reasons"`
				}{"no lease made", nm.Reasons})
				return
			}
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		writeJSON(w, v)
	})
	mux.HandleFunc("GET /api/v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		if c := ctrl(w); c != nil {
			writeJSON(w, c.Jobs())
		}
	})
	mux.HandleFunc("GET /api/v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		c := ctrl(w)
		if c == nil {
			return
		}
		v, err := c.Job(r.PathValue("id"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		writeJSON(w, v)
	})
	mux.HandleFunc("POST /api/v1/jobs/{id}/stop", func(w http.ResponseWriter, r *http.Request) {
		c := ctrl(w)
		if c == nil {
			return
		}
		v, err := c.Stop(r.PathValue("id"), r.URL.Query().Get("reason"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		writeJSON(w, v)
	})
	mux.HandleFunc("GET /api/v1/jobs/{id}/logs", func(w http.ResponseWriter, r *http.Request) {
		c := ctrl(w)
		if c == nil {
			return
		}
		if _, err := c.Job(r.PathValue("id")); err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		from, _ := strconv.ParseInt(r.URL.Query().Get("from"), 10, 64)
		follow := r.URL.Query().Get("follow") == "1" || r.URL.Query().Get("follow") == "true"
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		bw := &flushWriter{w: bufio.NewWriter(w), rw: w}
		_, _ = c.Logs(r.Context(), r.PathValue("id"), from, follow, bw)
		bw.Flush()
	})
	mux.HandleFunc("GET /api/v1/receipts", func(w http.ResponseWriter, r *http.Request) {
		if n.jobs.ledger == nil {
			http.Error(w, "jobs are not started yet", http.StatusServiceUnavailable)
			return
		}
		reps, err := Receipts(n.jobs.ledger, r.URL.Query().Get("lease"), n.now())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, reps)
	})
}

// Receipts verifies the bills of the leases in led whose ID starts with
// prefix (all when empty).
func Receipts(led *settle.Ledger, prefix string, now time.Time) ([]settle.Report, error) {
	ids, err := led.Leases()
	if err != nil {
		return nil, err
	}
	out := []settle.Report{}
	for _, id := range ids {
		if prefix != "" && !strings.HasPrefix(id.String(), strings.ToLower(prefix)) {
			continue
		}
		rep, err := led.Verify(id, now)
		if err != nil {
			return nil, err
		}
		out = append(out, rep)
	}
	if prefix != "" && len(out) == 0 {
		return nil, fmt.Errorf("no receipts for a lease starting with %q", prefix)
	}
	return out, nil
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
