package job

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/settle"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/node/tunnel"
	"github.com/gpumesh/gpumesh/store"
)

var ksJobs = store.MustKeyspace("renter-jobs") // job ID -> jobRecord (JSON)

// Renter-side job states, beyond the attempt states.
const (
	StateRenting    State = "renting"
	StateRecovering State = "recovering"
)

// JobStates lists the states a renter's job can be in: the attempt
// states and the renter's own.
func JobStates() []State {
	return append([]State{StateRenting, StateRecovering}, AttemptStates()...)
}

// ErrNoJob is returned for a job ID this node does not have.
var ErrNoJob = errors.New("no such job")

// Request is what the renter asks to run.
type Request struct {
	Spec   *pb.JobSpec   // JobId is drawn when empty
	Filter market.Filter // which GPUs, parsed where the request was read
	// RentTerms are how many GPUs, the lease length and the most paid per
	// GPU-hour; Submit refuses terms that fail their Validate.
	market.RentTerms
	MinReputation   float64
	AllowUnproven   bool          // lease from unproven suppliers too (see market.RentRequest)
	AllowSimulated  bool          // lease simulated GPUs too (see market.RentRequest)
	ReceiptInterval time.Duration // 0: market default
	CreditLimit     money.Micros  // 0: one interval's worth
	// Publish opens local addresses that carry connections to ports of
	// the job (Forward), before it is rented.
	Publish []Publish
	// Replicas runs the job this many times at once (0 or 1: once), each
	// on a supplier of its own and as a job of its own (its own ID, lease,
	// meter and settlement), behind the same forwards (see Health).
	Replicas int
	// Health is how the renter's node checks a job that serves ports
	// (health.go): an HTTP path such as "/healthz" (GET; a 2xx or 3xx
	// answer is healthy), or "" for a TCP connect to its first port.
	Health string
	// HealthGrace is how long a new attempt may take to become healthy
	// before it is given up (default DefaultHealthGrace).
	HealthGrace time.Duration
	// Lease runs the job on a lease this renter holds already (a lease
	// ID or its unique prefix, as `gpumesh rent` made it) instead of
	// renting: its GPUs, its supplier and its remaining time. RentTerms
	// and the filter are then unused, and the job has no other attempt:
	// no failover, no restart (lease.go).
	Lease string
	// Tasks runs the job this many times (0 or 1: once) as a task group
	// (tasks.go): each task a job of its own, with TASK_INDEX and
	// TASK_COUNT in its environment. Parallel bounds the tasks running at
	// once (0: min(Tasks, DefaultParallel)).
	Tasks    int
	Parallel int

	// Nodes, when 2 or more, runs the job as a cluster of that many
	// members, each on a supplier of its own with Count GPUs, leased all
	// or nothing and run together (clusterjob.go); MasterPort is their
	// MASTER_PORT (0: DefaultMasterPort).
	Nodes      int
	MasterPort int

	taskOf string // a task's group
	task   int    // a task's index in its group
}

// AttemptView is one attempt of a job.
type AttemptView struct {
	Attempt      uint32       `json:"attempt"`
	LeaseID      string       `json:"lease_id"`
	Supplier     string       `json:"supplier"`
	Outcome      State        `json:"outcome"`
	Checkpoint   string       `json:"resumed_from,omitempty"`
	PaidMicros   money.Micros `json:"paid_micros"`
	Receipts     int          `json:"receipts"`
	Settled      bool         `json:"settled"`
	LogBytes     int64        `json:"log_bytes"`
	StartedAtUTC string       `json:"started_at,omitempty"`
	// StartMs is the time from the countersigned lease to the supplier's
	// word that the job's process runs (0 when unknown).
	StartMs float64 `json:"start_ms"`
}

