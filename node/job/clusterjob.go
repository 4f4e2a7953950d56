package job

// The renter's side of a cluster job (Request.Nodes): N members, each a
// job record of its own (its own leases, meters, logs and settlements)
// under the cluster's ID (rank 0's), run together as cluster attempts.
// A cluster attempt leases N suppliers all or nothing (market's gang
// lease), starts every member with the same attempt number and the
// member list (Hello.cluster), and ends as soon as one member ends other
// than by succeeding: the survivors are stopped (their billing ends),
// every lease settles as any attempt's does, and the next attempt leases
// N suppliers again (survivors preferred, lost ones excluded) and starts
// every rank from rank 0's last checkpoint. Rank 0's outcome is the
// cluster's: once it succeeds, members still running are stopped.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/job/pb"
)

// clusterState is a cluster job in memory: its members in rank order and
// where the cluster attempt stands. Lock order: clusterState.mu before
// any member's jobState.mu.
type clusterState struct {
	id      string
	members []*jobState

	mu sync.Mutex
	// restarting: the current attempt is over; its members are being
	// stopped and the next one is leased once all of them have ended.
	restarting bool
	// ending is why the cluster is over ("" while it goes on): its
	// members still running are stopped and end in endState.
	ending   string
	endState State
	cause    string // why the last attempt ended
	// failovers and restarts count cluster attempts that ended by a
	// member's loss or by its own failure (kept in rank 0's record).
	failovers, restarts int
	wake                chan struct{}
}

func (cl *clusterState) poke() {
	select {
	case cl.wake <- struct{}{}:
	default:
	}
}

// memberID is the record ID of rank r of the cluster id.
func memberID(id string, r int) string {
	if r == 0 {
		return id
	}
	return id + "-" + strconv.Itoa(r)
}

// isMemberID reports whether id names a member of rank > 0, which job
// listings fold into their cluster.
func isMemberID(id string) bool { return strings.Contains(id, "-") }

// submitCluster leases the cluster's first attempt (all N or nothing),
// keeps a record per member and starts following them.
func (c *Controller) submitCluster(ctx context.Context, req Request) (View, error) {
	if c.cfg.RentGang == nil {
		return View{}, errors.New("this node cannot lease clusters")
	}
	m := proto.Clone(req.Spec).(*pb.JobSpec)
	if len(m.JobId) == 0 {
		m.JobId = NewJobID()
	}
	if m.Gpus == 0 {
		m.Gpus = uint32(req.Count)
	}
	if m.Cluster == nil {
		m.Cluster = &pb.Cluster{}
	}
	m.Cluster.Nodes = uint32(req.Nodes)
	spec, err := EncodeSpec(m)
	if err != nil {
		return View{}, err
	}
	if int(spec.Gpus) != req.Count {
		return View{}, fmt.Errorf("the spec asks for %d GPUs but %d are rented", spec.Gpus, req.Count)
	}
	now := c.cfg.Now().UTC()
	cl := &clusterState{id: spec.ID(), wake: make(chan struct{}, 1)}
	for r := range req.Nodes {
		rec := newRecord(req, spec, "", 0, now)
		rec.ID, rec.Cluster, rec.Rank = memberID(spec.ID(), r), spec.ID(), r
		if err := os.MkdirAll(c.jobDir(rec.ID), 0o700); err != nil {
			return View{}, fmt.Errorf("job dir: %w", err)
		}
		cl.members = append(cl.members, &jobState{rec: rec, spec: spec, filter: req.Filter, cl: cl, changed: make(chan struct{}), logs: map[uint32]*logFile{}})
	}
	leases, err := c.rentCluster(ctx, cl)
	if err != nil {
		return View{}, err
	}
	c.mu.Lock()
	for _, js := range cl.members {
		if c.jobs[js.rec.ID] != nil {
			c.mu.Unlock()
			c.releaseAll(leases)
			return View{}, fmt.Errorf("job %s exists already", js.rec.ID)
		}
	}
	for _, js := range cl.members {
		c.jobs[js.rec.ID] = js
	}
	c.mu.Unlock()
	if err := c.addClusterAttempt(cl, leases); err != nil {
		return View{}, err
	}
	c.goCluster(cl)
	return c.Job(cl.id)
}

