package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/p2p"
)

// TestJobStartBodyIsAccounted: an admitted start's spec and checkpoint
// are reserved in the supplier's resource manager before the supplier
// asks for them and released when the stream ends; a second start of the
// same lease meanwhile is told to come back (busy), and the lease can
// still be started afterwards.
func TestJobStartBodyIsAccounted(t *testing.T) {
	t.Parallel() // its own nodes; it waits on the network, not the CPU
	jn := startJobNet(t, time.Minute)
	spec, err := job.EncodeSpec(&pb.JobSpec{JobId: job.NewJobID(), Argv: []string{"true"}, Gpus: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	maxP := money.Unit // 1.00 per GPU-hour
	l, err := jn.renter.rent(ctx, market.RentRequest{AllowSimulated: true, AllowUnproven: true, Filter: mustFilter(t, "model=rtx4090"), Count: 1, Duration: time.Hour, MaxPrice: maxP, Terms: market.Terms{JobSpecHash: spec.Hash[:]}})
	if err != nil {
		t.Fatal(err)
	}
	sup := jn.boot
	if jn.cheap.ID() == l.Supplier {
		sup = jn.cheap
	}
	sessionMemory := func() int64 {
		var mem int64
		_ = sup.Network().Host.Network().ResourceManager().ViewProtocol(job.SessionProtocol, func(s network.ProtocolScope) error {
			mem = s.Stat().Memory
			return nil
		})
		return mem
	}
	open := func() network.Stream {
		st, err := jn.renter.Network().Host.NewStream(ctx, l.Supplier, job.SessionProtocol)
		if err != nil {
			t.Fatal(err)
		}
		_ = st.SetDeadline(time.Now().Add(time.Minute))
		return st
	}
	const cpSize = job.MaxCheckpointSize
	big := &pb.Hello{Lease: l.Raw, Attempt: 1, SpecSize: uint32(len(spec.Raw)), CheckpointSize: cpSize, CheckpointHash: make([]byte, 32)}
	first := open()
	if err := p2p.WriteMsg(first, big); err != nil {
		t.Fatal(err)
	}
	var w pb.Welcome
	if err := p2p.ReadMsg(first, job.MaxWelcomeSize, &w); err != nil || !w.SendBody {
		t.Fatalf("a start announcing %d bytes was not asked for them: %+v, %v", cpSize, &w, err)
	}
	if mem := sessionMemory(); mem < cpSize {
		t.Fatalf("the supplier asked for %d bytes with %d reserved on the session protocol", cpSize, mem)
	}
	second := open()
	w2, err := job.Handshake(second, big, spec.Raw, make([]byte, cpSize))
	second.Close()
	if err != nil || !w2.Busy || !strings.Contains(w2.Refused, "under way") {
		t.Fatalf("a second start of the lease while the first sends its body: %+v, %v (want busy)", w2, err)
	}
	first.Reset()
	eventually(t, time.Minute, "the body's reservation released", func() bool { return sessionMemory() < cpSize })
	third := open()
	defer third.Close()
	w3, err := job.Handshake(third, &pb.Hello{Lease: l.Raw, Attempt: 1, SpecSize: uint32(len(spec.Raw))}, spec.Raw, nil)
	if err != nil || w3.Refused != "" || w3.Attempt != 1 {
		t.Fatalf("the start after the abandoned one: %+v, %v", w3, err)
	}
}
