package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/gpumesh/gpumesh/internal/testenv"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// TestExplorerInBrowser opens the Explorer that a node serves in a real
// (headless) Chromium, on a network of real nodes: an observer without
// GPUs that has challenged two t4 suppliers (one honest, one an impostor
// that corrupts rows) and knows an unchallenged h100 supplier. Every page
// must load without a console error or exception and show what the API
// answers: the summary, each supplier with its verdict (the impostor's
// "failed" and its reason, on the list and on its own page), the asks of
// the book. While the GPU page is open the observer rents a t4 for a job
// and the trade print shows up without a reload; the "This node" page
// asks for the token, then takes it from #token= and lists the lease and
// its receipts. Screenshots go to $GPUMESH_ARTIFACTS/explorer.
func TestExplorerInBrowser(t *testing.T) {
	exe := findChromium(t)
	en := startExplorerNet(t)
	shots := artifactsDir(t)
	b := startBrowser(t, exe, shots)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The overview, first: how fast it paints, and its numbers.
	start := time.Now()
	b.run("load the page", chromedp.Navigate("http://"+en.obs.APIAddr()+"/"))
	b.waitJS("the summary", `document.querySelector('#summary [data-stat="nodes"] .value') !== null`, 20*time.Second)
	shown := time.Since(start)
	var paint []struct {
		Name string  `json:"name"`
		MS   float64 `json:"ms"`
	}
	b.evalJSON("paint timings", `JSON.stringify(performance.getEntriesByType('paint').map(e => ({name: e.name, ms: e.startTime})))`, &paint)
	t.Logf("paint timings %+v; the summary was on screen %s after the navigation began (polling, Go's side included)", paint, shown.Round(time.Millisecond))
	b.evalJSON("mark the page", `window.__explorerMark = "kept"; JSON.stringify(true)`, new(bool))

	sum := func() api.ExplorerSummary {
		s, err := en.c.ExplorerSummary(ctx)
		if err != nil {
			t.Fatalf("summary: %v", err)
		}
		return s
	}
	b.matchText("nodes", `#summary [data-stat="nodes"] .value`, func() string { return strconv.Itoa(sum().Nodes) })
	b.matchText("suppliers", `#summary [data-stat="suppliers"] .value`, func() string { return strconv.Itoa(sum().Suppliers) })
	b.matchText("GPUs", `#summary [data-stat="gpus"] .value`, func() string { return strconv.Itoa(sum().GPUs.Total) })
	b.matchText("verified suppliers", `#summary [data-stat="verified"] .value`, func() string { return strconv.Itoa(sum().VerifiedSuppliers) })
	b.matchText("regions", `#summary [data-stat="regions"] .value`, func() string { return strconv.Itoa(len(sum().Regions)) })
	for _, m := range sum().Models {
		b.waitContains("model row "+m.Model, `#models tr[data-model=`+jsString(m.Model)+`]`, money.Micros(m.CheapestMicros).String())
	}
	b.expectTrustLine(en.obs.ID().String())
	b.shot("overview")
	b.checkConsole()

	// Suppliers: every row the API has, with its standing and verdict.
	b.open("#/suppliers", `#suppliers table`)
	rows, err := en.c.ExplorerSuppliers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("the API lists %d suppliers, want 3: %+v", len(rows), rows)
	}
	for _, r := range rows {
		sel := `#suppliers tr[data-peer=` + jsString(r.PeerID) + `]`
		want := []string{r.Region, fmt.Sprintf("%.2f", r.Reputation), fmt.Sprintf("%d / %d", r.GPUsFree, r.GPUsTotal)}
		if r.CheapestMicros > 0 {
			want = append(want, money.Micros(r.CheapestMicros).String())
		}
		if v := r.LastVerdict; v != nil && !v.Passed {
			want = append(want, "failed", v.Reason)
		}
		if !r.Simulated {
			t.Errorf("supplier %s of simulated GPUs is not marked simulated: %+v", r.PeerID, r)
		}
		want = append(want, "simulated GPUs")
		b.waitContains("supplier row "+r.PeerID, sel, want...)
	}
	b.waitContains("the impostor's row", `#suppliers tr.failed[data-peer=`+jsString(en.impostor.ID().String())+`]`, "✗ failed")
	b.shot("suppliers")
	b.checkConsole()

	// The impostor's page: the failure and its reason up top, every
	// verdict with its reason and checked signature.
	imp, err := en.c.ExplorerSupplier(ctx, en.impostor.ID().String())
	if err != nil {
		t.Fatal(err)
	}
	if imp.Supplier.LastVerdict == nil || imp.Supplier.LastVerdict.Passed || imp.Supplier.LastVerdict.Reason == "" {
		t.Fatalf("the API's verdict on the impostor: %+v, want a failure with a reason", imp.Supplier.LastVerdict)
	}
	b.open("#/supplier/"+en.impostor.ID().String(), `#verdicts table`)
	b.waitContains("the impostor's failure", `#failed`, "Failed a challenge", imp.Supplier.LastVerdict.Reason)
	challenges := 0
	for _, a := range imp.Attestations {
		if a.Kind != "challenge" {
			continue
		}
		challenges++
		want := []string{a.Reason}
		if !a.Passed {
			want = append(want, "✗ failed")
		}
		if a.SignatureOK {
			want = append(want, "✓ signed")
		}
		b.waitContains("verdict "+a.ID, `#verdicts tr[data-attestation=`+jsString(a.ID)+`]`, want...)
	}
	if challenges == 0 {
		t.Fatalf("the API has no challenge of the impostor: %+v", imp.Attestations)
	}
	b.waitContains("the impostor's reputation", `#reputation [data-reputation]`, fmt.Sprintf("%.2f", imp.Reputation.Reputation))
	b.waitJS("the uptime panel", uptimeShown(imp.Uptime), 10*time.Second)
	b.shot("supplier-impostor")
	b.checkConsole()

	// The honest supplier's page: vouched for by the observer.
	hon, err := en.c.ExplorerSupplier(ctx, en.honest.ID().String())
	if err != nil {
		t.Fatal(err)
	}
	b.open("#/supplier/"+en.honest.ID().String(), `#verdicts table`)
	for _, v := range hon.VouchedBy {
		b.waitJS("voucher "+v, `document.querySelector('#vouched-by [data-peer=`+jsString(v)+`]') !== null`, 10*time.Second)
	}
	if len(hon.VouchedBy) == 0 {
		t.Errorf("the API says nobody vouched for the honest supplier, want the observer")
	}
	for _, a := range hon.Asks {
		b.waitContains("the honest supplier's ask", `#supplier-asks tr[data-order=`+jsString(a.ID)+`]`, a.Price)
	}
	b.shot("supplier-honest")
	b.checkConsole()

	// The order book: every ask, at its price.
	book, err := en.c.ExplorerBook(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.open("#/book", `#asks table`)
	for _, a := range book.Asks {
		b.waitContains("ask "+a.ID, `#asks tr[data-order=`+jsString(a.ID)+`]`, a.Price, a.Model)
	}
	b.shot("book")
	b.checkConsole()

	// GPUs by model, then a live change: a lease made while the page is
	// open shows up as a trade print, with no reload.
	b.open("#/gpus", `.panel[data-model="t4"]`)
	for _, m := range sum().Models {
		b.waitJS("the panel of "+m.Model, `document.querySelector('.panel[data-model=`+jsString(m.Model)+`]') !== null`, 10*time.Second)
	}
	v, err := en.obs.Jobs().Submit(ctx, job.Request{AllowSimulated: true,
		Spec:   &pb.JobSpec{Argv: stepScript(3, "0.2"), CheckpointEveryS: 1},
		Filter: mustFilter(t, "model=t4"), RentTerms: market.RentTerms{Count: 1, Duration: time.Hour, MaxPrice: money.Unit},
		MinReputation: reputation.DefaultFloor, AllowUnproven: true, ReceiptInterval: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	if v.Supplier != en.honest.ID().String() {
		t.Fatalf("the job went to %s, want the honest supplier %s (the impostor is below the floor)", v.Supplier, en.honest.ID())
	}
	var trade api.TradeView
	eventually(t, 20*time.Second, "the trade print at the observer", func() bool {
		ts, err := en.c.ExplorerTrades(ctx, "t4")
		if err != nil || len(ts) == 0 {
			return false
		}
		trade = ts[len(ts)-1]
		return true
	})
	b.waitContains("the new trade print, live", `.panel[data-model="t4"] tr[data-trade=`+jsString(trade.ID)+`]`, trade.Price, "✓ signed")
	b.waitJS("the t4 price chart", `document.querySelector('.panel[data-model="t4"] canvas') !== null`, 10*time.Second)
	b.expectNoReload()
	b.shot("gpus")
	b.checkConsole()

	// This node: first without the token, then with it from #token=.
	b.open("#/node", `#token form`)
	b.waitContains("the token help", `#token`, "api.token", "#token=")
	b.shot("node-no-token")
	b.evalJSON("give the token", `location.hash = "#token=" + `+jsString(en.token)+`; JSON.stringify(true)`, new(bool))
	b.waitContains("the lease", `#leases tr[data-lease=`+jsString(v.LeaseID)+`]`, "t4", "✓ both signatures checked")
	var where struct {
		Hash  string `json:"hash"`
		Token string `json:"token"`
	}
	b.evalJSON("the address bar", `JSON.stringify({hash: location.hash, token: sessionStorage.getItem("gpumesh.api-token")})`, &where)
	if where.Hash != "#/node" || where.Token != en.token {
		t.Errorf("after #token=: hash %q, stored token %q; want #/node and the token kept in sessionStorage", where.Hash, where.Token)
	}
	eventually(t, 60*time.Second, "the job to finish and settle", func() bool {
		v, err = en.obs.Jobs().Job(v.JobID)
		return err == nil && v.State == job.StateSucceeded && settledEverywhere(v)
	})
	b.waitContains("the settled bill, live", `#receipts tr[data-lease=`+jsString(v.LeaseID)+`]`, "settled", "✓ every signature and sum checked")
	b.waitContains("the job", `#jobs tr[data-job=`+jsString(v.JobID)+`]`, job.StateSucceeded.String())
	b.expectNoReload()
	b.shot("node")
	b.checkConsole()

	// Back to the overview: the trade is counted.
	b.open("#/", `#summary .cards`)
	b.matchText("trades", `#summary [data-stat="trades"] .value`, func() string { return strconv.Itoa(sum().Trades) })
	b.waitContains("the latest trade", `#recent-trades tr[data-trade=`+jsString(trade.ID)+`]`, trade.Price)
	b.expectNoReload()
	b.shot("overview-after-trade")
	b.checkConsole()

	// What the job was and did is the renter's and its supplier's alone:
	// no public answer of either shows it (nor their tokens, data dirs
	// or keys), and every answer matches the OpenAPI document.
	private := map[string]string{"the job's ID": v.JobID, "the job's script": "CHECKPOINT_DIR/step.tmp", "the job's output": "starts at step"}
	for _, n := range []*Node{en.obs, en.honest} {
		checkAnswersMatchOpenAPI(t, n, map[string]string{"{peer}": en.honest.ID().String(), "{id}": v.JobID}, private)
	}
}

// explorerNet is an observer node (no GPUs, the one the browser asks)
// and three suppliers, two of them challenged by the observer.
type explorerNet struct {
	obs, honest, impostor, h100 *Node
	c                           *api.Client // the observer's API
	token                       string
}

func startExplorerNet(t *testing.T) *explorerNet {
	t.Helper()
	cfgs := []Config{
		testConfig(t, "unset", "none", "eu-west", nil),
		sellerConfig(t, "unset", "sim:t4:2", "eu-west", "fixed", []string{"t4=0.20"}, nil),
		sellerConfig(t, "unset", "sim:t4:2", "us-east", "fixed", []string{"t4=0.10"}, nil),
		sellerConfig(t, "unset", "sim:h100-sxm:1", "ap-south", "fixed", []string{"h100-sxm=2.10"}, nil),
	}
	cfgs[2].SimCheat = "wrong=0.2"
	for i := range cfgs {
		cfgs[i].AuditInterval = 0 // only the challenges below
	}
	m := startMarketNet(t, cfgs)
	en := &explorerNet{obs: m.nodes[0], honest: m.nodes[1], impostor: m.nodes[2], h100: m.nodes[3]}
	tok, err := os.ReadFile(filepath.Join(en.obs.cfg.DataDir, api.TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	en.token = strings.TrimSpace(string(tok))
	en.c = api.NewClient(en.obs.APIAddr(), en.token)
	t.Cleanup(en.c.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	eventually(t, 20*time.Second, "the observer knows the three profiles", func() bool {
		ps, _ := en.obs.KnownProfiles()
		return len(ps) >= 3
	})
	if rep, err := en.obs.ChallengePeer(ctx, en.honest.ID(), ""); err != nil || !rep.Passed {
		t.Fatalf("challenge of the honest supplier: %+v, %v", rep, err)
	}
	if rep, err := en.obs.ChallengePeer(ctx, en.impostor.ID(), ""); err != nil || rep.Passed {
		t.Fatalf("challenge of the impostor: %+v, %v; want a failure", rep, err)
	}
	eventually(t, 20*time.Second, "the observer's explorer to list 3 suppliers and the impostor's failure", func() bool {
		rows, err := en.c.ExplorerSuppliers(ctx)
		if err != nil || len(rows) != 3 {
			return false
		}
		for _, r := range rows {
			if r.PeerID == en.impostor.ID().String() {
				return r.LastVerdict != nil && !r.LastVerdict.Passed
			}
		}
		return false
	})
	return en
}

// findChromium is the path of a Chromium or Chrome, or skips the test.
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.Skip(t, testenv.Chromium, "no chromium, chromium-browser or google-chrome on PATH: the Explorer's browser test needs one (apt-get install chromium)")
	return ""
}

// artifactsDir is where the screenshots go: $GPUMESH_ARTIFACTS/explorer,
// or gpumesh-artifacts/explorer in the temporary directory.
func artifactsDir(t *testing.T) string {
	t.Helper()
	root := os.Getenv("GPUMESH_ARTIFACTS")
	if root == "" {
		root = filepath.Join(os.TempDir(), "gpumesh-artifacts")
	}
	dir := filepath.Join(root, "explorer")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browser is a headless Chromium driven over the DevTools protocol, with
// every console message and exception of its page recorded.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string

	mu       sync.Mutex
	problems []string // console errors and exceptions not yet reported
}

func startBrowser(t *testing.T, exe, shots string) *browser {
	t.Helper()
	// A fresh profile, removed at the end with any process still using it.
	profile, err := os.MkdirTemp("", "gpumesh-explorer-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox, // tests run as root
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1440, 1000),
		chromedp.CombinedOutput(&out),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b := &browser{t: t, ctx: ctx, shots: shots}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		if err := chromedp.Cancel(cctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("closing the browser: %v", err)
		}
		ccancel()
		cancel()
		acancel() // waits for the browser process to exit
		if n := killUsing(profile); n > 0 {
			t.Logf("killed %d browser processes left after the browser closed", n)
		}
		os.RemoveAll(profile)
	})
	err = chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			msg := fmt.Sprintf("console.%s: %s", ev.Type, consoleArgs(ev.Args))
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				b.problem(msg)
			} else {
				b.note(msg)
			}
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := "exception: " + d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			b.problem(fmt.Sprintf("%s (%s:%d)", msg, d.URL, d.LineNumber))
		case *log.EventEntryAdded:
			msg := fmt.Sprintf("browser log %s/%s: %s (%s)", ev.Entry.Source, ev.Entry.Level, ev.Entry.Text, ev.Entry.URL)
			if ev.Entry.Level == log.EntryLevelError {
				b.problem(msg)
			} else {
				b.note(msg)
			}
		}
	})
	if err != nil {
		t.Fatalf("start %s: %v\n%s", exe, err, out.String())
	}
	return b
}

