package job

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/store"
)

// A task group runs one command N times (Request.Tasks), each run a job of
// its own: its own ID, lease, meter, settlement, restarts and failovers
// from its own checkpoint, as any job. A task gets TASK_INDEX (0..N-1)
// and TASK_COUNT in its environment, and at most Parallel tasks run at
// once: the next one starts when one ends. Tasks may land on any
// suppliers the market gives, the same or not.
//
// The group has an ID of its own and a record in the store (groupRecord),
// which names each task's job ID before that job is submitted, so a
// restarted node resumes the group: it submits the task it was about to
// (under the same ID) and starts the rest. The group succeeds once every
// task has succeeded, and fails as soon as one task fails for good (its
// own failures past its restart policy, or failovers past the retry
// budget, or no supplier for RentFor): the tasks still running are then
// stopped and the pending ones never start. A task's outputs are kept in
// DATA/outputs/<group id>/<index>.

var ksGroups = store.MustKeyspace("task-groups") // group ID -> groupRecord (JSON)

// Task group bounds.
const (
	// MaxTasks bounds a group's tasks.
	MaxTasks = 10000
	// DefaultParallel bounds how many tasks run at once when the request
	// does not say.
	DefaultParallel = 8
	// groupPoll is how often a group looks at its tasks.
	groupPoll = 300 * time.Millisecond
)

// groupRecord is the renter's durable record of a task group.
type groupRecord struct {
	ID        string       `json:"id"`
	Spec      []byte       `json:"spec"` // the tasks' JobSpec (protobuf), without a job ID
	Filter    string       `json:"filter"`
	Count     int          `json:"count"`
	Duration  int64        `json:"duration_ms"`
	MaxPrice  money.Micros `json:"max_price"`
	MinRep    float64      `json:"min_rep"`
	Unproven  bool         `json:"allow_unproven,omitempty"`
	Simulated bool         `json:"allow_simulated,omitempty"`
	Interval  int64        `json:"interval_ms"`
	Credit    money.Micros `json:"credit"`
	Tasks     int          `json:"tasks"`
	Parallel  int          `json:"parallel"`
	// Children are the tasks' job IDs by index; "" for a task not
	// started yet.
	Children  []string  `json:"children"`
	State     State     `json:"state"`
	Message   string    `json:"message,omitempty"`
	StopAsked string    `json:"stop_asked,omitempty"`
	Created   time.Time `json:"created"`
	Updated   time.Time `json:"updated"`
}

func (g *groupRecord) finished() bool {
	return g.State == StateSucceeded || g.State == StateFailed || g.State == StateStopped
}

// request is the request that submits task i.
func (g *groupRecord) request(i int) (Request, error) {
	var spec pb.JobSpec
	if err := proto.Unmarshal(g.Spec, &spec); err != nil {
		return Request{}, fmt.Errorf("group %s: spec: %w", g.ID, err)
	}
	f, err := market.ParseFilter(g.Filter, market.AnyModel())
	if err != nil {
		return Request{}, fmt.Errorf("group %s: filter: %w", g.ID, err)
	}
	id, err := hex.DecodeString(g.Children[i])
	if err != nil {
		return Request{}, fmt.Errorf("group %s: task %d: %w", g.ID, i, err)
	}
	spec.JobId = id
	spec.Env = append(slices.DeleteFunc(spec.Env, func(v *pb.EnvVar) bool { return v.Name == "TASK_INDEX" || v.Name == "TASK_COUNT" }),
		&pb.EnvVar{Name: "TASK_INDEX", Value: strconv.Itoa(i)}, &pb.EnvVar{Name: "TASK_COUNT", Value: strconv.Itoa(g.Tasks)})
	return Request{
		Spec: &spec, Filter: f,
		RentTerms:     market.RentTerms{Count: g.Count, Duration: time.Duration(g.Duration) * time.Millisecond, MaxPrice: g.MaxPrice},
		MinReputation: g.MinRep, AllowUnproven: g.Unproven, AllowSimulated: g.Simulated,
		ReceiptInterval: time.Duration(g.Interval) * time.Millisecond, CreditLimit: g.Credit,
		taskOf: g.ID, task: i,
	}, nil
}

// groupState is a group in memory.
type groupState struct {
	mu  sync.Mutex
	rec groupRecord
}

// TaskView is one task of a group.
type TaskView struct {
	Index      int          `json:"index"`
	JobID      string       `json:"job_id,omitempty"` // "" while pending
	State      State        `json:"state"`            // pending before it starts
	Supplier   string       `json:"supplier,omitempty"`
	PaidMicros money.Micros `json:"paid_micros"`
	Outputs    string       `json:"outputs,omitempty"`
}

// StatePending is a task of a group not started yet.
const StatePending State = "pending"

