package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/testnet"
)

// The Explorer's load time on a testnet, in headless Chromium: the first
// contentful paint of node 0's suppliers page and the moment every
// supplier its API lists is on screen, beside the first contentful paint
// of a minimal page in the same browser, the same run (each the median of
// explorerLoads cold loads, the cache off).

const explorerLoads = 3

// errNoBrowser: no Chromium to measure with.
var errNoBrowser = errors.New("no chromium, chromium-browser or google-chrome on PATH")

// explorerFigures are the medians of the loads.
type explorerFigures struct {
	Suppliers    int
	FirstPaint   time.Duration // first contentful paint of the suppliers page
	AllSuppliers time.Duration // every supplier row on screen, from navigation start
	BasePaint    time.Duration // first contentful paint of a minimal page
}

// measureExplorer loads node 0's Explorer on st explorerLoads times.
func measureExplorer(ctx context.Context, st *testnet.State) (explorerFigures, error) {
	var f explorerFigures
	exe := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			exe = p
			break
		}
	}
	if exe == "" {
		return f, errNoBrowser
	}
	c, err := api.ClientForDataDir(st.Nodes[0].API, st.Nodes[0].DataDir)
	if err != nil {
		return f, err
	}
	defer c.Close()
	rows, err := c.ExplorerSuppliers(ctx)
	if err != nil {
		return f, err
	}
	f.Suppliers = len(rows)

	// The baseline: a minimal page, from a data: URL.
	const minimal = "data:text/html,<!doctype html><title>baseline</title><p>baseline</p>"

	profile, err := os.MkdirTemp("", "gpumesh-bench-chromium-")
	if err != nil {
		return f, err
	}
	defer os.RemoveAll(profile)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.Headless,
		chromedp.NoSandbox, chromedp.UserDataDir(profile), chromedp.WindowSize(1440, 1000))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	tctx, tcancel := context.WithTimeout(bctx, 3*time.Minute)
	defer tcancel()
	// Every new document records when all the suppliers are on screen.
	watch := fmt.Sprintf(`window.__gm = {};
new MutationObserver(() => {
  if (!window.__gm.rows && document.querySelectorAll('#suppliers a[data-peer]').length >= %d) window.__gm.rows = performance.now();
}).observe(document, {subtree: true, childList: true});`, f.Suppliers)
	err = chromedp.Do(tctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if _, err := cdp.Call(ctx, t, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		if _, err := cdp.Call(ctx, t, network.SetCacheDisabled, network.SetCacheDisabledParams{CacheDisabled: true}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, t, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: watch})
		return err
	}))
	if err != nil {
		return f, fmt.Errorf("start %s: %w", exe, err)
	}
	fcp := `(() => { const e = performance.getEntriesByName('first-contentful-paint')[0]; return e ? e.startTime : 0 })()`
	poll := func(expr string, limit time.Duration) (float64, error) {
		return retryContext(tctx, limit, func() (float64, error) {
			return chromedp.Run(tctx, chromedp.Poll[float64](expr, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(limit)))
		})
	}
	var paints, alls, bases []time.Duration
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	for range explorerLoads {
		if err := chromedp.Do(tctx, chromedp.Navigate("about:blank"), chromedp.Navigate("http://"+st.Nodes[0].API+"/#/suppliers")); err != nil {
			return f, fmt.Errorf("load the Explorer: %w", err)
		}
		all, err := poll(`window.__gm && window.__gm.rows`, time.Minute)
		if err != nil {
			return f, fmt.Errorf("the Explorer's %d suppliers on screen: %w", f.Suppliers, err)
		}
		p, err := retryContext(tctx, 10*time.Second, func() (float64, error) { return chromedp.Run(tctx, chromedp.Evaluate[float64](fcp)) })
		if err != nil {
			return f, err
		}
		if err := chromedp.Do(tctx, chromedp.Navigate(minimal)); err != nil {
			return f, fmt.Errorf("load the minimal page: %w", err)
		}
		base, err := poll(fcp, 30*time.Second)
		if err != nil {
			return f, fmt.Errorf("the minimal page's paint: %w", err)
		}
		paints, alls, bases = append(paints, ms(p)), append(alls, ms(all)), append(bases, ms(base))
	}
	median := func(ds []time.Duration) time.Duration { slices.Sort(ds); return ds[len(ds)/2] }
	f.FirstPaint, f.AllSuppliers, f.BasePaint = median(paints), median(alls), median(bases)
	return f, nil
}

// retryContext runs eval again while it fails only because the page's
// JavaScript context it ran in is gone: chromedp can hand a command the
// context of the document a navigation just replaced, and Chromium then
// answers "Cannot find context with specified id" (a 50-node bench run
// lost its Explorer figure so). Other errors, and the limit, end it.
func retryContext(ctx context.Context, limit time.Duration, eval func() (float64, error)) (float64, error) {
	deadline := time.Now().Add(limit)
	for {
		v, err := eval()
		if err == nil || !staleContext(err) || time.Now().After(deadline) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// staleContext tells whether err is Chromium's answer to a command sent
// to a JavaScript context that a navigation destroyed.
func staleContext(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Cannot find context with specified id") ||
		strings.Contains(msg, "Execution context was destroyed") ||
		strings.Contains(msg, "Cannot find default execution context")
}

// explorerRow judges the Explorer's load on an n-node testnet: the goal
// (first paint under 1 s) is for 50 suppliers; it is reported at other
// sizes.
func explorerRow(n int, f explorerFigures, err error) Row {
	figure := fmt.Sprintf("Explorer first paint, suppliers page of node 0 (%d nodes)", n)
	if err != nil {
		return Row{Figure: figure, Value: "not measured: " + err.Error(), Goal: "< 1 s with 50 suppliers"}
	}
	r := Row{
		Figure: fmt.Sprintf("Explorer first paint, suppliers page of node 0 (%d nodes, %d suppliers; all on screen at %s)", n, f.Suppliers, msStr(f.AllSuppliers)),
		Value:  msStr(f.FirstPaint), Baseline: msStr(f.BasePaint) + " a minimal page, same browser",
		Ratio: float64(f.FirstPaint) / float64(max(f.BasePaint, time.Microsecond)), Goal: "< 1 s with 50 suppliers",
	}
	if f.Suppliers >= 50 || n == 50 {
		r.Met = met(f.FirstPaint < time.Second && f.AllSuppliers < time.Second)
	}
	return r
}