// View is a job as `gpumesh jobs` shows it.
type View struct {
	JobID      string        `json:"job_id"`
	State      State         `json:"state"`
	Attempt    uint32        `json:"attempt"`
	Supplier   string        `json:"supplier"`
	LeaseID    string        `json:"lease_id"`
	ExitCode   int           `json:"exit_code"`
	Message    string        `json:"message,omitempty"`
	Argv       []string      `json:"argv"`
	Checkpoint string        `json:"checkpoint,omitempty"`
	Failovers  int           `json:"failovers"`
	Restarts   int           `json:"restarts"`
	PaidMicros money.Micros  `json:"paid_micros"`
	Attempts   []AttemptView `json:"attempts"`
	Publish    []Publish     `json:"publish,omitempty"` // local addresses forwarded to its ports
	Group      string        `json:"group,omitempty"`   // replicas: the group's (first replica's) job ID
	Replica    int           `json:"replica"`           // replicas: 0, 1, ...
	Health     string        `json:"health,omitempty"`  // a job that serves ports: healthy, unhealthy: why, or starting
	TaskOf     string        `json:"task_of,omitempty"` // a task: its group's ID
	Task       int           `json:"task"`              // a task: its index in the group
	// A task group (tasks.go): its tasks, how many of them are done,
	// running, failed or pending, and how many may run at once.
	TaskCount int        `json:"task_count,omitempty"`
	Parallel  int        `json:"parallel,omitempty"`
	Tasks     []TaskView `json:"tasks,omitempty"`
	Done      int        `json:"done,omitempty"`
	Running   int        `json:"running,omitempty"`
	Failed    int        `json:"failed,omitempty"`
	Pending   int        `json:"pending,omitempty"`
	Outputs   string     `json:"outputs,omitempty"` // the folder holding its outputs, once taken
	// OutputsRefused says why a succeeded attempt's outputs were refused.
	OutputsRefused string       `json:"outputs_refused,omitempty"`
	Nodes          int          `json:"nodes,omitempty"`   // a cluster: its members
	Members        []MemberView `json:"members,omitempty"` // a cluster: its members in rank order
	Created        time.Time    `json:"created"`
	Updated        time.Time    `json:"updated"`
}

// attemptRec is the durable record of one attempt.
type attemptRec struct {
	Attempt    uint32    `json:"attempt"`
	Lease      []byte    `json:"lease"` // the countersigned lease envelope
	Supplier   string    `json:"supplier"`
	Started    bool      `json:"started"` // the supplier accepted the start
	Outcome    State     `json:"outcome"`
	Checkpoint string    `json:"checkpoint,omitempty"`
	Settled    bool      `json:"settled"`
	Fenced     bool      `json:"fenced"`               // the supplier was told to stop its copy
	At         time.Time `json:"at"`                   // when the lease was made
	RunningAt  time.Time `json:"running_at,omitempty"` // when the supplier said the process runs
}

// jobRecord is the renter's durable record of a job.
type jobRecord struct {
	ID         string       `json:"id"`
	Spec       []byte       `json:"spec"`
	Filter     string       `json:"filter"`
	Count      int          `json:"count"`
	Duration   int64        `json:"duration_ms"`
	MaxPrice   money.Micros `json:"max_price"` // per GPU-hour
	MinRep     float64      `json:"min_rep"`
	Unproven   bool         `json:"allow_unproven,omitempty"`
	Simulated  bool         `json:"allow_simulated,omitempty"`
	Interval   int64        `json:"interval_ms"`
	Credit     money.Micros `json:"credit"`
	State      State        `json:"state"`
	ExitCode   int          `json:"exit_code"`
	Message    string       `json:"message"`
	Attempts   []attemptRec `json:"attempts"`
	Checkpoint string       `json:"checkpoint,omitempty"` // hash of the last pulled checkpoint
	CheckAt    time.Time    `json:"checkpoint_at"`
	Failovers  int          `json:"failovers"`
	Restarts   int          `json:"restarts"`
	StopAsked  string       `json:"stop_asked,omitempty"`
	FinishedAt time.Time    `json:"finished_at,omitempty"`  // when the job reached its final state
	Publish    []Publish    `json:"publish,omitempty"`      // its forwards: local addresses to its ports
	Group      string       `json:"group,omitempty"`        // a replica's group: the first replica's job ID
	Replica    int          `json:"replica,omitempty"`      // 0, 1, ... within the group
	Health     string       `json:"health_check,omitempty"` // HTTP path, or "" for a TCP connect
	Grace      int64        `json:"health_grace_ms,omitempty"`
	OnLease    bool         `json:"on_lease,omitempty"` // it runs on a lease it was given (Request.Lease): no other attempt
	Outputs    string       `json:"outputs,omitempty"`  // hash of the outputs taken (outputs.go)
	// OutputsRefused says why a succeeded attempt's outputs were refused.
	OutputsRefused string `json:"outputs_refused,omitempty"`
	TaskOf         string `json:"task_of,omitempty"` // a task's group (tasks.go)
	Task           int    `json:"task,omitempty"`    // a task's index in its group
	Cluster        string `json:"cluster,omitempty"` // a cluster member's cluster: rank 0's job ID
	Rank           int    `json:"rank,omitempty"`
	// ClusterLeases are the current cluster attempt's leases, in rank
	// order: the members a start names.
	ClusterLeases [][]byte  `json:"cluster_leases,omitempty"`
	Created       time.Time `json:"created"`
	Updated       time.Time `json:"updated"`
}

