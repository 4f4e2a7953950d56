package api_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/settle"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/inventory"
)

const testToken = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// backend is a test double of the api.Backend interface: canned answers,
// and what the handlers passed it.
type backend struct {
	peer        peer.ID
	jobs        *jobs // nil: jobs not started
	offersErr   error
	receiptsErr error

	mu        sync.Mutex
	gotFilter string
	gotLease  string
	gotPeer   peer.ID
	gotModel  string
}

func (b *backend) Health() api.Health {
	return api.Health{Status: "ok", PeerID: b.peer.String(), Peers: 3, GPUs: 2, Version: "test"}
}
func (b *backend) Peers() []api.Peer {
	up := 99.5
	return []api.Peer{{ID: b.peer, GPUsTotal: 8, GPUsFree: 6, Connected: true, UptimePct: &up}}
}
func (b *backend) GPUs() []inventory.GPU {
	return []inventory.GPU{{Index: 0, UUID: "GPU-a", Model: "h100-sxm"}, {Index: 1, UUID: "GPU-b", Model: "h100-sxm"}}
}
func (b *backend) Offers(f market.Filter) ([]market.Offer, error) {
	b.mu.Lock()
	b.gotFilter = f.String()
	b.mu.Unlock()
	if b.offersErr != nil {
		return nil, b.offersErr
	}
	return []market.Offer{{PeerID: b.peer.String(), Model: "h100-sxm", Count: 2}}, nil
}
func (b *backend) Orders(f market.Filter) api.Orders {
	b.mu.Lock()
	b.gotFilter = f.String()
	b.mu.Unlock()
	return api.Orders{Asks: []api.OrderView{{ID: "ask1", Kind: "ask", Model: "h100-sxm", Count: 1}}}
}
func (b *backend) Leases() ([]api.LeaseView, error) {
	return []api.LeaseView{{LeaseID: "lease1", Model: "h100-sxm", Count: 1, Verified: true}}, nil
}
func (b *backend) Rent(_ context.Context, req market.RentRequest) (api.LeaseView, error) {
	if req.Count == 7 {
		return api.LeaseView{}, &market.NoMatch{Reasons: []string{"1 has 2 of 4 held by leases with no job yet (2 free); retry in 40s"}}
	}
	return api.LeaseView{LeaseID: "lease2", Model: "h100-sxm", Count: req.Count, Verified: true, State: "confirmed", Role: "renter"}, nil
}
func (b *backend) Shell(_ context.Context, lease string, _ job.Request) (api.ShellSession, error) {
	return api.ShellSession{}, fmt.Errorf("lease %s: %w", lease, api.ErrNoLease)
}

func (b *backend) ReleaseLease(_ context.Context, id string) (api.LeaseView, error) {
	switch id {
	case "nosuch":
		return api.LeaseView{}, fmt.Errorf("lease %s: %w", id, api.ErrNoLease)
	case "busy":
		return api.LeaseView{}, &market.ReleaseRefused{Reason: "lease busy: a job runs on the lease; stop it first"}
	}
	return api.LeaseView{LeaseID: id, Model: "h100-sxm", Count: 1, Verified: true, State: "released", Role: "renter"}, nil
}
func (b *backend) Prices() []market.PricePoint {
	return []market.PricePoint{{Model: "h100-sxm", Trades: 4, LastMicros: 2_000_000}}
}
func (b *backend) Capacity() []market.Capacity { return nil }
func (b *backend) Reputation() []api.ReputationView {
	return []api.ReputationView{{PeerID: b.peer.String()}}
}
func (b *backend) Challenge(_ context.Context, id peer.ID, model string) (api.ChallengeReport, error) {
	b.mu.Lock()
	b.gotPeer, b.gotModel = id, model
	b.mu.Unlock()
	return api.ChallengeReport{PeerID: id.String(), Passed: true, GPUs: 2, Claimed: 2}, nil
}
func (b *backend) Jobs() api.JobService {
	if b.jobs == nil {
		return nil
	}
	return b.jobs
}
func (b *backend) Redeemable() ([]api.Redeemable, error) {
	return []api.Redeemable{{LeaseID: "lease1", Nonce: 4, CumMicros: 2500000, Raw: "0a01"}}, nil
}

func (b *backend) Receipts(lease string) ([]settle.Report, error) {
	b.mu.Lock()
	b.gotLease = lease
	b.mu.Unlock()
	if b.receiptsErr != nil {
		return nil, b.receiptsErr
	}
	return []settle.Report{{LeaseID: "lease1", Receipts: 3, Valid: true}}, nil
}