// releaseAll gives back leases that no attempt will use, without the
// renter being counted as leaving them unclaimed.
func (c *Controller) releaseAll(leases []*market.Lease) {
	if c.cfg.ReleaseLeases == nil || len(leases) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	if err := c.cfg.ReleaseLeases(ctx, leases); err != nil {
		c.log.Warn("release leases", "err", err)
	}
}

// rentCluster leases N suppliers for the cluster's next attempt: the
// survivors of the last one first, every supplier lost so far excluded.
func (c *Controller) rentCluster(ctx context.Context, cl *clusterState) ([]*market.Lease, error) {
	rank0 := cl.members[0]
	rank0.mu.Lock()
	req := rank0.rec.rentRequest(rank0.filter, rank0.spec)
	rank0.mu.Unlock()
	var prefer, exclude []peer.ID
	for _, js := range cl.members {
		js.mu.Lock()
		for i, a := range js.rec.Attempts {
			id, err := peer.Decode(a.Supplier)
			if err != nil {
				continue
			}
			switch {
			case a.Outcome == StateLost || a.Outcome == StateInterrupted || a.Outcome == StateExpired:
				exclude = append(exclude, id)
			case i == len(js.rec.Attempts)-1:
				prefer = append(prefer, id)
			}
		}
		js.mu.Unlock()
	}
	req.Exclude = exclude
	return c.cfg.RentGang(ctx, market.GangRequest{RentRequest: req, Nodes: len(cl.members), Prefer: prefer})
}

// addClusterAttempt records the cluster's next attempt on leases (rank
// order): one number for every member, each resuming from rank 0's last
// checkpoint.
func (c *Controller) addClusterAttempt(cl *clusterState, leases []*market.Lease) error {
	var next uint32 = 1
	for _, js := range cl.members {
		js.mu.Lock()
		if cur := js.rec.cur(); cur != nil {
			next = max(next, cur.Attempt+1)
		}
		js.mu.Unlock()
	}
	rank0 := cl.members[0]
	rank0.mu.Lock()
	cp := rank0.rec.Checkpoint
	rank0.mu.Unlock()
	var archive []byte
	if cp != "" {
		var err error
		if archive, err = os.ReadFile(c.checkpointPath(rank0.rec.ID, cp)); err != nil {
			c.log.Warn("rank 0's checkpoint is gone; the cluster starts afresh", "cluster", cl.id[:8], "err", err)
			cp = ""
		}
	}
	for r, js := range cl.members {
		if r > 0 && cp != "" {
			if err := writeFileSync(c.checkpointPath(js.rec.ID, cp), archive); err != nil {
				return fmt.Errorf("rank %d: checkpoint: %w", r, err)
			}
		}
		js.mu.Lock()
		js.rec.Checkpoint = cp
		js.rec.ClusterLeases = nil
		for _, l := range leases {
			js.rec.ClusterLeases = append(js.rec.ClusterLeases, l.Raw)
		}
		js.mu.Unlock()
		if err := c.addAttemptNumbered(js, leases[r], next); err != nil {
			return err
		}
		js.mu.Lock()
		js.notify()
		js.mu.Unlock()
	}
	c.log.Info("cluster attempt leased", "cluster", cl.id[:8], "attempt", next, "members", len(leases))
	return nil
}

// clusterHelloOf is the start Hello's member list for js's current
// attempt.
func (c *Controller) clusterHelloOf(js *jobState, attempt uint32) (*pb.ClusterHello, error) {
	js.mu.Lock()
	raws := js.rec.ClusterLeases
	rank := js.rec.Rank
	js.mu.Unlock()
	leases := make([]*market.Lease, len(raws))
	for i, raw := range raws {
		l, err := market.OpenLease(raw, c.cfg.Now())
		if err != nil {
			return nil, fmt.Errorf("member %d's lease: %w", i, err)
		}
		leases[i] = l
	}
	addrs := c.cfg.PeerAddrs
	if addrs == nil {
		addrs = func(peer.ID) []ma.Multiaddr { return nil }
	}
	return clusterHello(attempt, rank, leases, addrs), nil
}