// newRecord is the record of a job submitted as req, its spec checked,
// as replica of group ("" and 0 for a job alone).
func newRecord(req Request, spec *Spec, group string, replica int, now time.Time) jobRecord {
	return jobRecord{
		ID: spec.ID(), Spec: spec.Raw, Filter: req.Filter.String(), Count: req.Count, Duration: req.Duration.Milliseconds(),
		MaxPrice: req.MaxPrice, MinRep: req.MinReputation, Unproven: req.AllowUnproven, Simulated: req.AllowSimulated, Interval: req.ReceiptInterval.Milliseconds(),
		Credit: req.CreditLimit, State: StateRenting, Created: now,
		Group: group, Replica: replica, Health: req.Health, Grace: req.HealthGrace.Milliseconds(),
		TaskOf: req.taskOf, Task: req.task,
	}
}

// rentRequest is what renting for the job's next attempt asks: the
// record's terms, with f its filter parsed and the lease bound to spec.
func (j *jobRecord) rentRequest(f market.Filter, spec *Spec) market.RentRequest {
	return market.RentRequest{
		Filter: f, Count: j.Count, Duration: time.Duration(j.Duration) * time.Millisecond, MaxPrice: j.MaxPrice,
		MinReputation: j.MinRep, AllowUnproven: j.Unproven, AllowSimulated: j.Simulated,
		Terms: market.Terms{JobSpecHash: spec.Hash[:], ReceiptInterval: time.Duration(j.Interval) * time.Millisecond, CreditLimit: j.Credit},
	}
}

func (j *jobRecord) cur() *attemptRec {
	if len(j.Attempts) == 0 {
		return nil
	}
	return &j.Attempts[len(j.Attempts)-1]
}

func (j *jobRecord) finished() bool {
	switch j.State {
	case StateSucceeded, StateFailed, StateStopped:
		return true
	}
	return false
}

// ControllerConfig configures a Controller. Fields without a default note
// are required.
type ControllerConfig struct {
	// Net reaches suppliers and opens streams to them.
	Net    Dialer
	Key    crypto.PrivKey
	Store  store.Store
	Ledger *settle.Ledger
	// DataDir is the node's data dir: job logs and checkpoints are kept
	// under DataDir/renter-jobs.
	DataDir string
	// Rent makes a lease (the node's market renter with its reputation
	// screening).
	Rent func(ctx context.Context, req market.RentRequest) (*market.Lease, error)
	// RentGang leases a cluster's members, all or nothing
	// (market.Renter.RentGang); ReleaseLeases gives back leases that no
	// attempt will use, unpenalised. nil: clusters are refused.
	RentGang      func(ctx context.Context, req market.GangRequest) ([]*market.Lease, error)
	ReleaseLeases func(ctx context.Context, leases []*market.Lease) error
	// PeerAddrs gives the addresses this node knows for a peer: what a
	// cluster's start tells each member of the others (nil: none, the
	// members find each other through the DHT).
	PeerAddrs func(peer.ID) []ma.Multiaddr
	// LostAfter is how long a supplier may stay silent or unreachable
	// before its attempt is given up (default 3 receipt intervals, at
	// least 3 s).
	LostAfter time.Duration
	// RetryBudget bounds failovers per job (default 3).
	RetryBudget int
	// Chain, if not nil, pays suppliers that settle on chain with chain
	// vouchers (docs/PROTOCOL.md §43.6).
	Chain *RenterChain
	Now   func() time.Time
	Log   *slog.Logger
}

