package api

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/cluster"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/node/runtime"
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
	AllowSimulated  bool       `json:"allow_simulated"`  // lease simulated GPUs too, when the filter says nothing of them
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
	// Ports are the TCP ports the job serves: "8000" or "8000/tcp".
	Ports []string `json:"ports"`
	// Publish opens local addresses to the job's ports, as
	// "[HOST:]LOCALPORT:PORT" (HOST 127.0.0.1 when left out) or "PORT"
	// (a free local port); a published port is declared too.
	Publish []string `json:"publish"`
	// Replicas runs the job this many times at once, on distinct
	// suppliers, behind the same forwards (0 or 1: once).
	Replicas int `json:"replicas"`
	// Health is the HTTP path the renter's node checks each replica at
	// ("" : a TCP connect to the first port); HealthGrace how long a new
	// attempt may take to become healthy (e.g. "10m"; "" : 5m).
	Health      string `json:"health"`
	HealthGrace string `json:"health_grace"`
	// Lease runs the job on a lease this node rented already (a lease ID
	// or its unique prefix) instead of renting: filter, count, hours and
	// max_price are then left out.
	Lease string `json:"lease"`
	// Tasks runs the command this many times as a task group, each task
	// a job of its own with TASK_INDEX (0..tasks-1) and TASK_COUNT in its
	// environment (0 or 1: once); Parallel bounds the tasks running at
	// once (0: min(tasks, 8)).
	Tasks    int `json:"tasks"`
	Parallel int `json:"parallel"`
	// Nodes runs the job as a cluster of this many members (2 to 64),
	// each on a supplier of its own with count GPUs, leased all or
	// nothing; MasterPort is their MASTER_PORT (0: 29500).
	Nodes      int `json:"nodes"`
	MasterPort int `json:"master_port"`
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
	if r.Hours == 0 {
		r.Hours = 1
	}
	var terms market.RentTerms
	if r.Lease == "" {
		if terms, err = market.ParseRentTerms(r.Count, r.Hours, r.MaxPrice); err != nil {
			return job.Request{}, err
		}
	} else if r.Filter != "" || r.MaxPrice != "" || r.Replicas > 1 || r.Nodes > 1 {
		return job.Request{}, errors.New("lease: a job on a lease you hold takes its GPUs from it; leave out the filter, max_price, replicas and nodes")
	}
	switch {
	case r.Nodes == 1 || r.Nodes < 0 || r.Nodes > cluster.MaxNodes:
		return job.Request{}, fmt.Errorf("nodes %d: a cluster has 2 to %d members", r.Nodes, cluster.MaxNodes)
	case r.MasterPort < 0 || r.MasterPort > 65535:
		return job.Request{}, fmt.Errorf("master_port %d: want 1 to 65535", r.MasterPort)
	case r.MasterPort != 0 && r.Nodes == 0:
		return job.Request{}, errors.New("master_port: only a cluster (nodes) has one")
	case r.Nodes > 1 && (r.Replicas > 1 || len(r.Publish) > 0 || len(r.Ports) > 0):
		return job.Request{}, errors.New("nodes: a cluster serves no ports and has no replicas")
	}
	req := job.Request{Filter: f, RentTerms: terms, MinReputation: reputation.DefaultFloor, AllowUnproven: r.AllowUnproven, AllowSimulated: r.AllowSimulated, Lease: r.Lease,
		Nodes: r.Nodes, MasterPort: r.MasterPort}
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
		req.CreditLimit = credit
	}
	spec := &pb.JobSpec{Argv: r.Argv, Gpus: uint32(r.Count), Limits: r.Limits, Runtime: r.Runtime, Image: r.Image, CheckpointDir: r.CheckpointDir}
	for _, e := range r.Env {
		name, value, ok := strings.Cut(e, "=")
		if !ok {
			return job.Request{}, fmt.Errorf("env %q: want NAME=VALUE", e)
		}
		if err := runtime.CheckGPUEnv(name, value); err != nil {
			return job.Request{}, fmt.Errorf("env %s: %w", name, err)
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
	if req.Publish, err = parsePublishes(r.Publish); err != nil {
		return job.Request{}, err
	}
	if spec.Ports, err = parsePorts(r.Ports, req.Publish); err != nil {
		return job.Request{}, err
	}
	if err := r.services(&req, len(spec.Ports) > 0); err != nil {
		return job.Request{}, err
	}
	if err := r.tasks(&req, len(spec.Ports) > 0); err != nil {
		return job.Request{}, err
	}
	req.Spec = spec
	if _, err := job.EncodeSpec(spec); err != nil && !strings.Contains(err.Error(), "job_id") {
		return job.Request{}, err
	}
	return req, nil
}

// services checks and copies the replicas and health settings.
func (r JobRequest) services(req *job.Request, serves bool) error {
	if r.Replicas < 0 || r.Replicas > job.MaxReplicas {
		return fmt.Errorf("replicas %d: want 1 to %d", r.Replicas, job.MaxReplicas)
	}
	if r.Replicas > 1 && !serves {
		return fmt.Errorf("replicas %d: replicas serve ports; declare one with ports or publish", r.Replicas)
	}
	if r.Health != "" && (!strings.HasPrefix(r.Health, "/") || strings.ContainsAny(r.Health, " \r\n\x00") || len(r.Health) > 1024) {
		return fmt.Errorf("health %q: want an HTTP path such as /healthz", r.Health)
	}
	if (r.Health != "" || r.HealthGrace != "") && !serves {
		return errors.New("health checks need a port the job serves: declare one with ports or publish")
	}
	if r.HealthGrace != "" {
		g, err := time.ParseDuration(r.HealthGrace)
		if err != nil || g < time.Second || g > 24*time.Hour {
			return fmt.Errorf("health_grace %q: want a duration from 1s to 24h", r.HealthGrace)
		}
		req.HealthGrace = g
	}
	req.Replicas, req.Health = r.Replicas, r.Health
	return nil
}

// tasks checks and copies the task group settings.
func (r JobRequest) tasks(req *job.Request, serves bool) error {
	switch {
	case r.Tasks < 0 || r.Tasks > job.MaxTasks:
		return fmt.Errorf("tasks %d: want 1 to %d", r.Tasks, job.MaxTasks)
	case r.Parallel < 0 || r.Parallel > r.Tasks && r.Parallel > 0:
		return fmt.Errorf("parallel %d: want 1 to tasks (%d)", r.Parallel, r.Tasks)
	case r.Tasks > 1 && (serves || r.Replicas > 1 || r.Lease != ""):
		return errors.New("tasks run to their end: leave out ports, publish, replicas and lease")
	}
	req.Tasks, req.Parallel = r.Tasks, r.Parallel
	return nil
}

// ParsePort reads a job's port: "8000" or "8000/tcp".
func ParsePort(s string) (uint16, error) {
	num, proto, _ := strings.Cut(s, "/")
	n, err := strconv.ParseUint(num, 10, 16)
	if err != nil || n == 0 || proto != "" && proto != "tcp" {
		return 0, fmt.Errorf("port %q: want a TCP port from 1 to 65535, as 8000 or 8000/tcp", s)
	}
	return uint16(n), nil
}

// parsePorts turns ports, and the ports published, into the spec's
// declared ports: ascending, each once.
func parsePorts(ports []string, pub []job.Publish) ([]*pb.Port, error) {
	var ns []uint16
	for _, s := range ports {
		n, err := ParsePort(s)
		if err != nil {
			return nil, err
		}
		ns = append(ns, n)
	}
	for _, p := range pub {
		ns = append(ns, p.Port)
	}
	slices.Sort(ns)
	ns = slices.Compact(ns)
	if len(ns) > job.MaxPorts {
		return nil, fmt.Errorf("%d ports: at most %d", len(ns), job.MaxPorts)
	}
	var out []*pb.Port
	for _, n := range ns {
		out = append(out, &pb.Port{Number: uint32(n), Protocol: "tcp"})
	}
	return out, nil
}

// ParsePublish reads "[HOST:]LOCALPORT:PORT" or "PORT": a local address
// (HOST 127.0.0.1 when left out; LOCALPORT 0 or left out: a free one) and
// the job's port.
func ParsePublish(s string) (job.Publish, error) {
	bad := fmt.Errorf("publish %q: want [HOST:]LOCALPORT:PORT or PORT, e.g. 127.0.0.1:8080:8000", s)
	i := strings.LastIndexByte(s, ':')
	local, port := "127.0.0.1:0", s
	if i >= 0 {
		local, port = s[:i], s[i+1:]
		if !strings.Contains(local, ":") || strings.HasSuffix(local, "]") {
			local = "127.0.0.1:" + local
		}
	}
	n, err := ParsePort(port)
	if err != nil {
		return job.Publish{}, bad
	}
	host, lport, err := net.SplitHostPort(local)
	if err != nil {
		return job.Publish{}, bad
	}
	if _, err := strconv.ParseUint(lport, 10, 16); err != nil {
		return job.Publish{}, bad
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return job.Publish{Listen: net.JoinHostPort(host, lport), Port: n}, nil
}

func parsePublishes(ss []string) ([]job.Publish, error) {
	var out []job.Publish
	for _, s := range ss {
		p, err := ParsePublish(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
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