// submitTasks makes a task group of req and starts its first tasks.
func (c *Controller) submitTasks(ctx context.Context, req Request) (View, error) {
	switch {
	case req.Tasks > MaxTasks:
		return View{}, fmt.Errorf("%d tasks: at most %d", req.Tasks, MaxTasks)
	case req.Parallel < 0:
		return View{}, errors.New("parallel: negative")
	case req.Replicas > 1 || len(req.Publish) > 0 || len(req.Spec.Ports) > 0:
		return View{}, errors.New("tasks run to their end: no replicas, ports or forwards")
	}
	par := req.Parallel
	if par == 0 {
		par = min(req.Tasks, DefaultParallel)
	}
	spec := proto.Clone(req.Spec).(*pb.JobSpec)
	spec.JobId = nil
	if spec.Gpus == 0 {
		spec.Gpus = uint32(req.Count)
	}
	raw, err := proto.Marshal(spec)
	if err != nil {
		return View{}, err
	}
	now := c.cfg.Now().UTC()
	gs := &groupState{rec: groupRecord{
		ID: hex.EncodeToString(NewJobID()), Spec: raw, Filter: req.Filter.String(), Count: req.Count, Duration: req.Duration.Milliseconds(),
		MaxPrice: req.MaxPrice, MinRep: req.MinReputation, Unproven: req.AllowUnproven, Simulated: req.AllowSimulated,
		Interval: req.ReceiptInterval.Milliseconds(), Credit: req.CreditLimit, Tasks: req.Tasks, Parallel: min(par, req.Tasks),
		Children: make([]string, req.Tasks), State: StateRunning, Created: now,
	}}
	// The first task is checked as any job: a spec or market the tasks
	// cannot run with fails here, not in the background.
	gs.rec.Children[0] = hex.EncodeToString(NewJobID())
	first, err := gs.rec.request(0)
	gs.rec.Children[0] = ""
	if err != nil {
		return View{}, err
	}
	if _, err := EncodeSpec(first.Spec); err != nil {
		return View{}, err
	}
	gs.mu.Lock()
	err = c.saveGroup(gs)
	gs.mu.Unlock()
	if err != nil {
		return View{}, err
	}
	c.mu.Lock()
	c.groups[gs.rec.ID] = gs
	c.mu.Unlock()
	c.goGroup(gs)
	return c.groupView(gs), nil
}

func (c *Controller) saveGroup(gs *groupState) error {
	gs.rec.Updated = c.cfg.Now().UTC()
	b, err := store.JSONCodec[groupRecord]{}.Marshal(gs.rec)
	if err != nil {
		return err
	}
	id, _ := hex.DecodeString(gs.rec.ID)
	if err := c.cfg.Store.Put(ksGroups, id, b); err != nil {
		return fmt.Errorf("keep task group %s: %w", gs.rec.ID, err)
	}
	return nil
}

// loadGroups reads the groups kept in the store.
func (c *Controller) loadGroups() error {
	codec := store.JSONCodec[groupRecord]{}
	return c.cfg.Store.Iterate(ksGroups, nil, func(_, v []byte) error {
		rec, err := codec.Unmarshal(v)
		if err != nil || len(rec.Children) != rec.Tasks {
			return nil
		}
		c.groups[rec.ID] = &groupState{rec: rec}
		return nil
	})
}

func (c *Controller) goGroup(gs *groupState) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.runGroup(c.ctx, gs)
	}()
}

