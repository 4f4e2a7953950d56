package job

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/node/tunnel"
)

// TestExecutorTunnelAdmission: what a supplier checks before a tunnel
// reaches a job (docs/PROTOCOL.md §39.3), on an Executor whose runtime
// gives jobs no network of their own: a job that serves ports is refused
// at its start (S18a); for a running batch job, a tunnel from another
// peer, to another attempt or lease is no-attempt, to an undeclared port
// port; once the unpaid job is halted, unpaid; once it has ended,
// not-running.
func TestExecutorTunnelAdmission(t *testing.T) {
	m := newMeshWith(t, 1, nil, func(c *ExecutorConfig) { c.HaltGrace = 3 * time.Second })
	s := m.sups[0]

	// A service on a supplier that cannot isolate it: refused at start.
	svc, err := EncodeSpec(&pb.JobSpec{JobId: NewJobID(), Argv: []string{"sleep", "60"}, Gpus: 1, Ports: []*pb.Port{{Number: 8000, Protocol: "tcp"}}})
	if err != nil {
		t.Fatal(err)
	}
	sl, err := m.lease(s, 1, market.Terms{JobSpecHash: svc.Hash[:], ReceiptInterval: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, w := m.rawSession(m.renter, s, startHello(sl, svc, 1), svc.Raw); !strings.Contains(w.Refused, "cannot give it a network of its own") {
		t.Fatalf("a service's start on a supplier without job networks: %q", w.Refused)
	}

	// A batch job that runs, never paid for.
	spec, l := m.sleeper(s, 2)
	st, w := m.rawSession(m.renter, s, startHello(l, spec, 1), spec.Raw)
	if w.Refused != "" {
		t.Fatalf("start refused: %s", w.Refused)
	}
	ch := frames(st)
	req := tunnel.Request{LeaseID: [32]byte(l.ID), Attempt: 1, Port: 8000}
	admit := func(from string, r tunnel.Request) string {
		p := m.renter.ID()
		if from == "other" {
			p = s.host.ID()
		}
		_, no := s.exec.Tunnel(p, r)
		if no == nil {
			return ""
		}
		return no.Code
	}
	otherAttempt, otherLease := req, req
	otherAttempt.Attempt = 2
	otherLease.LeaseID[0] ^= 1
	for _, c := range []struct {
		name, from string
		req        tunnel.Request
		want       string
	}{
		{"another peer", "other", req, tunnel.RefusedNoAttempt},
		{"another attempt", "renter", otherAttempt, tunnel.RefusedNoAttempt},
		{"another lease", "renter", otherLease, tunnel.RefusedNoAttempt},
		{"an undeclared port", "renter", req, tunnel.RefusedPort},
	} {
		if got := admit(c.from, c.req); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	halted, ended := false, false
	for !ended {
		f := next(t, ch)
		if f == nil {
			break
		}
		switch status := f.GetStatus(); {
		case status == nil:
		case State(status.State) == StateHalted && !halted:
			halted = true
			if got := admit("renter", req); got != tunnel.RefusedUnpaid {
				t.Errorf("while halted for payment: %q, want %q", got, tunnel.RefusedUnpaid)
			}
		case Ended(State(status.State)):
			ended = true
		}
	}
	if !halted || !ended {
		t.Fatalf("halted %v, ended %v: want the unpaid job halted, then stopped", halted, ended)
	}
	eventually(t, time.Minute, "the run ended", func() bool { r := s.runOf(l.ID.String()); return r != nil && Ended(r.State) })
	if got := admit("renter", req); got != tunnel.RefusedNotRunning {
		t.Errorf("after the end: %q, want %q", got, tunnel.RefusedNotRunning)
	}
}

// TestPublishTakenAddressFailsFirst: a job whose --publish address is
// taken fails before anything is rented, is kept as failed with the
// reason, and holds no forward.
func TestPublishTakenAddressFailsFirst(t *testing.T) {
	m := newMesh(t, 1, nil)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	req := shJob("sleep 60", func(s *pb.JobSpec) { s.Ports = []*pb.Port{{Number: 8000, Protocol: "tcp"}} })
	req.Publish = []Publish{{Listen: taken.Addr().String(), Port: 8000}}
	v, err := m.ctrl.Submit(context.Background(), req)
	if !errors.Is(err, ErrForward) {
		t.Fatalf("submit with a taken address: %v, want ErrForward", err)
	}
	if v.State != StateFailed || len(v.Attempts) != 0 || len(v.Publish) != 0 {
		t.Fatalf("the job after its failed submission: %+v", v)
	}
	if fs, _ := m.ctrl.Forwards(""); len(fs) != 0 {
		t.Fatalf("forwards left: %+v", fs)
	}
	if ls := m.sups[0].exec.Runs(); len(ls) != 0 {
		t.Fatalf("the supplier runs %d attempts", len(ls))
	}
}