func (c *Controller) goCluster(cl *clusterState) {
	for _, js := range cl.members {
		c.goDrive(js)
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.coordinate(c.ctx, cl)
	}()
}

// memberOver is attemptOver for a cluster member: the member's attempt
// ended in outcome; what that means is the cluster's to decide.
func (c *Controller) memberOver(js *jobState, outcome State, why string) {
	cl := js.cl
	cl.mu.Lock()
	js.mu.Lock()
	cur := js.rec.cur()
	if cur == nil || cur.Outcome != "" {
		js.mu.Unlock()
		cl.mu.Unlock()
		return
	}
	cur.Outcome = outcome
	rank := js.rec.Rank
	switch {
	case outcome == StateSucceeded:
		js.rec.State = StateSucceeded
		if rank == 0 && cl.ending == "" {
			// Rank 0's outcome is the cluster's.
			cl.ending, cl.endState, cl.restarting = "rank 0 finished", StateStopped, false
		}
	case cl.ending != "":
		js.rec.State, js.rec.Message = cl.endState, cl.ending
	case cl.restarting:
		js.rec.State, js.rec.Message = StateRecovering, "cluster attempt over: "+cl.cause
	case js.rec.StopAsked != "":
		js.rec.State, js.rec.Message = StateStopped, js.rec.StopAsked
		cl.ending, cl.endState = js.rec.StopAsked, StateStopped
	default:
		// This member's end is the cluster attempt's. What it counts
		// against is judged once every member's attempt is over
		// (judgeAttempt): a rank that fails because another member's
		// supplier died looks like the job's own failure until that
		// member is known lost.
		cl.cause = fmt.Sprintf("rank %d %s", rank, outcome)
		if why != "" {
			cl.cause += ": " + why
		}
		js.rec.State, js.rec.Message = StateRecovering, "cluster attempt over: "+cl.cause
		cl.restarting = true
	}
	if js.rec.finished() && js.rec.FinishedAt.IsZero() {
		js.rec.FinishedAt = c.cfg.Now().UTC()
	}
	_ = c.save(js)
	state := js.rec.State
	js.mu.Unlock()
	cl.mu.Unlock()
	c.log.Info("cluster member's attempt over", "cluster", cl.id[:8], "rank", rank, "outcome", outcome, "member_state", state)
	if outcome == StateLost {
		c.lostAttempt(js)
	}
	cl.poke()
}