func (b *backend) Doctor(context.Context) api.DoctorReport {
	return api.DoctorReport{
		PeerID: b.peer.String(),
		Checks: []api.Check{
			{Name: "peers", Status: api.StatusOK, Detail: "3 connected peers"},
			{Name: "disk", Status: api.StatusFail, Detail: "100 MiB free", Fix: "free space"},
		},
		Reach: &p2p.ReachInfo{Reach: p2p.ReachPunchable, Observed: []p2p.Observation{{Addr: "/ip4/198.51.100.7/tcp/4001", Observers: 3}}},
		Time:  time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
}

// jobs is a test double of api.JobService with one job, "job1".
type jobs struct {
	submitErr error
	log       string

	mu         sync.Mutex
	got        job.Request
	stopReason string
	gotFrom    int64
	gotFollow  bool
	forwards   []job.Publish
}

func (j *jobs) view() job.View {
	return job.View{JobID: "job1", State: job.StateSucceeded, Argv: []string{"true"}, Attempts: []job.AttemptView{{Attempt: 1}}}
}
func (j *jobs) Submit(_ context.Context, req job.Request) (job.View, error) {
	j.mu.Lock()
	j.got = req
	j.mu.Unlock()
	if j.submitErr != nil {
		return job.View{}, j.submitErr
	}
	return j.view(), nil
}
func (j *jobs) Jobs() []job.View { return []job.View{j.view()} }
func (j *jobs) Job(id string) (job.View, error) {
	if id != "job1" {
		return job.View{}, errors.New("no job " + strconv.Quote(id))
	}
	return j.view(), nil
}
func (j *jobs) Stop(id, reason string) (job.View, error) {
	j.mu.Lock()
	j.stopReason = reason
	j.mu.Unlock()
	return j.Job(id)
}
func (j *jobs) Logs(_ context.Context, id string, from int64, follow bool, w io.Writer) (int64, error) {
	j.mu.Lock()
	j.gotFrom, j.gotFollow = from, follow
	j.mu.Unlock()
	n, err := io.WriteString(w, j.log[from:])
	return int64(n), err
}

func (j *jobs) Forward(id string, p job.Publish) (job.ForwardView, error) {
	if _, err := j.Job(id); err != nil {
		return job.ForwardView{}, fmt.Errorf("%w: %v", job.ErrNoJob, err)
	}
	if p.Port == 0 {
		return job.ForwardView{}, fmt.Errorf("%w: no port", job.ErrForward)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.forwards = append(j.forwards, p)
	return job.ForwardView{JobID: id, Port: p.Port, Listen: p.Listen}, nil
}
func (j *jobs) Forwards(id string) ([]job.ForwardView, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []job.ForwardView
	for _, p := range j.forwards {
		out = append(out, job.ForwardView{JobID: "job1", Port: p.Port, Listen: p.Listen})
	}
	return out, nil
}
func (j *jobs) Unforward(id, listen string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := len(j.forwards)
	j.forwards = slices.DeleteFunc(j.forwards, func(p job.Publish) bool { return listen == "" || p.Listen == listen })
	if id != "job1" || len(j.forwards) == n {
		return fmt.Errorf("%w: nothing forwarded on %q", job.ErrForward, listen)
	}
	return nil
}

func newPeerID(t *testing.T) peer.ID {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// serve starts the real handler over b and returns a client with the
// token.
func serve(t *testing.T, b *backend) (*httptest.Server, *api.Client) {
	t.Helper()
	srv := httptest.NewServer(api.NewHandler(b, testToken, api.WithMetrics(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "test_metric 1\n")
	}))))
	t.Cleanup(srv.Close)
	c := api.NewClient(strings.TrimPrefix(srv.URL, "http://"), testToken)
	t.Cleanup(c.Close)
	return srv, c
}

func newBackend(t *testing.T) *backend {
	return &backend{peer: newPeerID(t), jobs: &jobs{log: "line one\nline two\n"}}
}