func consoleArgs(args []*runtime.RemoteObject) string {
	parts := make([]string, 0, len(args))
	for _, a := range args {
		var s string
		if json.Unmarshal(a.Value, &s) == nil {
			parts = append(parts, s)
		} else if a.Description != "" {
			parts = append(parts, a.Description)
		} else {
			parts = append(parts, string(a.Value))
		}
	}
	return strings.Join(parts, " ")
}

// killUsing kills the processes whose command line names profile as
// their user data directory (Linux; elsewhere it finds none).
func killUsing(profile string) int {
	want := []byte("--user-data-dir=" + profile)
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for arg := range bytes.SplitSeq(cmdline, []byte{0}) {
			if bytes.Equal(arg, want) {
				syscall.Kill(pid, syscall.SIGKILL)
				n++
				break
			}
		}
	}
	return n
}

func (b *browser) problem(msg string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problems = append(b.problems, msg)
}

func (b *browser) note(msg string) { b.t.Log(msg) }

// checkConsole fails the test for each console error or exception since
// the last check.
func (b *browser) checkConsole() {
	b.t.Helper()
	b.mu.Lock()
	ps := b.problems
	b.problems = nil
	b.mu.Unlock()
	for _, p := range ps {
		b.t.Errorf("in the browser: %s", p)
	}
}

