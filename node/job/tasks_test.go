package job

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/job/pb"
)

// waitGroup waits until the group is in state and returns it.
func (m *mesh) waitGroup(id string, state State) View {
	m.t.Helper()
	var v View
	eventually(m.t, 2*time.Minute, "group "+state.String(), func() bool {
		v = m.view(id)
		if v.State != state && (v.State == StateSucceeded || v.State == StateFailed || v.State == StateStopped) {
			m.t.Fatalf("group %s (%s), want %s", v.State, v.Message, state)
		}
		return v.State == state
	})
	return v
}

// TestTaskGroupRunsEveryTaskOnce: 6 tasks, at most 2 at once, over 2
// suppliers: each task runs as a job of its own with its TASK_INDEX and
// TASK_COUNT, never more than Parallel at once, and its outputs land in
// the group's tasks/<index> folder.
func TestTaskGroupRunsEveryTaskOnce(t *testing.T) {
	m := newMesh(t, 2, nil)
	req := shJob(`echo "$TASK_INDEX $TASK_COUNT $JOB_ATTEMPT" > "$OUTPUT_DIR/out.txt"; sleep 0.3`, nil)
	req.Tasks, req.Parallel = 6, 2
	g := m.submit(req)
	if g.TaskCount != 6 || g.Parallel != 2 || len(g.Tasks) != 6 {
		t.Fatalf("group view: %+v", g)
	}
	most := 0
	eventually(t, 2*time.Minute, "group over", func() bool {
		v := m.view(g.JobID)
		most = max(most, v.Running)
		return v.State == StateSucceeded || v.State == StateFailed
	})
	v := m.waitGroup(g.JobID, StateSucceeded)
	if most > 2 {
		t.Fatalf("%d tasks ran at once, parallel 2", most)
	}
	if v.Done != 6 || v.Running != 0 || v.Failed != 0 || v.Pending != 0 || v.PaidMicros <= 0 {
		t.Fatalf("counts: done %d running %d failed %d pending %d, paid %d", v.Done, v.Running, v.Failed, v.Pending, v.PaidMicros)
	}
	for i, tv := range v.Tasks {
		if tv.Index != i || tv.State != StateSucceeded || tv.JobID == "" || tv.Supplier == "" {
			t.Fatalf("task %d: %+v", i, tv)
		}
		want := filepath.Join(v.Outputs, fmt.Sprint(i))
		if tv.Outputs != want {
			t.Fatalf("task %d outputs %q, want %q", i, tv.Outputs, want)
		}
		got, err := os.ReadFile(filepath.Join(want, "out.txt"))
		if err != nil || string(got) != fmt.Sprintf("%d 6 1\n", i) {
			t.Fatalf("task %d out.txt %q, %v", i, got, err)
		}
	}
	for _, j := range m.ctrl.Jobs() {
		if j.TaskOf != "" {
			t.Fatalf("a task is listed on its own: %s", j.JobID)
		}
	}
	id, err := m.ctrl.TaskJob(g.JobID[:8], 3)
	if err != nil || id != v.Tasks[3].JobID {
		t.Fatalf("TaskJob: %q, %v", id, err)
	}
	if got := m.logs(id); got != "" {
		t.Fatalf("task 3's log %q", got)
	}
}

// TestTaskGroupFailsWithATask: a task that fails for good fails the
// group; the tasks still running are stopped and the pending ones never
// start.
func TestTaskGroupFailsWithATask(t *testing.T) {
	m := newMesh(t, 2, nil)
	req := shJob(`if [ "$TASK_INDEX" = 1 ]; then exit 7; fi; sleep 30`, func(s *pb.JobSpec) {})
	req.Tasks, req.Parallel = 5, 2
	g := m.submit(req)
	v := m.waitGroup(g.JobID, StateFailed)
	if v.Message == "" {
		t.Fatal("no reason")
	}
	eventually(t, time.Minute, "the other task stopped", func() bool {
		v = m.view(g.JobID)
		return v.Running == 0
	})
	if v.Pending != 3 || v.Tasks[0].State != StateStopped || v.Tasks[1].State != StateFailed {
		t.Fatalf("tasks after the failure: %+v", v.Tasks)
	}
}

// TestTaskGroupResumesAfterRestart: the renter's node stops while a group
// runs; the restarted controller, from the same store, resumes the group
// and starts the remaining tasks, each once.
func TestTaskGroupResumesAfterRestart(t *testing.T) {
	var cfg ControllerConfig
	m := newMesh(t, 2, func(c *ControllerConfig) { cfg = *c })
	req := shJob(`echo "$TASK_INDEX" > "$OUTPUT_DIR/out.txt"; sleep 0.3`, nil)
	req.Tasks, req.Parallel = 4, 1
	g := m.submit(req)
	eventually(t, time.Minute, "a task done", func() bool { return m.view(g.JobID).Done >= 1 })
	if err := m.ctrl.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := NewController(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.ctrl = c
	c.Start()
	v := m.waitGroup(g.JobID, StateSucceeded)
	seen := map[string]bool{}
	for i, tv := range v.Tasks {
		if seen[tv.JobID] {
			t.Fatalf("task %d shares job %s", i, tv.JobID)
		}
		seen[tv.JobID] = true
		got, err := os.ReadFile(filepath.Join(v.Outputs, fmt.Sprint(i), "out.txt"))
		if err != nil || string(got) != fmt.Sprintf("%d\n", i) {
			t.Fatalf("task %d out.txt %q, %v", i, got, err)
		}
	}
	if n := len(m.rentCalls()); n != 4 {
		t.Fatalf("%d leases for 4 tasks", n)
	}
}