// TestTokenRequired: every route but the public ones (/healthz, the
// Explorer's, the OpenAPI document) refuses a request without
// the bearer token or with another, with 401 and a message naming the
// token file; the client reports it as ErrUnauthorized.
func TestTokenRequired(t *testing.T) {
	b := newBackend(t)
	srv, _ := serve(t, b)
	for _, rt := range api.Routes() {
		path := strings.Replace(rt.Path, "{id}", "job1", 1)
		method := rt.Method
		if method == "" {
			method = http.MethodGet
		}
		for _, auth := range []string{"", "Bearer wrong", "Bearer " + testToken + "x", testToken} {
			req, _ := http.NewRequest(method, srv.URL+path, nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rt.Path == api.PathHealth {
				if resp.StatusCode != http.StatusOK {
					t.Errorf("%s %s with %q: %d, want 200 (it is open)", method, path, auth, resp.StatusCode)
				}
				continue
			}
			if api.Public(req) {
				// The Explorer's routes and the OpenAPI document: open
				// (this backend serves no Explorer: 503).
				if resp.StatusCode == http.StatusUnauthorized {
					t.Errorf("%s %s with %q: 401, want it open", method, path, auth)
				}
				continue
			}
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "DATA/"+api.TokenFile) {
				t.Errorf("%s %s with %q: %d %q, want 401 naming %s", method, path, auth, resp.StatusCode, body, api.TokenFile)
			}
			if strings.Contains(string(body), b.peer.String()) {
				t.Errorf("%s %s with %q leaks the backend's answer: %s", method, path, auth, body)
			}
		}
	}

	c := api.NewClient(strings.TrimPrefix(srv.URL, "http://"), "not-the-token")
	defer c.Close()
	if _, err := c.Health(context.Background()); err != nil {
		t.Fatalf("Health without the token: %v", err)
	}
	_, err := c.Peers(context.Background())
	var e *api.Error
	if !errors.Is(err, api.ErrUnauthorized) || !errors.As(err, &e) {
		t.Fatalf("Peers with another token: %v, want an *api.Error that is ErrUnauthorized", err)
	}
	if e.Status != http.StatusUnauthorized || e.Path != api.PathPeers || !strings.Contains(e.Message, "a bearer token") {
		t.Fatalf("error %+v: want status 401, path %s and the server's message", e, api.PathPeers)
	}
	if errors.Is(err, api.ErrNotFound) {
		t.Fatalf("a 401 is ErrNotFound too: %v", err)
	}
}

// routeConstants reads the values of the Path* constants of routes.go.
func routeConstants(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "routes.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Path") {
					continue
				}
				v, err := strconv.Unquote(vs.Values[i].(*ast.BasicLit).Value)
				if err != nil {
					t.Fatal(err)
				}
				out[name.Name] = v
			}
		}
	}
	return out
}