// Controller is the renter side of jobs. It runs inside the renter's node,
// which pays for and follows every job it started, whether or not a
// terminal watches it.
type Controller struct {
	cfg   ControllerConfig
	log   *slog.Logger
	chain *renterChain // nil: pays off chain only

	mu      sync.Mutex
	jobs    map[string]*jobState
	groups  map[string]*groupState // task groups (tasks.go)
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started bool
}

// jobState is a job in memory: its record and what follows it.
type jobState struct {
	mu      sync.Mutex
	rec     jobRecord
	spec    *Spec
	conn    *clientSession // the attached session, if any
	changed chan struct{}  // closed and replaced on every change (logs, state)
	logs    map[uint32]*logFile
	fwd     []*tunnel.Forwarder // open forwards to the job's ports
	ep      *tunnel.Endpoint    // the current attempt as a tunnel endpoint (endpoints)
	health  healthState         // the current attempt's health (health.go)
	filter  market.Filter       // rec.Filter, parsed once: at submit, or when the record is loaded
	cl      *clusterState       // a cluster member's cluster; nil for other jobs
	links   []LinkView          // a cluster member's links, as its supplier last said
}

func (js *jobState) notify() {
	close(js.changed)
	js.changed = make(chan struct{})
}

// NewController loads the jobs kept in the store. Run drives them.
func NewController(cfg ControllerConfig) (*Controller, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.RetryBudget == 0 {
		cfg.RetryBudget = 3
	}
	if cfg.Net == nil {
		return nil, errors.New("controller: no network")
	}
	c := &Controller{cfg: cfg, log: cfg.Log.With("sub", "renter-jobs"), jobs: map[string]*jobState{}, groups: map[string]*groupState{}}
	if cfg.Chain != nil {
		self, err := peer.IDFromPrivateKey(cfg.Key)
		if err != nil {
			return nil, fmt.Errorf("controller: %w", err)
		}
		if c.chain, err = newRenterChain(cfg.Chain, self); err != nil {
			return nil, fmt.Errorf("controller: %w", err)
		}
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	codec := store.JSONCodec[jobRecord]{}
	err := cfg.Store.Iterate(ksJobs, nil, func(_, v []byte) error {
		rec, err := codec.Unmarshal(v)
		if err != nil {
			return nil
		}
		spec, err := DecodeSpec(rec.Spec)
		if err != nil {
			c.log.Warn("kept job has a bad spec", "job", rec.ID, "err", err)
			return nil
		}
		f, err := market.ParseFilter(rec.Filter, market.AnyModel()) // kept as Filter.String wrote it
		if err != nil {
			c.log.Warn("kept job has a bad filter", "job", rec.ID, "err", err)
			return nil
		}
		c.jobs[rec.ID] = &jobState{rec: rec, spec: spec, filter: f, changed: make(chan struct{}), logs: map[uint32]*logFile{}}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("controller: load jobs: %w", err)
	}
	if err := c.loadGroups(); err != nil {
		return nil, fmt.Errorf("controller: load task groups: %w", err)
	}
	return c, nil
}

// Start drives every unfinished job kept in the store, until Close.
func (c *Controller) Start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return
	}
	c.started = true
	c.wg.Add(1)
	go c.healthLoop()
	for _, cl := range c.restoreClusters() {
		if !cl.over() || !c.clusterSettled(cl) {
			c.goCluster(cl)
		}
	}
	for _, js := range c.jobs {
		if js.cl != nil {
			continue
		}
		js.mu.Lock()
		done := js.rec.finished() && (c.allSettled(&js.rec) || c.settleGaveUp(&js.rec))
		if !js.rec.finished() {
			c.reopenForwards(js)
		}
		js.mu.Unlock()
		if !done {
			c.goDrive(js)
		}
	}
	for _, gs := range c.groups {
		c.goGroup(gs) // returns at once when the group is over
	}
}