// judgeAttempt counts a cluster attempt that is over, every member's
// outcome known, against the cluster's budgets and says why the cluster
// fails ("" when it goes on). A member lost, interrupted, expired or
// fenced makes it a failover, whatever the others did meanwhile (a
// rank whose peer vanished fails too); otherwise a member's own failure
// counts against the spec's restart policy, with that member's exit
// code.
func (c *Controller) judgeAttempt(cl *clusterState) string {
	var (
		infra      bool
		failedCode int
		failed     bool
	)
	for _, js := range cl.members {
		js.mu.Lock()
		if cur := js.rec.cur(); cur != nil {
			switch cur.Outcome {
			case StateLost, StateInterrupted, StateExpired, StateFenced, StateHalted:
				infra = true
			case StateFailed:
				if !failed {
					failed, failedCode = true, js.rec.ExitCode
				}
			}
		}
		js.mu.Unlock()
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if !infra && failed {
		if cl.members[0].spec.Retries(failedCode, cl.restarts) {
			cl.restarts++
			return ""
		}
		return "cluster failed: " + cl.cause
	}
	cl.failovers++
	if cl.failovers > c.cfg.RetryBudget {
		return fmt.Sprintf("cluster gave up after %d failovers: %s", c.cfg.RetryBudget, cl.cause)
	}
	return ""
}

// keepBudgets writes the cluster's failover and restart counts into rank
// 0's record, the cluster's.
func (c *Controller) keepBudgets(cl *clusterState) {
	cl.mu.Lock()
	f, r := cl.failovers, cl.restarts
	cl.mu.Unlock()
	rank0 := cl.members[0]
	rank0.mu.Lock()
	if rank0.rec.Failovers != f || rank0.rec.Restarts != r {
		rank0.rec.Failovers, rank0.rec.Restarts = f, r
		_ = c.save(rank0)
	}
	rank0.mu.Unlock()
}

// coordinate runs a cluster from one attempt to the next until it is
// over: it stops the members still running when an attempt is over (or
// the cluster is), and leases the next attempt once all have ended.
func (c *Controller) coordinate(ctx context.Context, cl *clusterState) {
	var rentFailing time.Time
	judged := false                   // the attempt over has been counted against the budgets
	stopped := map[*jobState]uint32{} // the attempt each member was told to stop
	for ctx.Err() == nil {
		cl.mu.Lock()
		restarting, ending, cause := cl.restarting, cl.ending, cl.cause
		cl.mu.Unlock()
		allOver, allFinal := true, true
		for _, js := range cl.members {
			js.mu.Lock()
			cur := js.rec.cur()
			running := cur != nil && cur.Outcome == ""
			final := js.rec.finished()
			conn := js.conn
			var attempt uint32
			if cur != nil {
				attempt = cur.Attempt
			}
			if !running && !final && ending != "" {
				// Nothing runs for it, and nothing will.
				js.rec.State, js.rec.Message = cl.endState, ending
				js.rec.FinishedAt = c.cfg.Now().UTC()
				_ = c.save(js)
				js.notify()
				final = true
			}
			js.mu.Unlock()
			if running {
				allOver = false
				if (restarting || ending != "") && stopped[js] != attempt && conn != nil {
					why := "cluster attempt over: " + cause
					if ending != "" {
						why = "cluster over: " + ending
					}
					conn.send(&pb.ClientFrame{Body: &pb.ClientFrame_Stop{Stop: why}})
					stopped[js] = attempt
				}
			}
			allFinal = allFinal && final
		}
		if ending != "" && allFinal {
			c.log.Info("cluster over", "cluster", cl.id[:8], "why", ending)
			return
		}
		if restarting && ending == "" && allOver && !judged {
			judged = true
			give := c.judgeAttempt(cl)
			c.keepBudgets(cl)
			if give != "" {
				cl.mu.Lock()
				cl.ending, cl.endState, cl.restarting = give, StateFailed, false
				cl.mu.Unlock()
				continue
			}
		}
		if restarting && ending == "" && allOver {
			leases, err := c.rentCluster(ctx, cl)
			if err == nil {
				err = c.addClusterAttempt(cl, leases)
			}
			if err == nil {
				cl.mu.Lock()
				cl.restarting = false
				cl.mu.Unlock()
				rentFailing, judged = time.Time{}, false
				continue
			}
			c.log.Warn("no cluster lease yet", "cluster", cl.id[:8], "err", err)
			if rentFailing.IsZero() {
				rentFailing = c.cfg.Now()
			}
			if c.cfg.Now().Sub(rentFailing) >= RentFor {
				cl.mu.Lock()
				cl.ending, cl.endState = fmt.Sprintf("no %d suppliers to continue on for %s: %v", len(cl.members), RentFor, err), StateFailed
				cl.mu.Unlock()
				continue
			}
			sleep(ctx, time.Duration(2000+rand.IntN(3000))*time.Millisecond)
			continue
		}
		select {
		case <-ctx.Done():
		case <-cl.wake:
		case <-time.After(2 * time.Second):
		}
	}
}

// memberWait blocks a member's drive until the cluster gives it its next
// attempt, or the cluster is over.
func (c *Controller) memberWait(ctx context.Context, js *jobState) {
	js.mu.Lock()
	ch := js.changed
	js.mu.Unlock()
	select {
	case <-ctx.Done():
	case <-ch:
	case <-time.After(5 * time.Second):
	}
}

// over reports whether the cluster is over (its members end, and are
// not leased again).
func (cl *clusterState) over() bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.ending != ""
}