// TestRouteTable: every Path constant is in Routes, once per method, and
// the handler serves every route of Routes (no 404 or 405), while an
// unknown path is a 404 and a known path with another method a 405.
func TestRouteTable(t *testing.T) {
	consts := routeConstants(t)
	if len(consts) < 15 {
		t.Fatalf("found only %d Path constants in routes.go", len(consts))
	}
	inTable := map[string]bool{}
	seen := map[string]bool{}
	for _, rt := range api.Routes() {
		if seen[rt.Pattern()] {
			t.Errorf("route %s listed twice", rt.Pattern())
		}
		seen[rt.Pattern()] = true
		inTable[rt.Path] = true
	}
	for name, path := range consts {
		if !inTable[path] {
			t.Errorf("%s (%s) is not in Routes()", name, path)
		}
	}

	b := newBackend(t)
	srv, _ := serve(t, b)
	do := func(method, path string) int {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, rt := range api.Routes() {
		method := rt.Method
		if method == "" {
			method = http.MethodGet
		}
		path := strings.Replace(rt.Path, "{id}", "job1", 1)
		if code := do(method, path); code == http.StatusNotFound || code == http.StatusMethodNotAllowed {
			t.Errorf("%s %s: %d: the route is not served", method, path, code)
		}
	}
	if code := do(http.MethodGet, "/api/v1/no-such-route"); code != http.StatusNotFound {
		t.Errorf("an unknown route: %d, want 404", code)
	}
	if code := do(http.MethodDelete, api.PathJobs); code != http.StatusMethodNotAllowed {
		t.Errorf("DELETE %s: %d, want 405", api.PathJobs, code)
	}
}

// TestClientRoundTrip: each typed method of Client reaches its route and
// decodes the backend's answer, and the handler hands the backend what
// the client sent.
func TestClientRoundTrip(t *testing.T) {
	b := newBackend(t)
	_, c := serve(t, b)
	ctx := context.Background()

	h, err := c.Health(ctx)
	if err != nil || h.PeerID != b.peer.String() || h.GPUs != 2 {
		t.Fatalf("Health: %+v, %v", h, err)
	}
	ps, err := c.Peers(ctx)
	if err != nil || len(ps) != 1 || ps[0].ID != b.peer || ps[0].GPUsFree != 6 || ps[0].UptimePct == nil || *ps[0].UptimePct != 99.5 {
		t.Fatalf("Peers: %+v, %v", ps, err)
	}
	gs, err := c.GPUs(ctx)
	if err != nil || len(gs) != 2 || gs[1].UUID != "GPU-b" {
		t.Fatalf("GPUs: %+v, %v", gs, err)
	}
	offers, err := c.Offers(ctx, "model=h100-sxm vram>=80")
	if err != nil || len(offers) != 1 || offers[0].Count != 2 {
		t.Fatalf("Offers: %+v, %v", offers, err)
	}
	if want := "model=h100-sxm vram>=80"; b.gotFilter != want {
		t.Errorf("the backend got filter %q, want %q", b.gotFilter, want)
	}
	o, err := c.Orders(ctx, "")
	if err != nil || len(o.Asks) != 1 || o.Asks[0].ID != "ask1" || o.Bids == nil {
		t.Fatalf("Orders: %+v, %v (bids must be [], not null)", o, err)
	}
	ls, err := c.Leases(ctx)
	if err != nil || len(ls) != 1 || ls[0].LeaseID != "lease1" || !ls[0].Verified {
		t.Fatalf("Leases: %+v, %v", ls, err)
	}
	pp, err := c.Prices(ctx)
	if err != nil || len(pp) != 1 || pp[0].LastMicros != 2_000_000 {
		t.Fatalf("Prices: %+v, %v", pp, err)
	}
	cs, err := c.Capacity(ctx)
	if err != nil || cs == nil || len(cs) != 0 {
		t.Fatalf("Capacity: %#v, %v; want an empty list for a backend's nil", cs, err)
	}
	rs, err := c.Reputation(ctx)
	if err != nil || len(rs) != 1 || rs[0].PeerID != b.peer.String() {
		t.Fatalf("Reputation: %+v, %v", rs, err)
	}
	rep, err := c.Challenge(ctx, b.peer, "h100-sxm")
	if err != nil || !rep.Passed || rep.PeerID != b.peer.String() || b.gotPeer != b.peer || b.gotModel != "h100-sxm" {
		t.Fatalf("Challenge: %+v, %v; the backend got %s %q", rep, err, b.gotPeer, b.gotModel)
	}

	v, err := c.SubmitJob(ctx, api.JobRequest{Filter: "vram>=24", Count: 2, MaxPrice: "2.50", Argv: []string{"python", "train.py"}, Env: []string{"A=b"}, AllowSimulated: true})
	if err != nil || v.JobID != "job1" {
		t.Fatalf("SubmitJob: %+v, %v", v, err)
	}
	if got := b.jobs.got; got.Count != 2 || got.MaxPrice != 2_500_000 || got.Filter.String() != "vram>=24" || len(got.Spec.Argv) != 2 || got.Spec.Env[0].Name != "A" || !got.AllowSimulated {
		t.Errorf("the backend got request %+v", got)
	}
	vs, err := c.Jobs(ctx)
	if err != nil || len(vs) != 1 || vs[0].JobID != "job1" {
		t.Fatalf("Jobs: %+v, %v", vs, err)
	}
	if v, err = c.Job(ctx, "job1"); err != nil || v.State != job.StateSucceeded {
		t.Fatalf("Job: %+v, %v", v, err)
	}
	if v, err = c.StopJob(ctx, "job1", "enough"); err != nil || v.JobID != "job1" || b.jobs.stopReason != "enough" {
		t.Fatalf("StopJob: %+v, %v; the backend got reason %q", v, err, b.jobs.stopReason)
	}
	var out strings.Builder
	if err := c.Logs(ctx, "job1", 9, true, &out); err != nil || out.String() != "line two\n" {
		t.Fatalf("Logs from 9: %q, %v", out.String(), err)
	}
	if b.jobs.gotFrom != 9 || !b.jobs.gotFollow {
		t.Errorf("the backend got from %d follow %v, want 9 true", b.jobs.gotFrom, b.jobs.gotFollow)
	}
	out.Reset()
	if err := c.Logs(ctx, "job1", 0, false, &out); err != nil || out.String() != b.jobs.log || b.jobs.gotFollow {
		t.Fatalf("Logs: %q, %v, follow %v", out.String(), err, b.jobs.gotFollow)
	}
	if rs, err := c.Redeemable(ctx); err != nil || len(rs) != 1 || rs[0].Nonce != 4 || rs[0].CumMicros != 2500000 || rs[0].Raw != "0a01" {
		t.Fatalf("Redeemable: %+v, %v", rs, err)
	}
	reps, err := c.Receipts(ctx, "lea")
	if err != nil || len(reps) != 1 || reps[0].Receipts != 3 || b.gotLease != "lea" {
		t.Fatalf("Receipts: %+v, %v; the backend got lease %q", reps, err, b.gotLease)
	}
	doc, err := c.Doctor(ctx)
	if err != nil || doc.PeerID != b.peer.String() || len(doc.Checks) != 2 || !doc.Failed() {
		t.Fatalf("Doctor: %+v, %v", doc, err)
	}
	if disk, ok := doc.Check("disk"); !ok || disk.Fix != "free space" || disk.Status != api.StatusFail {
		t.Errorf("Doctor's disk check: %+v, %v", disk, ok)
	}
	if _, ok := doc.Check("nope"); ok {
		t.Errorf("Doctor has a check called nope")
	}
	if doc.Reach == nil || doc.Reach.Reach != p2p.ReachPunchable || len(doc.Reach.Observed) != 1 || doc.Reach.Observed[0].Observers != 3 || !doc.Time.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Errorf("Doctor's reach and time: %+v %s", doc.Reach, doc.Time)
	}
}