// allSettled reports whether every attempt that can still be settled is:
// those that ended while their supplier served them. A lost, interrupted
// or fenced attempt is stated by the renter alone.
func (c *Controller) allSettled(r *jobRecord) bool {
	for _, a := range r.Attempts {
		switch a.Outcome {
		case StateLost, StateInterrupted, StateFenced:
			continue
		}
		if a.Started && !a.Settled {
			return false
		}
	}
	return true
}

// settleGaveUp reports whether a finished job has tried to settle for
// SettleFor already.
func (c *Controller) settleGaveUp(r *jobRecord) bool {
	return r.finished() && !r.FinishedAt.IsZero() && c.cfg.Now().Sub(r.FinishedAt) > SettleFor
}

func (c *Controller) goDrive(js *jobState) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.drive(c.ctx, js)
	}()
}

// Close stops following jobs (they keep running on their suppliers,
// which pause them when payment stops) and closes their logs.
func (c *Controller) Close() error {
	c.cancel()
	c.mu.Lock()
	jobs := make([]*jobState, 0, len(c.jobs))
	for _, js := range c.jobs {
		jobs = append(jobs, js)
	}
	c.mu.Unlock()
	var fwd []*tunnel.Forwarder
	for _, js := range jobs {
		js.mu.Lock()
		if js.conn != nil {
			js.conn.close()
		}
		fwd, js.fwd = append(fwd, js.fwd...), nil
		js.mu.Unlock()
	}
	for _, f := range fwd {
		f.Close()
	}
	c.wg.Wait()
	for _, js := range jobs {
		for _, l := range js.logs {
			l.Close()
		}
	}
	return nil
}

func (c *Controller) jobDir(id string) string { return filepath.Join(c.cfg.DataDir, "renter-jobs", id) }

// save keeps js's record durably. The caller holds js.mu.
func (c *Controller) save(js *jobState) error {
	js.rec.Updated = c.cfg.Now().UTC()
	b, err := store.JSONCodec[jobRecord]{}.Marshal(js.rec)
	if err != nil {
		return err
	}
	id, _ := hex.DecodeString(js.rec.ID)
	if err := c.cfg.Store.Put(ksJobs, id, b); err != nil {
		return fmt.Errorf("keep job %s: %w", js.rec.ID, err)
	}
	js.notify()
	return nil
}

// Submit rents GPUs for req and starts the job's first attempt. It
// returns once the supplier has started the process; the node then
// follows the job on its own.
func (c *Controller) Submit(ctx context.Context, req Request) (View, error) {
	if req.Lease != "" {
		return c.submitOnLease(ctx, req)
	}
	if err := req.RentTerms.Validate(); err != nil {
		return View{}, err
	}
	if req.Tasks > 1 && req.Nodes > 1 {
		return View{}, errors.New("a job is either a task group or a cluster, not both")
	}
	if req.Tasks > 1 {
		return c.submitTasks(ctx, req)
	}
	if req.Nodes > 1 {
		if req.Replicas > 1 || len(req.Publish) > 0 {
			return View{}, errors.New("a cluster has no replicas and publishes no ports")
		}
		if req.MasterPort < 0 || req.MasterPort > 65535 {
			return View{}, fmt.Errorf("master port %d outside 1..65535", req.MasterPort)
		}
		req.Spec = proto.Clone(req.Spec).(*pb.JobSpec)
		req.Spec.Cluster = &pb.Cluster{Nodes: uint32(req.Nodes), MasterPort: uint32(req.MasterPort)}
		return c.submitCluster(ctx, req)
	}
	if req.Replicas <= 1 {
		return c.submit(ctx, req, "", 0)
	}
	if len(req.Spec.Ports) == 0 {
		return View{}, errors.New("replicas serve ports: declare the port the job serves")
	}
	if req.Replicas > MaxReplicas {
		return View{}, fmt.Errorf("%d replicas: at most %d", req.Replicas, MaxReplicas)
	}
	// Each replica is a job of its own, with an ID of its own (so a spec,
	// a lease and a meter of its own); the first one holds the forwards
	// and names the group.
	first, err := c.submit(ctx, req, "", 0)
	if err != nil {
		return first, err
	}
	for i := 1; i < req.Replicas; i++ {
		r := req
		r.Spec = proto.Clone(req.Spec).(*pb.JobSpec)
		r.Spec.JobId, r.Publish = nil, nil
		if _, err := c.submit(ctx, r, first.JobID, i); err != nil {
			c.log.Warn("replica not submitted; the group serves with fewer", "group", first.JobID[:8], "replica", i, "err", err)
		}
	}
	return c.Job(first.JobID)
}

