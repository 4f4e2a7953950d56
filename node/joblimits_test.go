package node

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/internal/testenv"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/node/job/pb"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  bool
	}{
		{"8GiB", 8 << 30, false}, {"512MiB", 512 << 20, false}, {"50GB", 50e9, false},
		{"1000", 1000, false}, {"2 TiB", 2 << 40, false}, {"0", 0, true}, {"-1GiB", 0, true},
		{"lots", 0, true}, {"1.5GiB", 0, true}, {"9999999999TiB", 0, true},
	} {
		got, err := parseSize(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestJobLimitsConfig(t *testing.T) {
	meminfo := []byte("MemTotal:       16777216 kB\nMemFree: 1 kB\n")
	load := func(flags map[string][]string) (Config, error) {
		return LoadConfig(Input{Home: "/h", Flags: flags, ReadFile: func(p string) ([]byte, error) {
			if p == "/proc/meminfo" {
				return meminfo, nil
			}
			return nil, os.ErrNotExist
		}})
	}
	c, err := load(nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.JobLimits(16<<30, 4)
	if err != nil {
		t.Fatal(err)
	}
	want := job.Limits{
		Default: job.LimitSet{MemoryBytes: 3 << 30, Procs: 4096, DiskBytes: 20 << 30, OpenFiles: 4096},
		Max:     job.LimitSet{MemoryBytes: 12 << 30, Procs: 16384, DiskBytes: 50 << 30, OpenFiles: 65536},
	}
	if l != want {
		t.Errorf("default limits = %+v, want %+v", l, want)
	}
	for _, tc := range []struct {
		name  string
		flags map[string][]string
		err   string
	}{
		{"memory above the auto max", map[string][]string{"job_memory": {"13GiB"}}, "default memory_bytes"},
		{"procs above max", map[string][]string{"job_procs": {"100"}, "job_procs_max": {"50"}}, "default procs 100 is above the maximum 50"},
		{"disk above max", map[string][]string{"job_disk": {"60GiB"}}, "default disk_bytes"},
		{"bad size", map[string][]string{"job_disk_max": {"huge"}}, `job_disk_max from flag:--job-disk-max: "huge" is not a size`},
		{"zero procs", map[string][]string{"job_procs": {"0"}}, "job_procs from flag:--job-procs"},
		{"bad memory", map[string][]string{"job_memory_max": {"-5"}}, "or auto"},
	} {
		if _, err := load(tc.flags); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: err = %v, want one containing %q", tc.name, err, tc.err)
		}
	}
	c, err = load(map[string][]string{"job_memory": {"1GiB"}, "job_memory_max": {"2GiB"}, "job_open_files": {"10"}})
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := c.JobLimits(16<<30, 8); l.Default.MemoryBytes != 1<<30 || l.Max.MemoryBytes != 2<<30 || l.Default.OpenFiles != 10 {
		t.Errorf("explicit limits = %+v", l)
	}
	settings := map[string]any{}
	for _, s := range c.Settings() {
		settings[s.Key] = s.Value
	}
	if settings["job_memory"] != "1GiB" || settings["job_disk_max"] != "50GiB" || settings["job_open_files"] != int64(10) {
		t.Errorf("settings = %v", settings)
	}
}

// startLimitsNet is startJobNet with sellers whose jobs run under small
// limits.
func startLimitsNet(t *testing.T) *jobNet {
	t.Helper()
	return startJobNet(t, time.Minute, func(c *Config) {
		c.JobOpenFiles, c.JobProcs, c.JobDisk = 100, 64, 8<<20
		c.JobMemoryMax, c.JobDiskMax = 1<<30, 64<<20
	})
}

// runLimited submits argv with limits and waits for the job to end.
func runLimited(t *testing.T, n *Node, argv []string, limits *pb.Limits) (job.View, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	maxP := money.Unit // 1.00 per GPU-hour
	v, err := n.Jobs().Submit(ctx, job.Request{AllowSimulated: true, AllowUnproven: true,
		Spec:   &pb.JobSpec{Argv: argv, Limits: limits},
		Filter: mustFilter(t, "model=rtx4090"), RentTerms: market.RentTerms{Count: 1, Duration: time.Hour, MaxPrice: maxP}, MinReputation: 0.5,
		ReceiptInterval: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	eventually(t, 2*time.Minute, "the job to end", func() bool {
		v = jobView(t, n, v.JobID)
		return v.State == job.StateSucceeded || v.State == job.StateFailed || v.State == job.StateStopped
	})
	return v, jobLogs(t, n, v.JobID)
}

// TestJobLimits: a spec without limits runs under the supplier's
// defaults (open files, processes: a burst of 200 processes is held at
// 64), a job that fills more disk than its limit is stopped with that
// reason, the supplier's profile (so search) shows its limits, and a
// spec asking more than the supplier's maximum is refused.
func TestJobLimits(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "the process limit is RLIMIT_NPROC of the job user, which needs a node running as root")
	}
	jn := startLimitsNet(t)

	t.Run("defaults", func(t *testing.T) {
		v, logs := runLimited(t, jn.renter, []string{"sh", "-c", `grep -E "^Max (open files|processes)" /proc/self/limits
sh -c 'for i in $(seq 200); do sleep 60 & done' 2>/dev/null
set -- /proc/[0-9]*; echo "RUNNING $#"`}, nil)
		t.Logf("job %s: %s\n%s", v.State, v.Message, logs)
		if got := limitOf(logs, "Max open files"); got != "100" {
			t.Errorf("open files: %q, want the default 100", got)
		}
		if got := limitOf(logs, "Max processes"); got != "64" {
			t.Errorf("processes: %q, want the default 64", got)
		}
		i := strings.Index(logs, "RUNNING ")
		if i < 0 {
			t.Fatalf("no process count in the log")
		}
		n, _ := strconv.Atoi(strings.Fields(logs[i+len("RUNNING "):])[0])
		if n > 64+1 { // its init runs as root, outside the count
			t.Errorf("%d processes ran in a job limited to 64 by default", n)
		}
	})

	t.Run("disk", func(t *testing.T) {
		v, logs := runLimited(t, jn.renter, []string{"sh", "-c", `for i in $(seq 32); do dd if=/dev/zero of=f$i bs=1M count=1 2>/dev/null || echo "write $i failed"; done
echo written; sleep 300`}, nil)
		t.Logf("job %s: %s\n%s", v.State, v.Message, logs)
		if v.State != job.StateFailed || !strings.Contains(v.Message, "disk limit exceeded") {
			t.Errorf("job writing 32 MiB under a disk limit of 8 MiB: %s %q, want failed with disk limit exceeded", v.State, v.Message)
		}
	})

	t.Run("profile", func(t *testing.T) {
		var offers []market.Offer
		eventually(t, 30*time.Second, "the supplier's own profile", func() bool {
			ps, err := jn.cheap.KnownProfiles()
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range ps {
				if p.ID == jn.cheap.ID() {
					offers = market.OffersFromProfile(p)
				}
			}
			return len(offers) > 0
		})
		want := market.JobLimits{
			Default: market.JobLimitSet{MemoryBytes: 1 << 30, Procs: 64, DiskBytes: 8 << 20, OpenFiles: 100},
			Max:     market.JobLimitSet{MemoryBytes: 1 << 30, Procs: 16384, DiskBytes: 64 << 20, OpenFiles: 65536},
		}
		if offers[0].JobLimits == nil || *offers[0].JobLimits != want {
			t.Fatalf("offer job limits = %+v, want %+v", offers[0].JobLimits, want)
		}
		b, err := json.Marshal(offers[0])
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"job_limits":{"default":{"memory_bytes":1073741824,"procs":64,`) {
			t.Errorf("search JSON lacks the job limits: %s", b)
		}
	})

	t.Run("over the maximum", func(t *testing.T) {
		spec, err := job.EncodeSpec(&pb.JobSpec{JobId: job.NewJobID(), Argv: []string{"true"}, Gpus: 1, Limits: &pb.Limits{MemoryBytes: 2 << 30}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		maxP := money.Unit // 1.00 per GPU-hour
		l, err := jn.renter.rent(ctx, market.RentRequest{AllowSimulated: true, AllowUnproven: true, Filter: mustFilter(t, "model=rtx4090"), Count: 1, Duration: time.Hour, MaxPrice: maxP, Terms: market.Terms{JobSpecHash: spec.Hash[:]}})
		if err != nil {
			t.Fatal(err)
		}
		st, err := jn.renter.Network().Host.NewStream(ctx, l.Supplier, job.SessionProtocol)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		w, err := job.Handshake(st, &pb.Hello{Lease: l.Raw, Attempt: 1, SpecSize: uint32(len(spec.Raw))}, spec.Raw, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(w.Refused, "memory_bytes 2147483648 is above this supplier's maximum (1073741824)") {
			t.Errorf("a spec asking 2 GiB of a supplier allowing 1 GiB: refusal %q", w.Refused)
		}
	})
}

// limitOf is the soft limit on the line of /proc/self/limits named name.
func limitOf(limits, name string) string {
	for _, line := range strings.Split(limits, "\n") {
		if v, ok := strings.CutPrefix(line, name); ok {
			if f := strings.Fields(v); len(f) > 0 {
				return f[0]
			}
		}
	}
	return ""
}