// TestClientTypedErrors: the handler's statuses reach the caller as
// *api.Error values that errors.Is tells apart, and a 409 of a job
// submission is a *market.NoMatch with the node's reasons.
func TestClientTypedErrors(t *testing.T) {
	ctx := context.Background()
	b := newBackend(t)
	_, c := serve(t, b)

	_, err := c.Job(ctx, "nope")
	var e *api.Error
	if !errors.Is(err, api.ErrNotFound) || !errors.As(err, &e) || !strings.Contains(e.Message, `no job "nope"`) {
		t.Fatalf("Job(nope): %v, want ErrNotFound with the backend's message", err)
	}
	if _, err := c.StopJob(ctx, "nope", ""); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("StopJob(nope): %v, want ErrNotFound", err)
	}
	if err := c.Logs(ctx, "nope", 0, true, io.Discard); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("Logs(nope): %v, want ErrNotFound", err)
	}

	_, err = c.Offers(ctx, "vram>>80")
	if !errors.As(err, &e) || e.Status != http.StatusBadRequest || !strings.Contains(e.Message, "vram>>80") {
		t.Fatalf("Offers with a malformed filter: %v, want a 400 naming it", err)
	}
	_, err = c.SubmitJob(ctx, api.JobRequest{Count: 1, MaxPrice: "0"})
	if !errors.As(err, &e) || e.Status != http.StatusBadRequest || !strings.Contains(e.Message, "max_price") {
		t.Fatalf("SubmitJob at price 0: %v, want a 400 about max_price", err)
	}

	for _, kv := range []string{"CUDA_VISIBLE_DEVICES=0,1,2,3", "NVIDIA_VISIBLE_DEVICES=all"} {
		_, err = c.SubmitJob(ctx, api.JobRequest{Count: 1, MaxPrice: "1", Argv: []string{"true"}, Env: []string{kv}})
		if name, _, _ := strings.Cut(kv, "="); !errors.As(err, &e) || e.Status != http.StatusBadRequest || !strings.Contains(e.Message, "env "+name) {
			t.Fatalf("SubmitJob with %s: %v, want a 400 naming it", kv, err)
		}
	}
	b.jobs.submitErr = &market.NoMatch{Reasons: []string{"peer A: too dear", "peer B: unproven"}}
	_, err = c.SubmitJob(ctx, api.JobRequest{Count: 1, MaxPrice: "1"})
	var nm *market.NoMatch
	if !errors.Is(err, api.ErrConflict) || !errors.As(err, &nm) || len(nm.Reasons) != 2 || nm.Reasons[1] != "peer B: unproven" {
		t.Fatalf("SubmitJob matching nobody: %v, want ErrConflict and a *market.NoMatch with both reasons", err)
	}
	b.jobs.submitErr = errors.New("supplier hung up")
	_, err = c.SubmitJob(ctx, api.JobRequest{Count: 1, MaxPrice: "1"})
	if !errors.As(err, &e) || e.Status != http.StatusBadGateway || errors.As(err, &nm) {
		t.Fatalf("SubmitJob failing: %v, want a 502 that is no NoMatch", err)
	}

	b.offersErr = errors.New("store closed")
	if _, err := c.Offers(ctx, ""); !errors.As(err, &e) || e.Status != http.StatusInternalServerError || e.Message != "store closed" {
		t.Fatalf("Offers failing: %v, want a 500 with the message", err)
	}
	b.receiptsErr = errors.New("no receipts for a lease starting with \"zz\"")
	if _, err := c.Receipts(ctx, "zz"); !errors.As(err, &e) || e.Status != http.StatusBadRequest {
		t.Fatalf("Receipts failing: %v, want a 400", err)
	}
	b.receiptsErr = api.ErrNotStarted
	if _, err := c.Receipts(ctx, ""); !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("Receipts before jobs start: %v, want ErrUnavailable", err)
	}
	b.jobs = nil
	if _, err := c.Jobs(ctx); !errors.Is(err, api.ErrUnavailable) || !strings.Contains(err.Error(), "not started") {
		t.Fatalf("Jobs before jobs start: %v, want ErrUnavailable", err)
	}
}