// submit rents GPUs for one job (a replica i of group when group is set)
// and starts its first attempt.
func (c *Controller) submit(ctx context.Context, req Request, group string, replica int) (View, error) {
	return c.submitWith(ctx, req, group, replica, nil)
}

// submitWith is submit, on lease l when it is set rather than renting.
func (c *Controller) submitWith(ctx context.Context, req Request, group string, replica int, l *market.Lease) (View, error) {
	m := req.Spec
	if len(m.JobId) == 0 {
		m.JobId = NewJobID()
	}
	if m.Gpus == 0 {
		m.Gpus = uint32(req.Count)
	}
	spec, err := EncodeSpec(m)
	if err != nil {
		return View{}, err
	}
	if group == "" && req.Replicas > 1 {
		group = spec.ID() // the first replica names the group
	}
	if int(spec.Gpus) != req.Count {
		return View{}, fmt.Errorf("the spec asks for %d GPUs but %d are rented", spec.Gpus, req.Count)
	}
	if err := os.MkdirAll(c.jobDir(spec.ID()), 0o700); err != nil {
		return View{}, fmt.Errorf("job dir: %w", err)
	}
	now := c.cfg.Now().UTC()
	js := &jobState{rec: newRecord(req, spec, group, replica, now), spec: spec, filter: req.Filter, changed: make(chan struct{}), logs: map[uint32]*logFile{}}
	js.rec.OnLease = l != nil
	js.mu.Lock()
	err = c.save(js)
	js.mu.Unlock()
	if err != nil {
		return View{}, err
	}
	c.mu.Lock()
	c.jobs[js.rec.ID] = js
	c.mu.Unlock()
	if err := c.publish(js, req.Publish); err != nil {
		// Kept as failed, as a job whose first lease failed: it is never
		// rented, nor driven by a restarted node.
		js.mu.Lock()
		js.rec.State, js.rec.Message, js.rec.FinishedAt = StateFailed, err.Error(), c.cfg.Now().UTC()
		_ = c.save(js)
		js.mu.Unlock()
		return c.view(js), err
	}
	if err := c.firstAttempt(ctx, js, l); err != nil {
		if replica > 0 || req.taskOf != "" {
			// The group serves already; a replica that the market cannot
			// place now is rented as a failover is, until RentFor passes.
			c.log.Warn("replica not leased yet; the node keeps trying", "group", group[:8], "replica", replica, "err", err)
			js.mu.Lock()
			js.rec.Message = "no lease yet: " + err.Error()
			_ = c.save(js)
			js.mu.Unlock()
			c.goDrive(js)
			return c.view(js), nil
		}
		js.mu.Lock()
		js.rec.State, js.rec.Message, js.rec.FinishedAt = StateFailed, err.Error(), c.cfg.Now().UTC()
		_ = c.save(js)
		js.mu.Unlock()
		return c.view(js), err
	}
	if err := c.connect(ctx, js); err != nil {
		c.log.Warn("first start failed; the node retries", "job", js.rec.ID, "err", err)
	}
	c.goDrive(js)
	return c.view(js), nil
}

// rentAttempt leases GPUs for the job's next attempt, excluding lost
// suppliers, and records the attempt.
func (c *Controller) rentAttempt(ctx context.Context, js *jobState, exclude []peer.ID) error {
	js.mu.Lock()
	req := js.rec.rentRequest(js.filter, js.spec)
	js.mu.Unlock()
	// Replicas run on distinct suppliers: a sibling's supplier is left
	// out, and so is any supplier a sibling lost.
	req.Exclude = append(exclude, c.siblingSuppliers(js)...)
	l, err := c.cfg.Rent(ctx, req)
	if err != nil {
		return fmt.Errorf("rent: %w", err)
	}
	return c.addAttempt(js, l)
}

