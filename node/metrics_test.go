package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/gpumesh/gpumesh/internal/metrics"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/p2p"
	vpb "github.com/gpumesh/gpumesh/verify/pb"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// seriesKey writes a series as "name{k=v,...}", its labels sorted by
// name, as both gathered and scrape reads write them.
func seriesKey(name string, labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + labels[k]
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

// gathered reads every counter and gauge series of reg.
func gathered(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out[seriesKey(mf.GetName(), labels)] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return out
}

// gossipReasonCase is a validator's error and the reason it is counted
// under.
type gossipReasonCase struct {
	name string
	err  error
	want metrics.Reason
}

// validatorErrors runs the real validators of the orders and attestation
// topics over records that each fail one check, and returns their errors
// with the reason each must be counted under.
func validatorErrors(t *testing.T) []gossipReasonCase {
	t.Helper()
	key, other := newTestKey(t), newTestKey(t)
	author, _ := peer.IDFromPrivateKey(key)
	now := time.Now()
	ov := func(at time.Time, burst int) *market.OrderValidator {
		return market.NewOrderValidator(func() time.Time { return at }, rate.Limit(1), burst)
	}
	askMsg := func(nonce uint64, count uint32) *pb.Ask {
		return &pb.Ask{Nonce: nonce, CreatedMs: now.UnixMilli(), ExpiresMs: now.Add(time.Minute).UnixMilli(),
			Model: "rtx4090", Count: count, PriceMicros: 500_000, MinDurationS: 60, MaxDurationS: 3600, Pricing: "fixed"}
	}
	seal := func(a *pb.Ask, k crypto.PrivKey) []byte {
		raw, err := market.SealAsk(a, k)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	ask := seal(askMsg(1, 1), key)
	check := func(v *market.OrderValidator, data []byte) error {
		_, err := v.Check(author, data)
		return err
	}
	replayed := ov(now, 10)
	if err := check(replayed, ask); err != nil {
		t.Fatalf("a valid ask: %v", err)
	}
	limited := ov(now, 1)
	_ = check(limited, ask)

	av := reputation.NewAttestationValidator(func() time.Time { return now }, 10, 10)
	subject, _ := peer.IDFromPrivateKey(other)
	att, err := reputation.SealAttestation(&vpb.Attestation{Subject: []byte(subject), Kind: reputation.KindUptime,
		CreatedMs: now.UnixMilli(), Passed: true, Reason: "answered"}, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := av.Check(author, att); err != nil {
		t.Fatalf("a valid attestation: %v", err)
	}
	_, attReplay := av.Check(author, att)

	return []gossipReasonCase{
		{"oversized", check(ov(now, 10), make([]byte, 1<<20)), metrics.ReasonOversize},
		{"garbage", check(ov(now, 10), []byte("garbage")), metrics.ReasonSignature},
		{"another's ask", check(ov(now, 10), seal(askMsg(2, 1), other)), metrics.ReasonSignature},
		{"no GPUs", check(ov(now, 10), seal(askMsg(3, 0), key)), metrics.ReasonMalformed},
		{"expired", check(ov(now.Add(10*time.Minute), 10), ask), metrics.ReasonExpired},
		{"future", check(ov(now.Add(-10*time.Minute), 10), ask), metrics.ReasonFuture},
		{"replayed ask", check(replayed, ask), metrics.ReasonReplay},
		{"over the rate", check(limited, ask), metrics.ReasonRate},
		{"replayed attestation", attReplay, metrics.ReasonReplay},
		{"held already", fmt.Errorf("ask: %w", market.ErrNotNew), metrics.ReasonStale},
		{"book full", fmt.Errorf("ask: %w", market.ErrBookFull), metrics.ReasonQuota},
		{"contradicts", p2p.Errf(market.ErrMismatch, "price"), metrics.ReasonMismatch},
		{"anything else", errors.New("what"), metrics.ReasonOther},
	}
}

// TestRejectedGossipCountedUnderItsReason: each validator error is
// counted, through the topic observer the node installs, as received and
// refused under its reason; the reasons pubsub ignores (not penalising
// the relay) are those metrics documents as ignored, so the reason label
// agrees with the verdict.
func TestRejectedGossipCountedUnderItsReason(t *testing.T) {
	ignored := []metrics.Reason{metrics.ReasonRate, metrics.ReasonExpired, metrics.ReasonStale, metrics.ReasonQuota}
	for _, c := range validatorErrors(t) {
		t.Run(c.name, func(t *testing.T) {
			if c.err == nil {
				t.Fatal("the validator accepted the record")
			}
			reg := prometheus.NewRegistry()
			m, err := metrics.New(reg)
			if err != nil {
				t.Fatal(err)
			}
			const topic = market.OrdersTopic
			m.Gossip.Topic(topic)
			obs := gossipObserver{m.Gossip}
			obs.Validated(topic, c.err)
			got := gathered(t, reg)
			for _, r := range metrics.Reasons {
				key := seriesKey("gpumesh_gossip_rejected_total", map[string]string{"topic": topic, "reason": string(r)})
				want := 0.0
				if r == c.want {
					want = 1
				}
				if got[key] != want {
					t.Errorf("%s = %v, want %v (err %v)", key, got[key], want, c.err)
				}
			}
			if k := seriesKey("gpumesh_gossip_received_total", map[string]string{"topic": topic}); got[k] != 1 {
				t.Errorf("%s = %v, want 1", k, got[k])
			}
			if k := seriesKey("gpumesh_gossip_accepted_total", map[string]string{"topic": topic}); got[k] != 0 {
				t.Errorf("%s = %v, want 0", k, got[k])
			}
			if isIgnored := p2p.Verdict(c.err) == pubsub.ValidationIgnore; isIgnored != slices.Contains(ignored, c.want) {
				t.Errorf("reason %s, verdict ignore %v: the reason does not tell the verdict", c.want, isIgnored)
			}
		})
	}
}

// apiDo sends a request to n's API, with token unless it is empty, and
// returns the status and body.
func apiDo(t *testing.T, n *Node, method, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+n.APIAddr()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, string(b)
}

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// scrape reads n's /metrics through its API, with its token, into series
// keyed as seriesKey writes them.
func scrape(t *testing.T, n *Node, token string) (map[string]float64, string) {
	t.Helper()
	code, body := apiDo(t, n, http.MethodGet, api.PathMetrics, token)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %.200s", code, body)
	}
	out := map[string]float64{}
	for line := range strings.Lines(body) {
		m := sampleLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil || strings.HasPrefix(line, "#") {
			continue
		}
		labels := map[string]string{}
		for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
			labels[p[1]] = strings.ReplaceAll(p[2], `\"`, `"`)
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[seriesKey(m[1], labels)] = v
	}
	return out, body
}

// atLeast fails the test unless each series is at least its value.
func atLeast(t *testing.T, who string, got map[string]float64, want map[string]float64) {
	t.Helper()
	for k, min := range want {
		if v, ok := got[k]; !ok || v < min {
			t.Errorf("%s: %s = %v (present %v), want at least %v", who, k, v, ok, min)
		}
	}
}

func key(name string, kv ...string) string {
	labels := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		labels[kv[i]] = kv[i+1]
	}
	return seriesKey(name, labels)
}

// TestMetricsOfANetwork runs real nodes (two sellers, a renter) through
// gossip, a forged and an expired order, a challenge over the API, and a
// job from rent to settlement, and reads the metrics each node then shows:
// the counters moved under the right labels, the gauges of jobs and
// attempts follow the job, and the API's requests are counted under their
// route patterns, never their paths.
func TestMetricsOfANetwork(t *testing.T) {
	jn := startJobNet(t, time.Minute)
	boot, sup, renter := jn.boot, jn.cheap, jn.renter
	token, err := api.ReadToken(renter.cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}

	// An attacker publishes, without validating them itself, garbage and
	// an expired ask on the orders topic: its bootstrap peer refuses them.
	att, err := p2p.New(p2p.Config{Key: newTestKey(t), ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, PubSub: true,
		Bootstrap: mustBootstrap(t, boot), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := att.Bootstrap(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	topic, err := att.PubSub.Join(market.OrdersTopic)
	if err != nil {
		t.Fatal(err)
	}
	defer topic.Close()
	past := time.Now().Add(-10 * time.Minute)
	expired, err := market.SealAsk(&pb.Ask{Nonce: 7, CreatedMs: past.UnixMilli(), ExpiresMs: past.Add(time.Minute).UnixMilli(),
		Model: "rtx4090", Count: 1, PriceMicros: 500_000, MinDurationS: 60, MaxDurationS: 3600, Pricing: "fixed"},
		att.Host.Peerstore().PrivKey(att.Host.ID()))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the attacker in the orders topic", func() bool { return len(topic.ListPeers()) > 0 })
	for _, msg := range [][]byte{[]byte("garbage"), expired} {
		if err := topic.Publish(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	orders := market.OrdersTopic
	eventually(t, 10*time.Second, "the bootstrap node to count the forged orders", func() bool {
		got := gathered(t, boot.reg)
		return got[key("gpumesh_gossip_rejected_total", "topic", orders, "reason", "signature")] >= 1 &&
			got[key("gpumesh_gossip_rejected_total", "topic", orders, "reason", "expired")] >= 1
	})

	// A challenge through the renter's API.
	eventually(t, 20*time.Second, "the renter to know the supplier's profile", func() bool {
		_, ok := renter.keptProfile(sup.ID())
		return ok
	})
	if code, body := apiDo(t, renter, http.MethodPost, api.PathChallenge+"?"+api.QueryPeer+"="+sup.ID().String(), token); code != http.StatusOK {
		t.Fatalf("challenge: %d %s", code, body)
	}

	// A job: rented, run, paid and settled.
	v := submit(t, renter, stepScript(6, "0.3"), 500*time.Millisecond)
	eventually(t, 30*time.Second, "the job running in both nodes' gauges", func() bool {
		r, s := gathered(t, renter.reg), gathered(t, sup.reg)
		return r[key("gpumesh_jobs", "state", job.StateRunning.String())] == 1 && s[key("gpumesh_job_attempts", "state", job.StateRunning.String())] == 1
	})
	eventually(t, 60*time.Second, "the job to succeed and settle", func() bool {
		v = jobView(t, renter, v.JobID)
		return v.State == job.StateSucceeded && settledEverywhere(v)
	})
	eventually(t, 10*time.Second, "the trade print at the bootstrap node", func() bool {
		return gathered(t, boot.reg)[key("gpumesh_gossip_accepted_total", "topic", market.TradesTopic)] >= 1
	})

	// The API's requests: a job by its ID, a read without the token.
	if code, _ := apiDo(t, renter, http.MethodGet, "/api/v1/jobs/"+v.JobID, token); code != http.StatusOK {
		t.Fatalf("GET the job: %d", code)
	}
	if code, _ := apiDo(t, renter, http.MethodGet, api.PathLeases, ""); code != http.StatusUnauthorized {
		t.Fatalf("GET leases without the token: %d, want 401", code)
	}
	if code, _ := apiDo(t, renter, http.MethodGet, "/no/such/route", token); code != http.StatusNotFound {
		t.Fatalf("GET an unknown path: %d, want 404", code)
	}

	// The renter read the sellers' first asks from a peer's book; what it
	// takes from gossip is what they post since: the cancel of a sold-out
	// ask, the ask posted again once the GPU is free.
	eventually(t, 20*time.Second, "an order accepted from gossip by the renter", func() bool {
		return gathered(t, renter.reg)[key("gpumesh_gossip_accepted_total", "topic", orders)] >= 1
	})
	got, text := scrape(t, renter, token)
	atLeast(t, "renter", got, map[string]float64{
		key("gpumesh_gossip_accepted_total", "topic", orders):                                1,
		key("gpumesh_gossip_received_total", "topic", orders):                                1,
		key("gpumesh_gossip_accepted_total", "topic", p2p.HeartbeatTopic):                    1,
		key("gpumesh_gossip_published_total", "topic", orders):                               1, // its bid
		key("gpumesh_gossip_published_total", "topic", reputation.AttestationTopic):          1,
		key("gpumesh_challenges_total", "verdict", "passed"):                                 1,
		key("gpumesh_market_quotes_total", "side", "renter", "outcome", "received"):          1,
		key("gpumesh_market_leases_total", "side", "renter", "outcome", "confirmed"):         1,
		key("gpumesh_settle_receipts_total", "side", "renter", "outcome", "accepted"):        1,
		key("gpumesh_settle_vouchers_total", "side", "renter", "outcome", "issued"):          1,
		key("gpumesh_jobs", "state", job.StateSucceeded.String()):                            1,
		key("gpumesh_store_size_bytes", "part", "vlog"):                                      1,
		key("gpumesh_api_requests_total", "route", "POST "+api.PathChallenge, "code", "200"): 1,
		key("gpumesh_api_requests_total", "route", "GET "+api.PathJob, "code", "200"):        1,
		key("gpumesh_api_requests_total", "route", api.UnmatchedRoute, "code", "401"):        1,
		key("gpumesh_api_requests_total", "route", api.UnmatchedRoute, "code", "404"):        1,
	})
	for _, k := range []string{
		key("gpumesh_challenges_total", "verdict", "failed"),
		key("gpumesh_challenges_total", "verdict", "error"),
		key("gpumesh_market_leases_total", "side", "renter", "outcome", "failed"),
		key("gpumesh_settle_receipts_total", "side", "renter", "outcome", "evidence"),
		key("gpumesh_jobs", "state", job.StateFailed.String()),
	} {
		if v, ok := got[k]; !ok || v != 0 {
			t.Errorf("renter: %s = %v (present %v), want 0", k, v, ok)
		}
	}
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, "gpumesh_api_") && (strings.Contains(line, v.JobID) || strings.Contains(line, "/no/such/route")) {
			t.Errorf("a request path became a label: %s", line)
		}
	}

	atLeast(t, "supplier", gathered(t, sup.reg), map[string]float64{
		key("gpumesh_market_quotes_total", "side", "supplier", "outcome", "sent"):       1,
		key("gpumesh_market_leases_total", "side", "supplier", "outcome", "confirmed"):  1,
		key("gpumesh_settle_receipts_total", "side", "supplier", "outcome", "issued"):   3,
		key("gpumesh_settle_vouchers_total", "side", "supplier", "outcome", "accepted"): 1,
		key("gpumesh_job_attempts", "state", job.StateSucceeded.String()):               1,
		key("gpumesh_gossip_accepted_total", "topic", orders):                           1, // the renter's bid
		key("gpumesh_gossip_published_total", "topic", market.TradesTopic):              1,
	})
	atLeast(t, "bootstrap node", gathered(t, boot.reg), map[string]float64{
		key("gpumesh_gossip_accepted_total", "topic", reputation.AttestationTopic): 1, // the renter's verdict
	})
}

// dashboardMetric finds the metric names in a PromQL expression.
var dashboardMetric = regexp.MustCompile(`\b(?:gpumesh|libp2p)_[a-zA-Z0-9_]+`)

// TestGrafanaDashboardMetricsExist: every metric the Grafana dashboard
// (docs/grafana-dashboard.json) queries is in a running node's registry,
// ours and go-libp2p's alike, so that no panel is empty for a misspelt
// or renamed metric. The dashboard takes its Prometheus data source as
// the variable DS_PROMETHEUS.
func TestGrafanaDashboardMetricsExist(t *testing.T) {
	raw, err := os.ReadFile("../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "query" || k == "definition") {
					exprs = append(exprs, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(dash)
	want := map[string]bool{}
	for _, e := range exprs {
		for _, name := range dashboardMetric.FindAllString(e, -1) {
			want[name] = true
		}
	}
	if len(want) < 10 {
		t.Fatalf("the dashboard queries only %d metrics: %v", len(want), want)
	}
	if !strings.Contains(string(raw), "${DS_PROMETHEUS}") {
		t.Error("the dashboard's panels do not take their data source from ${DS_PROMETHEUS}")
	}

	c := sellerConfig(t, "unset", "sim:rtx4090:1", "eu-west", "fixed", []string{"rtx4090=0.50"}, nil)
	c.DataDir = t.TempDir()
	seller := startNode(t, c)
	c2 := testConfig(t, "unset", "none", "eu-west", bootstrapOf(seller))
	c2.DataDir = t.TempDir()
	startNode(t, c2)
	token, err := api.ReadToken(seller.cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	apiDo(t, seller, http.MethodGet, api.PathHealth, token) // the API's series exist once it served a request
	// libp2p's series with labels exist once a connection is counted,
	// which the listener's side does a moment after the dialler's.
	var missing []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		mfs, err := seller.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, mf := range mfs {
			have[mf.GetName()] = true
			if mf.GetType().String() == "HISTOGRAM" {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					have[mf.GetName()+s] = true
				}
			}
		}
		missing = missing[:0]
		for name := range want {
			if !have[name] {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	sort.Strings(missing)
	for _, name := range missing {
		t.Errorf("the dashboard queries %s, which the node does not have", name)
	}
}
