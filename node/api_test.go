package node

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
)

// TestAPINeedsToken: every route of the API but /healthz answers 401
// without the node's token (or with another), the profiler and the read
// endpoints included, and serves with it.
func TestAPINeedsToken(t *testing.T) {
	c := sellerConfig(t, "unset", "sim:h100-sxm:2", "eu-west", "fixed", []string{"h100-sxm=2.00"}, nil)
	c.DataDir = t.TempDir()
	n := startNode(t, c)
	token, err := api.ReadToken(n.cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path, token string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, "http://"+n.APIAddr()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		c := &http.Client{Timeout: 20 * time.Second}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b)
	}
	if code, _ := get(api.PathHealth, ""); code != http.StatusOK {
		t.Fatalf("/healthz without a token: %d, want 200", code)
	}
	for _, path := range []string{
		api.PathPeers, api.PathGPUs, api.PathOffers, api.PathOrders, api.PathLeases,
		api.PathPrices, api.PathCapacity, api.PathReputation, api.PathJobs, api.PathReceipts,
		api.PathMetrics, api.PathPprof, "/debug/pprof/heap", "/debug/pprof/goroutine", "/no/such/route",
	} {
		for _, bad := range []string{"", "not-the-token", token + "x"} {
			code, body := get(path, bad)
			if code != http.StatusUnauthorized {
				t.Errorf("GET %s with token %q: %d, want 401", path, bad, code)
			}
			if strings.Contains(body, n.ID().String()) || strings.Contains(body, "h100") {
				t.Errorf("GET %s without the token leaks: %.200s", path, body)
			}
		}
		if path == "/no/such/route" {
			continue
		}
		if code, body := get(path, token); code != http.StatusOK {
			t.Errorf("GET %s with the token: %d %s", path, code, body)
		}
	}
}

// TestAPIClient: api.Client, with the token of the node's data dir, reads
// a real node's API: its health, GPUs, capacity, and its empty lists of
// leases, jobs and receipts; an unknown job is ErrNotFound, and another
// token ErrUnauthorized.
func TestAPIClient(t *testing.T) {
	c := sellerConfig(t, "unset", "sim:h100-sxm:2", "eu-west", "fixed", []string{"h100-sxm=2.00"}, nil)
	c.DataDir = t.TempDir()
	n := startNode(t, c)
	cl, err := api.ClientForDataDir(n.APIAddr(), c.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	h, err := cl.Health(ctx)
	if err != nil || h.Status != "ok" || h.PeerID != n.ID().String() || h.GPUs != 2 || h.Region != "eu-west" {
		t.Fatalf("Health: %+v, %v", h, err)
	}
	gs, err := cl.GPUs(ctx)
	if err != nil || len(gs) != 2 || gs[0].Model != "h100-sxm" {
		t.Fatalf("GPUs: %+v, %v", gs, err)
	}
	caps, err := cl.Capacity(ctx)
	if err != nil || len(caps) != 1 || caps[0].Model != "h100-sxm" || caps[0].Total != 2 {
		t.Fatalf("Capacity: %+v, %v", caps, err)
	}
	if ls, err := cl.Leases(ctx); err != nil || ls == nil || len(ls) != 0 {
		t.Fatalf("Leases: %#v, %v; want an empty list", ls, err)
	}
	if js, err := cl.Jobs(ctx); err != nil || js == nil || len(js) != 0 {
		t.Fatalf("Jobs: %#v, %v; want an empty list", js, err)
	}
	if reps, err := cl.Receipts(ctx, ""); err != nil || reps == nil || len(reps) != 0 {
		t.Fatalf("Receipts: %#v, %v; want an empty list", reps, err)
	}
	if _, err := cl.Job(ctx, "nope"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("Job(nope): %v, want ErrNotFound", err)
	}
	other := api.NewClient(n.APIAddr(), strings.Repeat("ab", 32))
	defer other.Close()
	if _, err := other.Jobs(ctx); !errors.Is(err, api.ErrUnauthorized) {
		t.Fatalf("Jobs with another token: %v, want ErrUnauthorized", err)
	}
}

// TestJobCannotReadNodeAPI: a job on a supplier connects to that node's
// API over loopback (it shares the network) and asks for its leases and
// its profiler: it is refused, and learns nothing of the lease it runs on.
func TestJobCannotReadNodeAPI(t *testing.T) {
	jn := startJobNet(t, time.Minute)
	script := `for a in "$@"; do
  for p in /api/v1/leases /debug/pprof/goroutine /metrics; do
    host=${a%:*}; port=${a##*:}
    if exec 3<>"/dev/tcp/$host/$port"; then
      printf 'GET %s HTTP/1.0\r\nHost: x\r\n\r\n' "$p" >&3
      echo "== $a$p"; cat <&3; exec 3<&-
    else echo "== $a$p unreachable"; fi
  done
done
echo probe-done`
	v := submit(t, jn.renter, []string{"bash", "-c", script, "probe", jn.cheap.APIAddr(), jn.boot.APIAddr()}, 500*time.Millisecond)
	var logs string
	eventually(t, 60*time.Second, "the probe to finish", func() bool {
		logs = jobLogs(t, jn.renter, v.JobID)
		return strings.Contains(logs, "probe-done")
	})
	if strings.Contains(logs, v.LeaseID) || strings.Contains(logs, "gpumesh node") || strings.Contains(logs, "go_goroutines") {
		t.Fatalf("the job read the node's API:\n%s", logs)
	}
	if n := strings.Count(logs, "401 Unauthorized"); n != 6 {
		t.Fatalf("want 6 refusals (3 routes of 2 nodes), got %d:\n%s", n, logs)
	}
}

// TestAPITokenKeptPrivate: a token file others could read is made
// readable by its owner only when the node starts: it is the API's only
// guard.
func TestAPITokenKeptPrivate(t *testing.T) {
	c := testConfig(t, "unset", "none", "eu-west", nil)
	c.DataDir = t.TempDir()
	path := filepath.Join(c.DataDir, api.TokenFile)
	if err := os.WriteFile(path, []byte(strings.Repeat("ab", 32)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	startNode(t, c)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Fatalf("token mode %04o after start, want 0600", perm)
	}
}