// run runs one action, failing the test with what it was for.
func (b *browser) run(what string, a chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, a); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// evalJSON evaluates a JavaScript expression that gives a JSON string
// and decodes it into out.
func (b *browser) evalJSON(what, expr string, out any) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	if err := json.Unmarshal([]byte(s), out); err != nil {
		b.t.Fatalf("%s: %v in %q", what, err, s)
	}
}

// text is the rendered text of the first element sel matches ("" when
// none does).
func (b *browser) text(sel string) string {
	b.t.Helper()
	var s string
	b.evalJSON("the text of "+sel, `JSON.stringify((document.querySelector(`+jsString(sel)+`) || {}).innerText || "")`, &s)
	return s
}

// waitJS waits until a JavaScript condition holds on the page.
func (b *browser) waitJS(what, cond string, limit time.Duration) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, limit+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(limit)))
	if err != nil {
		b.fail(fmt.Sprintf("waiting %s for %s: %v", limit, what, err))
	}
}

// waitContains waits until the element sel matches shows every one of
// want.
func (b *browser) waitContains(what, sel string, want ...string) {
	b.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := b.text(sel)
		missing := ""
		for _, w := range want {
			if !strings.Contains(got, w) {
				missing = w
				break
			}
		}
		if missing == "" && got != "" {
			return
		}
		if time.Now().After(deadline) {
			b.fail(fmt.Sprintf("%s: %s shows %q, want it to show %q", what, sel, got, missing))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// matchText waits until the element sel matches shows exactly what the
// API says (want is asked again on every try: the network moves).
func (b *browser) matchText(what, sel string, want func() string) {
	b.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		w, got := want(), b.text(sel)
		if got == w {
			return
		}
		if time.Now().After(deadline) {
			b.fail(fmt.Sprintf("%s: the page shows %q, the API says %q", what, got, w))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// open goes to a route of the page (no reload) and waits for sel.
func (b *browser) open(route, sel string) {
	b.t.Helper()
	b.evalJSON("go to "+route, `location.hash = `+jsString(route)+`; JSON.stringify(true)`, new(bool))
	b.waitJS(route+" to show "+sel, `document.querySelector(`+jsString(sel)+`) !== null`, 15*time.Second)
}

// expectNoReload checks that the page is the one first loaded: updates
// came by polling, not by reloading.
func (b *browser) expectNoReload() {
	b.t.Helper()
	var mark string
	b.evalJSON("the page's mark", `JSON.stringify(window.__explorerMark || "")`, &mark)
	if mark != "kept" {
		b.t.Errorf("the page was reloaded (its mark is gone)")
	}
}

func (b *browser) expectTrustLine(self string) {
	b.t.Helper()
	b.waitContains("the trust line", `#trust`, "signed records that this node", "verified")
	b.waitJS("the node's ID in the trust line", `document.querySelector('#trust [title=`+jsString(self)+`]') !== null`, 10*time.Second)
}

// shot writes a screenshot of the whole page to the artifacts.
func (b *browser) shot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(b.shots, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	b.t.Logf("screenshot: %s", path)
}

// fail ends the test with a screenshot of how the page looked.
func (b *browser) fail(msg string) {
	b.t.Helper()
	b.shot("failure")
	b.checkConsole()
	b.t.Fatal(msg)
}

// uptimeShown is the condition that the uptime panel shows the chart when
// the API has uptime checks, or says there are none.
func uptimeShown(days []api.UptimeDay) string {
	for _, d := range days {
		if d.Checks > 0 {
			return `document.querySelector('#uptime canvas') !== null`
		}
	}
	return `(document.querySelector('#uptime') || {}).innerText === "No uptime checks in the last 30 days."`
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}