// restoreClusters regroups the members loaded from the store into their
// clusters. An attempt that was running goes on; one that was over is
// followed by the next, as before the restart.
func (c *Controller) restoreClusters() []*clusterState {
	byID := map[string]*clusterState{}
	var out []*clusterState
	for _, js := range c.jobs {
		id := js.rec.Cluster
		if id == "" {
			continue
		}
		cl := byID[id]
		if cl == nil {
			cl = &clusterState{id: id, wake: make(chan struct{}, 1)}
			byID[id] = cl
			out = append(out, cl)
		}
		js.cl = cl
	}
	for _, cl := range out {
		cl.members = make([]*jobState, 0)
		for r := 0; ; r++ {
			js := c.jobs[memberID(cl.id, r)]
			if js == nil {
				break
			}
			cl.members = append(cl.members, js)
		}
		rank0 := cl.members[0]
		cl.failovers, cl.restarts = rank0.rec.Failovers, rank0.rec.Restarts
		switch {
		case rank0.rec.finished():
			cl.ending, cl.endState = rank0.rec.Message, rank0.rec.State
			if cl.ending == "" {
				cl.ending = "rank 0 " + rank0.rec.State.String()
			}
		default:
			for _, js := range cl.members {
				if cur := js.rec.cur(); js.rec.State == StateRecovering && cur != nil && cur.Outcome != "" {
					cl.restarting, cl.cause = true, js.rec.Message
				}
			}
		}
	}
	return out
}

// ClusterMember gives the record ID of rank r of the cluster id (an ID or
// unique prefix of it).
func (c *Controller) ClusterMember(id string, r int) (string, error) {
	js, err := c.find(id)
	if err != nil {
		return "", err
	}
	if js.cl == nil {
		if r == 0 {
			return js.rec.ID, nil
		}
		return "", fmt.Errorf("job %s is not a cluster", js.rec.ID[:8])
	}
	if r < 0 || r >= len(js.cl.members) {
		return "", fmt.Errorf("cluster %s has ranks 0..%d", js.cl.id[:8], len(js.cl.members)-1)
	}
	return js.cl.members[r].rec.ID, nil
}

// MemberView is one member of a cluster, as View.Members lists it.
type MemberView struct {
	Rank       int          `json:"rank"`
	JobID      string       `json:"job_id"`
	State      State        `json:"state"`
	Attempt    uint32       `json:"attempt"`
	Supplier   string       `json:"supplier"`
	LeaseID    string       `json:"lease_id"`
	PaidMicros money.Micros `json:"paid_micros"`
	Message    string       `json:"message,omitempty"`
	Links      []LinkView   `json:"links,omitempty"` // how its supplier reaches the other members'
}

// clusterView adds a cluster's members to rank 0's view: the cluster's.
func (c *Controller) clusterView(v *View, cl *clusterState) {
	v.Nodes = len(cl.members)
	for r, js := range cl.members {
		mv := v.memberSelf(r)
		if r > 0 {
			mv = c.view(js).memberSelf(r)
		}
		js.mu.Lock()
		mv.Links = slices.Clone(js.links)
		js.mu.Unlock()
		v.Members = append(v.Members, mv)
		if r > 0 {
			v.PaidMicros += mv.PaidMicros
		}
	}
}

func (v View) memberSelf(r int) MemberView {
	return MemberView{Rank: r, JobID: v.JobID, State: v.State, Attempt: v.Attempt, Supplier: v.Supplier, LeaseID: v.LeaseID, PaidMicros: v.PaidMicros, Message: v.Message}
}

// stopCluster stops every member of cl: the cluster is over.
func (c *Controller) stopCluster(cl *clusterState, why string) (View, error) {
	if why == "" {
		why = "stopped by the renter"
	}
	cl.mu.Lock()
	if cl.ending == "" {
		cl.ending, cl.endState, cl.restarting = why, StateStopped, false
	}
	cl.mu.Unlock()
	for _, js := range cl.members {
		js.mu.Lock()
		if !js.rec.finished() {
			js.rec.StopAsked = why
			_ = c.save(js)
		}
		js.mu.Unlock()
	}
	cl.poke()
	return c.Job(cl.id)
}

// clusterSettled reports whether every member of a cluster that is over
// has settled (or given up settling).
func (c *Controller) clusterSettled(cl *clusterState) bool {
	for _, js := range cl.members {
		js.mu.Lock()
		ok := js.rec.finished() && (c.allSettled(&js.rec) || c.settleGaveUp(&js.rec))
		js.mu.Unlock()
		if !ok {
			return false
		}
	}
	return true
}