// runGroup starts the group's tasks, at most Parallel at once, and ends
// the group when every task has succeeded or one has failed for good.
func (c *Controller) runGroup(ctx context.Context, gs *groupState) {
	t := time.NewTicker(groupPoll)
	defer t.Stop()
	for {
		if c.stepGroup(ctx, gs) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// stepGroup looks at the group's tasks once, starts what may start and
// reports whether the group is over.
func (c *Controller) stepGroup(ctx context.Context, gs *groupState) bool {
	gs.mu.Lock()
	rec := gs.rec
	rec.Children = slices.Clone(rec.Children)
	gs.mu.Unlock()
	if rec.finished() {
		return true
	}
	running, done := 0, 0
	var failed string
	for i, id := range rec.Children {
		if id == "" {
			continue
		}
		js, err := c.find(id)
		if err != nil {
			// Named but not submitted (the node stopped in between):
			// submit it now, under the same ID.
			if ok := c.startTask(ctx, gs, i, false); !ok {
				return ctx.Err() != nil
			}
			running++
			continue
		}
		js.mu.Lock()
		state, msg := js.rec.State, js.rec.Message
		js.mu.Unlock()
		switch state {
		case StateSucceeded:
			done++
		case StateFailed, StateStopped:
			if failed == "" {
				failed = fmt.Sprintf("task %d %s: %s", i, state, msg)
			}
		default:
			running++
		}
	}
	switch {
	case rec.StopAsked != "" || failed != "":
		end, why := StateFailed, failed
		if rec.StopAsked != "" {
			end, why = StateStopped, rec.StopAsked
		}
		for _, id := range rec.Children {
			if id != "" {
				_, _ = c.Stop(id, "the task group ended: "+why)
			}
		}
		c.endGroup(gs, end, why)
		return true
	case done == rec.Tasks:
		c.endGroup(gs, StateSucceeded, "")
		return true
	}
	for i, id := range rec.Children {
		if running >= rec.Parallel || ctx.Err() != nil {
			break
		}
		if id == "" {
			if !c.startTask(ctx, gs, i, true) {
				break
			}
			running++
		}
	}
	return false
}

// startTask submits task i; fresh names it first, durably.
func (c *Controller) startTask(ctx context.Context, gs *groupState, i int, fresh bool) bool {
	gs.mu.Lock()
	if fresh {
		gs.rec.Children[i] = hex.EncodeToString(NewJobID())
		if err := c.saveGroup(gs); err != nil {
			gs.rec.Children[i] = ""
			gs.mu.Unlock()
			c.log.Warn("task not named", "group", gs.rec.ID[:8], "task", i, "err", err)
			return false
		}
	}
	req, err := gs.rec.request(i)
	gs.mu.Unlock()
	if err != nil {
		c.log.Warn("task not submitted", "group", gs.rec.ID[:8], "task", i, "err", err)
		return false
	}
	if _, err := c.submit(ctx, req, "", 0); err != nil {
		// Kept as failed by submit when it cannot be kept rentable: the
		// next look ends the group.
		c.log.Warn("task not started", "group", gs.rec.ID[:8], "task", i, "err", err)
	}
	return true
}

func (c *Controller) endGroup(gs *groupState, end State, why string) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	gs.rec.State, gs.rec.Message = end, why
	if err := c.saveGroup(gs); err != nil {
		c.log.Warn("keep task group", "group", gs.rec.ID[:8], "err", err)
	}
	c.log.Info("task group over", "group", gs.rec.ID[:8], "state", end, "why", why)
}

// findGroup gives a group by ID or unique ID prefix (nil: none).
func (c *Controller) findGroup(id string) (*groupState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gs := c.groups[id]; gs != nil {
		return gs, nil
	}
	var found *groupState
	for k, gs := range c.groups {
		if len(id) >= 4 && len(k) >= len(id) && k[:len(id)] == id {
			if found != nil {
				return nil, fmt.Errorf("job prefix %q is ambiguous", id)
			}
			found = gs
		}
	}
	return found, nil
}

// groupView is the group as `gpumesh jobs` shows it.
func (c *Controller) groupView(gs *groupState) View {
	gs.mu.Lock()
	rec := gs.rec
	rec.Children = slices.Clone(rec.Children)
	gs.mu.Unlock()
	var spec pb.JobSpec
	_ = proto.Unmarshal(rec.Spec, &spec)
	v := View{
		JobID: rec.ID, State: rec.State, Message: rec.Message, Argv: spec.Argv, Attempts: []AttemptView{},
		Created: rec.Created, Updated: rec.Updated, TaskCount: rec.Tasks, Parallel: rec.Parallel, Tasks: make([]TaskView, 0, rec.Tasks),
	}
	for i, id := range rec.Children {
		tv := TaskView{Index: i, JobID: id, State: StatePending}
		if js, err := c.find(id); id != "" && err == nil {
			jv := c.view(js)
			tv.State, tv.Supplier, tv.PaidMicros, tv.Outputs = jv.State, jv.Supplier, jv.PaidMicros, jv.Outputs
		}
		switch tv.State {
		case StatePending:
			v.Pending++
		case StateSucceeded:
			v.Done++
		case StateFailed, StateStopped:
			v.Failed++
		default:
			v.Running++
		}
		v.PaidMicros += tv.PaidMicros
		v.Tasks = append(v.Tasks, tv)
	}
	if rec.State == StateSucceeded {
		v.Outputs = filepath.Join(c.cfg.DataDir, "outputs", rec.ID)
	}
	return v
}

// TaskJob is the job ID of task index of group (an ID or unique
// prefix).
func (c *Controller) TaskJob(group string, index int) (string, error) {
	gs, err := c.findGroup(group)
	if err != nil {
		return "", err
	}
	if gs == nil {
		return "", fmt.Errorf("%w: no task group %s", ErrNoJob, group)
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if index < 0 || index >= len(gs.rec.Children) {
		return "", fmt.Errorf("task %d: the group has tasks 0 to %d", index, len(gs.rec.Children)-1)
	}
	if gs.rec.Children[index] == "" {
		return "", fmt.Errorf("task %d has not started", index)
	}
	return gs.rec.Children[index], nil
}

// stopGroup stops a group: its running tasks are stopped and the pending
// ones never start.
func (c *Controller) stopGroup(gs *groupState, why string) (View, error) {
	gs.mu.Lock()
	if !gs.rec.finished() && gs.rec.StopAsked == "" {
		if why == "" {
			why = "stopped by the renter"
		}
		gs.rec.StopAsked = why
		if err := c.saveGroup(gs); err != nil {
			gs.mu.Unlock()
			return View{}, err
		}
	}
	gs.mu.Unlock()
	return c.groupView(gs), nil
}
