package chaos

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/node/light"
	"github.com/gpumesh/gpumesh/testnet"
)

// countJob counts to 24, a step every 0.25 s (6 s of work), resuming from
// the step kept in $CHECKPOINT_DIR, and says which attempt started where.
const countJob = `s=0
[ -f "$CHECKPOINT_DIR/step" ] && s=$(cat "$CHECKPOINT_DIR/step")
echo "attempt $JOB_ATTEMPT starts at step $s"
while [ "$s" -lt 24 ]; do
  s=$((s+1))
  echo "$s" > "$CHECKPOINT_DIR/step.tmp" && mv "$CHECKPOINT_DIR/step.tmp" "$CHECKPOINT_DIR/step"
  sleep 0.25
done
echo finished`

// jobScript names the job's script, by which orphans() finds its
// processes.
const jobScript = "chaos-count.sh"

// jobFilters are the jobs' filters in turn: the cheapest GPU with 24 GB
// (an rtx4090, mostly), and the two models whose cheapest suppliers have
// skewed clocks by default, each where at least two nodes other than the
// renters sell it (testnet.ProfileFor): a job fails over only to a
// supplier it has not lost.
func (r *run) jobFilters() []string {
	out := []string{"vram>=24 model!=h100-sxm"}
	for _, m := range []string{"a100-80gb", "l40s"} {
		sellers := 0
		for i := range r.o.Nodes {
			if !slices.Contains(r.o.Renters, i) && strings.Contains(testnet.ProfileFor(i).GPUs, m+":") {
				sellers++
			}
		}
		if sellers >= 2 {
			out = append(out, "model="+m)
		}
	}
	return out
}

func jobRequest(filter string) api.JobRequest {
	return api.JobRequest{
		Filter: filter, Count: 1, MaxPrice: "3.00", AllowUnproven: true, AllowSimulated: true,
		ReceiptInterval: "500ms", CheckpointEvery: "1s",
		Files: []api.JobFile{{Path: jobScript, Mode: 0o644, Data: []byte(countJob)}},
		Argv:  []string{"sh", jobScript},
	}
}

// jobLoop submits a job on renter node ri and follows it to its end, again
// and again until work ends. Following goes on under ctx: a job taken is
// seen through.
func (r *run) jobLoop(work, ctx context.Context, ri int) {
	nd := r.st.Nodes[ri]
	filters := r.jobFilters()
	for k := 0; work.Err() == nil; k++ {
		phase := r.currentPhase()
		c, err := api.ClientForDataDir(nd.API, nd.DataDir)
		if err != nil {
			r.log.Warn("chaos: renter API token", "node", ri, "err", err)
			_ = sleep(work, time.Second)
			continue
		}
		v, err := c.SubmitJob(work, jobRequest(filters[(k+ri)%len(filters)]))
		if err != nil {
			c.Close()
			if work.Err() != nil {
				return
			}
			r.mu.Lock()
			switch {
			case r.down[ri] || isRefused(err):
				r.rec.SubmitsWhileDown++
			case errors.Is(err, api.ErrConflict):
				// No lease to be had (every matching GPU taken): the job
				// never ran, and the node keeps it as failed with no
				// attempt.
				r.rec.Unplaced = append(r.rec.Unplaced, Unplaced{Phase: phase, Why: err.Error()})
			default:
				r.rec.SubmitErrors = append(r.rec.SubmitErrors, phase+": "+err.Error())
			}
			r.mu.Unlock()
			_ = sleep(work, time.Second)
			continue
		}
		r.mu.Lock()
		r.rec.jobPhase(v.JobID, phase)
		r.mu.Unlock()
		deadline := time.Now().Add(r.o.JobTimeout)
		for !job.Ended(v.State) && time.Now().Before(deadline) {
			if sleep(ctx, 500*time.Millisecond) != nil {
				break
			}
			if got, err := c.Job(ctx, v.JobID); err == nil {
				v = got
			}
		}
		c.Close()
	}
}

// isRefused reports whether err is a refused connection: the node's API is
// not up (the node was killed, or is starting again).
func isRefused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || strings.Contains(err.Error(), "connection refused")
}

// rentModels are what the cold light client rents: the models the jobs'
// filters leave alone, so that the GPUs its leases hold unclaimed (for a
// claim window each) do not starve the jobs.
var rentModels = []string{"h100-sxm"}

// rentLoop rents one GPU of a random model from a fresh light client every
// RentEvery until work ends.
func (r *run) rentLoop(work context.Context, rng *rand.Rand) {
	quiet := slog.New(slog.DiscardHandler)
	t := time.NewTicker(r.o.RentEvery)
	defer t.Stop()
	for {
		select {
		case <-work.Done():
			return
		case <-t.C:
		}
		m := rentModels[rng.IntN(len(rentModels))]
		s := RentSample{Phase: r.currentPhase(), Model: m}
		f, _ := market.ParseFilter("model=" + m)
		start := time.Now()
		rc, err := light.New(work, light.WithNetwork(testnet.Network), light.WithBootstrap(r.boots...), light.WithLogger(quiet), light.WithRenting())
		if err == nil {
			var l *market.Lease
			l, err = rc.Rent(work, market.RentRequest{AllowSimulated: true, Filter: f, Count: 1, Duration: market.MinDuration, MaxPrice: 10_000_000, AllowUnproven: true})
			if err == nil {
				s.Supplier = l.Supplier.String()
			}
			rc.Close()
		}
		s.Took = time.Since(start)
		if err != nil {
			if work.Err() != nil {
				return
			}
			s.Err = err.Error()
		}
		r.mu.Lock()
		r.rec.Rents = append(r.rec.Rents, s)
		r.mu.Unlock()
	}
}

// finishJobs waits, up to JobTimeout, for every job of every renter node
// to end, and keeps their last views: the jobs the loops followed and any
// a renter's node took while its answer was lost to a kill.
func (r *run) finishJobs(ctx context.Context) {
	deadline := time.Now().Add(r.o.JobTimeout)
	for {
		var all []JobSample
		pending := 0
		for _, ri := range r.o.Renters {
			nd := r.st.Nodes[ri]
			c, err := api.ClientForDataDir(nd.API, nd.DataDir)
			if err != nil {
				continue
			}
			views, err := c.Jobs(ctx)
			c.Close()
			if err != nil {
				pending++ // the node is not answering yet
				continue
			}
			for _, v := range views {
				if !job.Ended(v.State) {
					pending++
				}
				all = append(all, JobSample{Renter: ri, View: v})
			}
		}
		if pending == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			r.mu.Lock()
			r.rec.setJobs(all)
			r.mu.Unlock()
			return
		}
		_ = sleep(ctx, time.Second)
	}
}

// floodHeld is the most asks of the flooder any live node's order book
// holds.
func (r *run) floodHeld(ctx context.Context, flooder peer.ID) int {
	most := 0
	for _, nd := range r.st.Nodes {
		c, err := api.ClientForDataDir(nd.API, nd.DataDir)
		if err != nil {
			continue
		}
		o, err := c.Orders(ctx, "")
		c.Close()
		if err != nil {
			continue
		}
		n := 0
		for _, a := range o.Asks {
			if a.Peer == flooder.String() {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// orphans lists the job processes still running under the run's
// directory: after every node has stopped there must be none.
func (r *run) orphans() []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmd), jobScript) {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err != nil || !strings.HasPrefix(cwd, r.o.Dir) {
			continue
		}
		out = append(out, e.Name()+" in "+cwd)
	}
	return out
}
