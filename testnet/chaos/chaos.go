package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/testnet"
)

// Options configure Run. Zero fields take the defaults in parentheses.
type Options struct {
	Binary string // the gpumesh binary (testnet.DefaultBinary)
	Dir    string // the testnet's state directory, which Run owns: required
	Nodes  int    // network size (20)

	Calm, Flood, Kills time.Duration // phase lengths (60 s, 60 s, 120 s)
	KillEvery          time.Duration // a kill this often in the kills phase (10 s)
	Downtime           time.Duration // how long a killed node stays down (5 s)

	// Skew maps node indices to their clock's offset (default: nodes
	// 7, 17, … 30 s ahead and 8, 18, … 30 s behind).
	Skew map[int]time.Duration
	// Renters are the nodes whose API submits jobs (2 and 3).
	Renters []int
	// JobLoops is how many jobs each renter keeps going at once (2).
	JobLoops int
	// RentEvery is the cold light client's pace (4 s): every lease it
	// makes holds a GPU for the claim window (a minute) unless claimed.
	RentEvery time.Duration
	// FloodRate is the flooder's asks per second (200).
	FloodRate float64
	// JobTimeout bounds one job, submission to end (3 min).
	JobTimeout time.Duration
	// Seed makes the kills and the models rented repeatable (1).
	Seed uint64
	// Logger reports progress; discarded when nil.
	Logger *slog.Logger
}

// The phases, in the order they run.
const (
	PhaseCalm  = "calm"
	PhaseFlood = "flood"
	PhaseKills = "kills"
	PhaseDrain = "drain" // after the phases: jobs finishing, nothing new
)

func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" {
		return o, errors.New("chaos: Options.Dir is required")
	}
	if o.Binary == "" {
		o.Binary = testnet.DefaultBinary
	}
	if o.Nodes == 0 {
		o.Nodes = 20
	}
	if o.Nodes < 5 {
		return o, fmt.Errorf("chaos: %d nodes: want at least 5 (2 bootstrap peers, 2 renters, a node to kill)", o.Nodes)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.Calm, time.Minute)
	def(&o.Flood, time.Minute)
	def(&o.Kills, 2*time.Minute)
	def(&o.KillEvery, 10*time.Second)
	def(&o.Downtime, 5*time.Second)
	def(&o.RentEvery, 4*time.Second)
	def(&o.JobTimeout, 3*time.Minute)
	if o.Skew == nil {
		o.Skew = map[int]time.Duration{}
		// The cheapest supplier of a100-80gb and of l40s that is not a
		// renter (testnet.ProfileFor), so that jobs do land on them.
		for i := 7; i < o.Nodes; i += 10 {
			o.Skew[i] = 30 * time.Second
			if i+1 < o.Nodes {
				o.Skew[i+1] = -30 * time.Second
			}
		}
	}
	if o.Renters == nil {
		o.Renters = []int{2, 3}
	}
	for _, r := range o.Renters {
		if r < 0 || r >= o.Nodes {
			return o, fmt.Errorf("chaos: renter node %d: the network has nodes 0..%d", r, o.Nodes-1)
		}
		if o.Skew[r] != 0 {
			return o, fmt.Errorf("chaos: renter node %d has a skewed clock: renters are the honest nodes measured", r)
		}
	}
	if o.JobLoops == 0 {
		o.JobLoops = 2
	}
	if o.FloodRate == 0 {
		o.FloodRate = 200
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// run is one chaos run in progress.
type run struct {
	o     Options
	log   *slog.Logger
	st    *testnet.State
	boots []peer.AddrInfo

	mu    sync.Mutex
	phase string
	rec   Report
	down  map[int]bool // nodes killed and not yet restarted
	// killedAt: when each supplier (by peer ID) was last killed, for
	// the failover times.
	killedAt map[string][]time.Time
}

func (r *run) currentPhase() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.phase
}

func (r *run) setPhase(p string) {
	r.mu.Lock()
	r.phase = p
	r.rec.Phases = append(r.rec.Phases, PhaseSpan{Name: p, Start: time.Now()})
	r.mu.Unlock()
	r.log.Info("chaos: phase", "phase", p)
}

