//go:build linux

package runtime_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/runtime"
)

// BenchmarkJobStart is the supplier's start of a job's process (Start
// until the shim has exec'd the job: the job view's StartMs) beside a
// fork/exec of the same command, timed in turn in the same loop. It
// reports the ratio of their medians, p50-x-fork-exec, as make bench's
// "countersigned lease → job process running" row does. "net" gives
// jobs a network (as a root node with job_network on does: a namespace
// of their own, a veth pair, the nftables table), "bare" leaves jobs on
// the node's network. Run it in a namespace of its own to leave the
// machine's network alone: unshare -n go test -run '^$' -bench JobStart.
func BenchmarkJobStart(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root: a job's namespaces and network")
	}
	for _, tc := range []struct {
		name string
		net  *runtime.NetConfig
	}{
		{"bare", nil},
		{"net", &runtime.NetConfig{}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rt, err := runtime.New("process", runtime.Options{Log: slog.New(slog.DiscardHandler), Net: tc.net})
			if err != nil {
				b.Skip(err)
			}
			b.Cleanup(func() { _ = rt.Close() })
			work := b.TempDir()
			// Leases come seconds apart: a job has ended, and what the
			// runtime prepares meanwhile is ready, before the next.
			const gap = 100 * time.Millisecond
			var starts, execs []time.Duration
			for b.Loop() {
				t0 := time.Now()
				if err := exec.Command("true").Run(); err != nil {
					b.Fatal(err)
				}
				execs = append(execs, time.Since(t0))
				t0 = time.Now()
				p, err := rt.Start(context.Background(), runtime.Spec{JobID: randomJobID(), Argv: []string{"true"}, WorkDir: work, CheckpointDir: work})
				if err != nil {
					b.Fatal(err)
				}
				starts = append(starts, time.Since(t0))
				b.StopTimer()
				<-p.Done()
				if res := p.Result(); res.ExitCode != 0 {
					b.Fatalf("result %+v", res)
				}
				time.Sleep(gap)
				b.StartTimer()
			}
			b.ReportMetric(float64(median(starts))/float64(time.Millisecond), "p50-start-ms")
			b.ReportMetric(float64(median(execs))/float64(time.Millisecond), "p50-exec-ms")
			b.ReportMetric(float64(median(starts))/float64(median(execs)), "p50-x-fork-exec")
		})
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
