package api

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/market"
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
// The CLI calls it too, to refuse a bad request before sending it.
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