// addAttempt records the job's next attempt, on lease l.
func (c *Controller) addAttempt(js *jobState, l *market.Lease) error {
	return c.addAttemptNumbered(js, l, 1)
}

// addAttemptNumbered records the job's next attempt, on lease l, numbered
// at least from.
func (c *Controller) addAttemptNumbered(js *jobState, l *market.Lease, from uint32) error {
	js.mu.Lock()
	defer js.mu.Unlock()
	next := from
	if cur := js.rec.cur(); cur != nil {
		next = max(next, cur.Attempt+1)
	}
	js.rec.Attempts = append(js.rec.Attempts, attemptRec{Attempt: next, Lease: l.Raw, Supplier: l.Supplier.String(), Checkpoint: js.rec.Checkpoint, At: c.cfg.Now().UTC()})
	js.rec.State = StateStarting
	if strings.HasPrefix(js.rec.Message, "no lease yet: ") {
		js.rec.Message = ""
	}
	c.log.Info("job leased", "job", js.rec.ID[:8], "attempt", next, "lease", l.ID.Short(), "supplier", l.Supplier)
	return c.save(js)
}

// Jobs lists the jobs, newest first.
func (c *Controller) Jobs() []View {
	c.mu.Lock()
	all := make([]*jobState, 0, len(c.jobs))
	for _, js := range c.jobs {
		if js.cl == nil || js.rec.Rank == 0 {
			all = append(all, js)
		}
	}
	c.mu.Unlock()
	groups := make([]*groupState, 0, len(c.groups))
	for _, gs := range c.groups {
		groups = append(groups, gs)
	}
	out := make([]View, 0, len(all)+len(groups))
	for _, js := range all {
		if v := c.view(js); v.TaskOf == "" { // a group's tasks are in its view
			out = append(out, v)
		}
	}
	for _, gs := range groups {
		out = append(out, c.groupView(gs))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.After(out[j].Created) })
	return out
}

// Job gives one job by ID or unique ID prefix.
func (c *Controller) Job(id string) (View, error) {
	if gs, err := c.findGroup(id); err != nil || gs != nil {
		if err != nil {
			return View{}, err
		}
		return c.groupView(gs), nil
	}
	js, err := c.find(id)
	if err != nil {
		return View{}, err
	}
	return c.view(js), nil
}

func (c *Controller) find(id string) (*jobState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if js := c.jobs[id]; js != nil {
		return js, nil
	}
	var found *jobState
	for k, js := range c.jobs {
		if js.cl != nil && js.rec.Rank > 0 {
			continue // reached through its cluster: ClusterMember
		}
		if len(id) >= 4 && len(k) >= len(id) && k[:len(id)] == id {
			if found != nil {
				return nil, fmt.Errorf("job prefix %q is ambiguous", id)
			}
			found = js
		}
	}
	if found == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoJob, id)
	}
	return found, nil
}

func (c *Controller) view(js *jobState) View {
	js.mu.Lock()
	r := js.rec
	r.Attempts = slices.Clone(r.Attempts) // drive updates attempts in place
	r.Publish = slices.Clone(r.Publish)   // and Unforward forwards
	health := ""
	if len(js.spec.Ports) > 0 && !r.finished() {
		health = js.healthWord()
	}
	js.mu.Unlock()
	v := View{
		JobID: r.ID, State: r.State, ExitCode: r.ExitCode, Message: r.Message, Argv: js.spec.Argv,
		Checkpoint: r.Checkpoint, Failovers: r.Failovers, Restarts: r.Restarts, Created: r.Created, Updated: r.Updated,
		Attempts: []AttemptView{}, Publish: r.Publish, Group: r.Group, Replica: r.Replica, Health: health,
		OutputsRefused: r.OutputsRefused, TaskOf: r.TaskOf, Task: r.Task,
	}
	if r.Outputs != "" {
		v.Outputs = c.outputsDir(&r)
	}
	for _, a := range r.Attempts {
		l, err := market.OpenLease(a.Lease, c.cfg.Now())
		av := AttemptView{Attempt: a.Attempt, Supplier: a.Supplier, Outcome: a.Outcome, Checkpoint: a.Checkpoint, Settled: a.Settled, StartedAtUTC: a.At.Format(time.RFC3339)}
		if !a.RunningAt.IsZero() {
			av.StartMs = float64(a.RunningAt.Sub(a.At).Microseconds()) / 1000
		}
		if err == nil {
			av.LeaseID = l.ID.String()
			if n, paid, err := c.cfg.Ledger.Paid(l.ID); err == nil {
				av.Receipts, av.PaidMicros = int(n), money.Micros(paid)
			}
		}
		if fi, err := os.Stat(c.logPath(r.ID, a.Attempt)); err == nil {
			av.LogBytes = fi.Size()
		}
		v.PaidMicros += av.PaidMicros
		v.Attempts = append(v.Attempts, av)
	}
	if n := len(v.Attempts); n > 0 {
		cur := v.Attempts[n-1]
		v.Attempt, v.Supplier, v.LeaseID = cur.Attempt, cur.Supplier, cur.LeaseID
	}
	if js.cl != nil && r.Rank == 0 {
		c.clusterView(&v, js.cl)
	}
	return v
}