// TestErrorBodyBounded: the client reads at most MaxErrorBody of a
// failed answer, however long the server's body.
func TestErrorBodyBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		chunk := []byte(strings.Repeat("x", 1<<10))
		for range 4 << 10 { // 4 MiB
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	c := api.NewClient(strings.TrimPrefix(srv.URL, "http://"), testToken)
	defer c.Close()
	_, err := c.Leases(context.Background())
	var e *api.Error
	if !errors.As(err, &e) || e.Status != http.StatusInternalServerError {
		t.Fatalf("Leases: %v, want a 500", err)
	}
	if len(e.Message) == 0 || len(e.Message) > api.MaxErrorBody {
		t.Fatalf("the error holds %d bytes of the body, want 1 to %d", len(e.Message), api.MaxErrorBody)
	}
}

// TestClientTimeoutAndUnreachable: a call without a deadline is bounded
// by the client's timeout; a node that is not there is ErrUnreachable,
// with what to do.
func TestClientTimeoutAndUnreachable(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	c := api.NewClient(strings.TrimPrefix(srv.URL, "http://"), testToken, api.WithTimeout(50*time.Millisecond))
	defer c.Close()
	done := make(chan error, 1)
	go func() { _, err := c.Peers(context.Background()); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, api.ErrUnreachable) {
			t.Fatalf("a call to a silent server: %v, want a deadline error", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the call outlived the client's timeout")
	}

	ln := httptest.NewUnstartedServer(nil) // a port nobody listens on once closed
	addr := ln.Listener.Addr().String()
	ln.Close()
	c2 := api.NewClient(addr, testToken)
	defer c2.Close()
	_, err := c2.Health(context.Background())
	if !errors.Is(err, api.ErrUnreachable) || !strings.Contains(err.Error(), "is `gpumesh node` running") {
		t.Fatalf("a call to no node: %v, want ErrUnreachable saying what to do", err)
	}
}

// TestEnsureToken: the token is made once, mode 0600, read back by
// ReadToken, kept across calls, and an existing file others could read is
// made private.
func TestEnsureToken(t *testing.T) {
	dir := t.TempDir()
	if _, err := api.ReadToken(dir); err == nil {
		t.Fatal("ReadToken of a data dir without a token: no error")
	}
	tok, err := api.EnsureToken(dir)
	if err != nil || len(tok) != 64 {
		t.Fatalf("EnsureToken: %q, %v", tok, err)
	}
	path := filepath.Join(dir, api.TokenFile)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, %v; want mode 0600", fi, err)
	}
	if again, err := api.EnsureToken(dir); err != nil || again != tok {
		t.Fatalf("EnsureToken again: %q, %v; want the same token", again, err)
	}
	if read, err := api.ReadToken(dir); err != nil || read != tok {
		t.Fatalf("ReadToken: %q, %v", read, err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := api.EnsureToken(dir); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("token mode %04o after EnsureToken, want 0600", fi.Mode().Perm())
	}
	if err := os.WriteFile(path, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok2, err := api.EnsureToken(dir); err != nil || len(tok2) != 64 || tok2 == tok {
		t.Fatalf("EnsureToken over a short token: %q, %v; want a fresh one", tok2, err)
	}
	c, err := api.ClientForDataDir("127.0.0.1:1", dir)
	if err != nil || c == nil {
		t.Fatalf("ClientForDataDir: %v", err)
	}
	if _, err := api.ClientForDataDir("127.0.0.1:1", t.TempDir()); err == nil {
		t.Fatal("ClientForDataDir without a token: no error")
	}
}

// TestJobRequestPorts: declared and published ports become the spec's
// ports, ascending and once each; publish strings name local addresses.
func TestJobRequestPorts(t *testing.T) {
	r := api.JobRequest{Count: 1, MaxPrice: "2", Argv: []string{"true"},
		Ports: []string{"9000/tcp", "8000"}, Publish: []string{"8080:8000", "7000", "[::1]:9090:9001", "0.0.0.0:8081:8000"}}
	req, err := r.ToRequest()
	if err != nil {
		t.Fatal(err)
	}
	var got []uint32
	for _, p := range req.Spec.Ports {
		if p.Protocol != "tcp" {
			t.Fatalf("port %v", p)
		}
		got = append(got, p.Number)
	}
	if !slices.Equal(got, []uint32{7000, 8000, 9000, 9001}) {
		t.Fatalf("spec ports %v", got)
	}
	want := []job.Publish{{Listen: "127.0.0.1:8080", Port: 8000}, {Listen: "127.0.0.1:0", Port: 7000}, {Listen: "[::1]:9090", Port: 9001}, {Listen: "0.0.0.0:8081", Port: 8000}}
	if !slices.Equal(req.Publish, want) {
		t.Fatalf("publish %v, want %v", req.Publish, want)
	}
}

// TestForwardRoutes: the client's forward calls reach the backend with
// their arguments; an unknown job is ErrNotFound, a bad request a 400.
func TestForwardRoutes(t *testing.T) {
	b := newBackend(t)
	_, c := serve(t, b)
	ctx := context.Background()
	v, err := c.Forward(ctx, "job1", "127.0.0.1:8080", 8000)
	if err != nil || v.Listen != "127.0.0.1:8080" || v.Port != 8000 {
		t.Fatalf("Forward: %+v, %v", v, err)
	}
	if _, err := c.Forward(ctx, "nope", "", 8000); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("Forward to an unknown job: %v, want ErrNotFound", err)
	}
	var e *api.Error
	if _, err := c.Forward(ctx, "job1", "", 0); !errors.As(err, &e) || e.Status != http.StatusBadRequest {
		t.Fatalf("Forward without a port: %v, want a 400", err)
	}
	fs, err := c.Forwards(ctx, "")
	if err != nil || len(fs) != 1 || fs[0].Listen != "127.0.0.1:8080" {
		t.Fatalf("Forwards: %+v, %v", fs, err)
	}
	if err := c.Unforward(ctx, "job1", "127.0.0.1:8080"); err != nil {
		t.Fatalf("Unforward: %v", err)
	}
	if err := c.Unforward(ctx, "job1", "127.0.0.1:8080"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("Unforward again: %v, want ErrNotFound", err)
	}
}

// TestJobRequestToRequest: the checks of a job request, each failure
// naming its field.
func TestJobRequestToRequest(t *testing.T) {
	ok := api.JobRequest{Filter: "vram>=24", Count: 1, MaxPrice: "2", Argv: []string{"true"}}
	tests := []struct {
		name string
		edit func(*api.JobRequest)
		want string // in the error; "" for none
	}{
		{"valid", func(*api.JobRequest) {}, ""},
		{"bad filter", func(r *api.JobRequest) { r.Filter = "vram>>2" }, "vram>>2"},
		{"no GPUs", func(r *api.JobRequest) { r.Count = 0 }, "count 0"},
		{"no price", func(r *api.JobRequest) { r.MaxPrice = "" }, "max_price"},
		{"too long", func(r *api.JobRequest) { r.Hours = 1e6 }, "hours"},
		{"env without =", func(r *api.JobRequest) { r.Env = []string{"A"} }, `env "A"`},
		{"bad restart", func(r *api.JobRequest) { r.Restart = "always" }, `restart "always"`},
		{"bad checkpoint", func(r *api.JobRequest) { r.CheckpointEvery = "10ms" }, "checkpoint_every"},
		{"bad interval", func(r *api.JobRequest) { r.ReceiptInterval = "1h" }, "receipt_interval"},
		{"port 0", func(r *api.JobRequest) { r.Ports = []string{"0"} }, `port "0"`},
		{"udp port", func(r *api.JobRequest) { r.Ports = []string{"53/udp"} }, `port "53/udp"`},
		{"port too high", func(r *api.JobRequest) { r.Ports = []string{"70000"} }, `port "70000"`},
		{"publish without port", func(r *api.JobRequest) { r.Publish = []string{"127.0.0.1:8080:"} }, "publish"},
		{"publish bad local port", func(r *api.JobRequest) { r.Publish = []string{"127.0.0.1:x:8000"} }, "publish"},
		{"replicas without a port", func(r *api.JobRequest) { r.Replicas = 2 }, "replicas 2"},
		{"too many replicas", func(r *api.JobRequest) { r.Ports = []string{"80"}; r.Replicas = 17 }, "replicas 17"},
		{"health without a port", func(r *api.JobRequest) { r.Health = "/healthz" }, "health checks need a port"},
		{"health not a path", func(r *api.JobRequest) { r.Ports = []string{"80"}; r.Health = "healthz" }, `health "healthz"`},
		{"health with a newline", func(r *api.JobRequest) { r.Ports = []string{"80"}; r.Health = "/a\r\nX: y" }, "health"},
		{"health grace too short", func(r *api.JobRequest) { r.Ports = []string{"80"}; r.HealthGrace = "1ms" }, "health_grace"},
		{"tasks", func(r *api.JobRequest) { r.Tasks, r.Parallel = 20, 4 }, ""},
		{"negative tasks", func(r *api.JobRequest) { r.Tasks = -1 }, "tasks -1"},
		{"too many tasks", func(r *api.JobRequest) { r.Tasks = 10001 }, "tasks 10001"},
		{"parallel over tasks", func(r *api.JobRequest) { r.Tasks, r.Parallel = 2, 3 }, "parallel 3"},
		{"tasks with ports", func(r *api.JobRequest) { r.Tasks, r.Ports = 2, []string{"80"} }, "tasks run to their end"},
		{"too many ports", func(r *api.JobRequest) {
			for i := range 17 {
				r.Ports = append(r.Ports, strconv.Itoa(8000+i))
			}
		}, "17 ports"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ok
			tt.edit(&r)
			req, err := r.ToRequest()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("got %v, want no error", err)
			case tt.want == "" && (req.Count != 1 || req.MaxPrice != 2_000_000 || req.Duration != time.Hour):
				t.Fatalf("got %+v, want 1 GPU at 2.00 for an hour", req)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// TestClientLeases: rent and release through the API, with their
// errors typed as the CLI uses them.
func TestClientLeases(t *testing.T) {
	ctx := context.Background()
	_, c := serve(t, newBackend(t))
	l, err := c.Rent(ctx, api.RentRequest{Filter: "model=h100-sxm", Count: 2, MaxPrice: "2.50"})
	if err != nil || l.Count != 2 || l.State != "confirmed" {
		t.Fatalf("Rent = %+v, %v", l, err)
	}
	var e *api.Error
	if _, err := c.Rent(ctx, api.RentRequest{Count: 1}); !errors.As(err, &e) || e.Status != http.StatusBadRequest || !strings.Contains(e.Message, "max_price") {
		t.Fatalf("Rent with no max price: %v, want a 400 about max_price", err)
	}
	if _, err := c.Rent(ctx, api.RentRequest{Count: 1, MaxPrice: "1", Wait: "2h"}); !errors.As(err, &e) || e.Status != http.StatusBadRequest {
		t.Fatalf("Rent waiting 2h: %v, want a 400", err)
	}
	var nm *market.NoMatch
	if _, err := c.Rent(ctx, api.RentRequest{Count: 7, MaxPrice: "1"}); !errors.Is(err, api.ErrConflict) || !errors.As(err, &nm) || !strings.Contains(nm.Reasons[0], "retry in") {
		t.Fatalf("Rent matching nobody: %v, want ErrConflict and the NoMatch", err)
	}
	if v, err := c.ReleaseLease(ctx, "abcd1234"); err != nil || v.State != "released" {
		t.Fatalf("ReleaseLease = %+v, %v", v, err)
	}
	if _, err := c.ReleaseLease(ctx, "nosuch"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("ReleaseLease of an unknown lease: %v, want ErrNotFound", err)
	}
	if _, err := c.ReleaseLease(ctx, "busy"); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "stop it first") {
		t.Fatalf("ReleaseLease refused: %v, want ErrConflict with the supplier's reason", err)
	}
}