// Run runs the chaos scenario of o, stops the network, checks every
// node's store and returns what it found. The error is for a run that
// could not be carried out (the network did not come up, a store could
// not be read); what the checks found is in the Report (Report.Failures).
func Run(ctx context.Context, o Options) (_ *Report, err error) {
	if o, err = o.withDefaults(); err != nil {
		return nil, err
	}
	r := &run{o: o, log: o.Logger, down: map[int]bool{}, killedAt: map[string][]time.Time{}}
	r.rec.Nodes, r.rec.Skew = o.Nodes, o.Skew
	start := time.Now()
	r.st, err = testnet.Up(ctx, testnet.Options{
		Binary: o.Binary, Dir: o.Dir, Nodes: o.Nodes, Logger: o.Logger,
		ExtraArgs: func(i int) []string {
			if d := o.Skew[i]; d != 0 {
				return []string{"--clock-offset", d.String()}
			}
			return nil
		},
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	defer func() {
		if derr := testnet.Down(o.Dir); derr != nil && !errors.Is(derr, testnet.ErrNotRunning) && err == nil {
			err = fmt.Errorf("chaos: stop the network: %w", derr)
		}
	}()
	r.rec.UpTook = time.Since(start)
	for _, a := range r.st.Bootstrap {
		ai, err := peer.AddrInfoFromString(a)
		if err != nil {
			return nil, fmt.Errorf("chaos: bootstrap address %s: %w", a, err)
		}
		r.boots = append(r.boots, *ai)
	}
	r.rec.Honest = map[string]bool{}
	for i, n := range r.st.Nodes {
		r.rec.Honest[n.PeerID] = o.Skew[i] == 0
	}

	// The workload runs through every phase; work stops being taken when
	// stopWork is cancelled, and jobs under way are followed to their end.
	work, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var wg sync.WaitGroup
	r.setPhase(PhaseCalm)
	for _, ri := range o.Renters {
		for range o.JobLoops {
			wg.Go(func() { r.jobLoop(work, ctx, ri) })
		}
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x6368616f73))
	wg.Go(func() { r.rentLoop(work, rand.New(rand.NewPCG(rng.Uint64(), 1))) })

	cpu := r.cpuMeter()
	if err := sleep(ctx, o.Calm); err != nil {
		return nil, err
	}
	r.rec.NodeCPU = map[string]float64{PhaseCalm: cpu()}
	r.setPhase(PhaseFlood)
	fl, err := spawnFlooder(ctx, r.st, o.FloodRate)
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	r.rec.Flooder = fl.id.String()
	cpu = r.cpuMeter()
	if err := sleep(ctx, o.Flood); err != nil {
		fl.Close()
		return nil, err
	}
	r.rec.NodeCPU[PhaseFlood] = cpu()
	r.rec.FloodHeld = r.floodHeld(ctx, fl.id)
	r.rec.FloodSent = fl.Close()

	r.setPhase(PhaseKills)
	if err := r.kills(ctx, rng); err != nil {
		return nil, err
	}
	r.setPhase(PhaseDrain)
	stopWork()
	wg.Wait()
	r.finishJobs(ctx)
	if err := testnet.Down(o.Dir); err != nil {
		return nil, fmt.Errorf("chaos: stop the network: %w", err)
	}
	r.rec.Orphans = r.orphans()
	if err := r.audit(time.Now()); err != nil {
		return nil, err
	}
	r.rec.Took = time.Since(start)
	r.rec.judge()
	return &r.rec, nil
}

// kills kills and restarts random nodes for the kills phase: one down at
// a time (testnet.Restart rewrites the state file).
func (r *run) kills(ctx context.Context, rng *rand.Rand) error {
	end := time.Now().Add(r.o.Kills)
	for time.Now().Before(end) {
		next := time.Now().Add(r.o.KillEvery)
		st, err := testnet.Load(r.o.Dir)
		if err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
		i := 2 + rng.IntN(len(st.Nodes)-2) // not a bootstrap peer
		// Every other kill is of a supplier running a job, so that
		// failovers happen whatever the prices put jobs on.
		r.mu.Lock()
		odd := len(r.rec.Kills)%2 == 1
		r.mu.Unlock()
		if odd {
			if busy := r.jobSuppliers(ctx, st); len(busy) > 0 {
				i = busy[rng.IntN(len(busy))]
			}
		}
		nd := st.Nodes[i]
		ev := Kill{Node: i, Peer: nd.PeerID, Killed: time.Now()}
		if err := syscall.Kill(nd.PID, syscall.SIGKILL); err != nil {
			return fmt.Errorf("chaos: kill node %d (pid %d): %w", i, nd.PID, err)
		}
		r.mu.Lock()
		r.down[i] = true
		r.killedAt[nd.PeerID] = append(r.killedAt[nd.PeerID], ev.Killed)
		r.mu.Unlock()
		r.log.Info("chaos: killed", "node", i, "peer", nd.PeerID)
		if err := sleep(ctx, r.o.Downtime); err != nil {
			return err
		}
		ev.Restarted = time.Now()
		_, err = testnet.Restart(ctx, r.o.Dir, i)
		ev.Ready = time.Now()
		if err != nil {
			ev.Err = err.Error()
			r.log.Warn("chaos: restart failed", "node", i, "err", err)
		}
		r.mu.Lock()
		delete(r.down, i)
		r.rec.Kills = append(r.rec.Kills, ev)
		r.mu.Unlock()
		if err := sleep(ctx, time.Until(next)); err != nil {
			return err
		}
	}
	return nil
}

// cpuMeter starts measuring the honest nodes' CPU; the function it returns
// is their mean share of a core since then, in percent.
func (r *run) cpuMeter() func() float64 {
	start := time.Now()
	var pids []int
	var ticks uint64
	for i, nd := range r.st.Nodes {
		if r.o.Skew[i] != 0 {
			continue
		}
		if t, err := testnet.CPUTicks(nd.PID); err == nil {
			pids = append(pids, nd.PID)
			ticks += t
		}
	}
	return func() float64 {
		var now uint64
		for _, pid := range pids {
			t, err := testnet.CPUTicks(pid)
			if err != nil {
				return 0
			}
			now += t
		}
		secs := time.Since(start).Seconds()
		if len(pids) == 0 || secs <= 0 {
			return 0
		}
		return float64(now-ticks) / 100 / secs / float64(len(pids)) * 100
	}
}

// jobSuppliers lists the nodes, bootstrap peers aside, that run a job of
// a renter node now.
func (r *run) jobSuppliers(ctx context.Context, st *testnet.State) []int {
	byPeer := map[string]int{}
	for i, nd := range st.Nodes {
		if i >= 2 {
			byPeer[nd.PeerID] = i
		}
	}
	var out []int
	for _, ri := range r.o.Renters {
		nd := st.Nodes[ri]
		c, err := api.ClientForDataDir(nd.API, nd.DataDir)
		if err != nil {
			continue
		}
		views, err := c.Jobs(ctx)
		c.Close()
		if err != nil {
			continue
		}
		for _, v := range views {
			if i, ok := byPeer[v.Supplier]; ok && v.State == job.StateRunning && !slices.Contains(out, i) {
				out = append(out, i)
			}
		}
	}
	return out
}

// sleep waits d, or returns ctx's error when it ends first.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