func (c *Controller) logPath(id string, attempt uint32) string {
	return filepath.Join(c.jobDir(id), fmt.Sprintf("attempt-%d.log", attempt))
}

func (c *Controller) checkpointPath(id, hash string) string {
	return filepath.Join(c.jobDir(id), "checkpoint-"+hash+".tar")
}

// Stop asks the job's supplier to stop it.
func (c *Controller) Stop(id, why string) (View, error) {
	if gs, err := c.findGroup(id); err != nil || gs != nil {
		if err != nil {
			return View{}, err
		}
		return c.stopGroup(gs, why)
	}
	js, err := c.find(id)
	if err != nil {
		return View{}, err
	}
	if js.cl != nil {
		return c.stopCluster(js.cl, why)
	}
	js.mu.Lock()
	if js.rec.finished() {
		js.mu.Unlock()
		return c.view(js), nil
	}
	if why == "" {
		why = "stopped by the renter"
	}
	js.rec.StopAsked = why
	err = c.save(js)
	conn := js.conn
	js.mu.Unlock()
	if err != nil {
		return View{}, err
	}
	if conn != nil {
		conn.send(&pb.ClientFrame{Body: &pb.ClientFrame_Stop{Stop: why}})
	}
	return c.view(js), nil
}

// Logs writes the job's output, all attempts in order, to w from byte
// offset from of the whole; with follow it keeps writing as output
// arrives until the job is over or ctx ends. It returns the offset after
// the last byte written.
func (c *Controller) Logs(ctx context.Context, id string, from int64, follow bool, w io.Writer) (int64, error) {
	if gs, err := c.findGroup(id); err != nil || gs != nil {
		if err == nil {
			err = fmt.Errorf("%s is a task group: name one of its tasks (TaskJob)", id)
		}
		return from, err
	}
	js, err := c.find(id)
	if err != nil {
		return from, err
	}
	off := from
	for {
		js.mu.Lock()
		changed := js.changed
		attempts := make([]uint32, 0, len(js.rec.Attempts))
		for _, a := range js.rec.Attempts {
			attempts = append(attempts, a.Attempt)
		}
		over := js.rec.finished()
		js.mu.Unlock()
		base := int64(0)
		for _, a := range attempts {
			path := c.logPath(js.rec.ID, a)
			fi, err := os.Stat(path)
			if os.IsNotExist(err) {
				continue
			}
			if err != nil {
				return off, err
			}
			if end := base + fi.Size(); off < end {
				if err := copyRange(w, path, off-base, end-off); err != nil {
					return off, err
				}
				off = end
			}
			base += fi.Size()
		}
		if f, ok := w.(interface{ Flush() }); ok {
			f.Flush()
		}
		if !follow || over {
			return off, nil
		}
		select {
		case <-ctx.Done():
			return off, nil
		case <-changed:
		case <-time.After(2 * time.Second):
		}
	}
}

// copyRange writes n bytes of the file at path from offset from to w.
func copyRange(w io.Writer, path string, from, n int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, io.NewSectionReader(f, from, n))
	return err
}
