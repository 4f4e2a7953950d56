package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/openapi"
)

// TestExplorerAPI: on a network of an auditor, an honest supplier and an
// impostor, after the auditor challenges both and rents from the honest
// one, the auditor's Explorer routes answer without the token and show
// what happened: both suppliers, the impostor's failed verdict with its
// reason, the honest one vouched for by the auditor, the trade print of
// the lease with its signature checked. Every GET route's answer (the
// token ones with the token) matches the OpenAPI document's schema, and
// no public answer holds the API token, the node's data dir or its key.
func TestExplorerAPI(t *testing.T) {
	m := startImpostorNet(t, "us-east")
	auditor, honest, impostor := m.nodes[0], m.nodes[1], m.nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if rep, err := auditor.ChallengePeer(ctx, honest.ID(), ""); err != nil || !rep.Passed {
		t.Fatalf("honest supplier: %+v, %v", rep, err)
	}
	rep, err := auditor.ChallengePeer(ctx, impostor.ID(), "")
	if err != nil || rep.Passed {
		t.Fatalf("impostor: %+v, %v", rep, err)
	}
	l, err := m.rent(t, "model=t4", 1, "1")
	if err != nil || l.Supplier != honest.ID() {
		t.Fatalf("rent: lease from %s, err %v; want the honest supplier", supplierOf(l), err)
	}

	base := "http://" + auditor.APIAddr()
	getJSON := func(path string, out any) int {
		t.Helper()
		resp, err := http.Get(base + path) // no token
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK && out != nil {
			if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
		}
		return resp.StatusCode
	}
	eventually(t, 20*time.Second, "the lease's trade print in the auditor's Explorer", func() bool {
		var trades []api.TradeView
		getJSON(api.PathExplorerTrades+"?model=t4", &trades)
		return len(trades) == 1 && trades[0].ID == l.ID.Short() && trades[0].Supplier == honest.ID().String() && trades[0].SignatureOK
	})
	var rows []api.SupplierRow
	if code := getJSON(api.PathExplorerSuppliers, &rows); code != http.StatusOK {
		t.Fatalf("suppliers: %d", code)
	}
	byID := map[string]api.SupplierRow{}
	for _, r := range rows {
		byID[r.PeerID] = r
	}
	h, imp := byID[honest.ID().String()], byID[impostor.ID().String()]
	if h.LastVerdict == nil || !h.LastVerdict.Passed || h.LeasesServed != 1 || h.GPUsTotal != 2 || h.Region != "us-east" || !h.Simulated {
		t.Errorf("honest supplier's row: %+v", h)
	}
	if imp.LastVerdict == nil || imp.LastVerdict.Passed || !strings.Contains(imp.LastVerdict.Reason, "differs") || imp.LastVerdict.Challenger != auditor.ID().String() {
		t.Errorf("impostor's row: %+v (verdict %+v)", imp, imp.LastVerdict)
	}
	var sd api.SupplierDetail
	if code := getJSON(strings.Replace(api.PathExplorerSupplier, "{peer}", impostor.ID().String(), 1), &sd); code != http.StatusOK {
		t.Fatalf("impostor's page: %d", code)
	}
	failed := slices.IndexFunc(sd.Attestations, func(a api.AttestationView) bool {
		return a.Kind == "challenge" && !a.Passed && strings.Contains(a.Reason, "differs") && a.SignatureOK
	})
	if failed < 0 || len(sd.Uptime) != 30 || len(sd.VouchedBy) != 0 || len(sd.Asks) != 1 {
		t.Errorf("impostor's page: attestations %+v, %d uptime days, vouched by %v, asks %v", sd.Attestations, len(sd.Uptime), sd.VouchedBy, sd.Asks)
	}
	if code := getJSON(strings.Replace(api.PathExplorerSupplier, "{peer}", honest.ID().String(), 1), &sd); code != http.StatusOK ||
		!slices.Contains(sd.VouchedBy, auditor.ID().String()) || len(sd.Trades) != 1 || sd.Reputation.Passes == 0 {
		t.Errorf("honest supplier's page (%d): vouched by %v, trades %+v, reputation %+v", code, sd.VouchedBy, sd.Trades, sd.Reputation)
	}
	var sum api.ExplorerSummary
	getJSON(api.PathExplorerSummary, &sum)
	if sum.Nodes != 3 || sum.Suppliers != 2 || sum.GPUs.Total != 4 || sum.Trades != 1 || sum.Attestations < 2 || len(sum.Regions) != 2 {
		t.Errorf("summary: %+v", sum)
	}
	if i := slices.IndexFunc(sum.Models, func(ms api.ModelSummary) bool { return ms.Model == "t4" }); i < 0 || sum.Models[i].Suppliers != 2 || sum.Models[i].Trades != 1 {
		t.Errorf("summary's models: %+v", sum.Models)
	}
	if code := getJSON(strings.Replace(api.PathExplorerSupplier, "{peer}", auditor.ID().String(), 1), nil); code != http.StatusNotFound {
		t.Errorf("a node that sells nothing: %d, want 404", code)
	}
	if code := getJSON(strings.Replace(api.PathExplorerSupplier, "{peer}", "not-a-peer", 1), nil); code != http.StatusBadRequest {
		t.Errorf("a bad peer ID: %d, want 400", code)
	}
	if code := getJSON(api.PathLeases, nil); code != http.StatusUnauthorized {
		t.Errorf("leases without the token: %d, want 401", code)
	}
	checkAnswersMatchOpenAPI(t, auditor, map[string]string{"{peer}": impostor.ID().String(), "{id}": "none"}, nil)
}

// checkAnswersMatchOpenAPI calls every GET route of the OpenAPI document
// on n (with the token where it needs one) and checks each JSON answer
// against the document's schema; the public ones must hold nothing
// private: not the token, the data dir, the node's key, nor any of
// private (what each string is, by the string).
func checkAnswersMatchOpenAPI(t *testing.T, n *Node, fill map[string]string, private map[string]string) {
	t.Helper()
	doc, err := openapi.Document()
	if err != nil {
		t.Fatal(err)
	}
	doc.Servers = openapi3.Servers{{URL: "http://" + n.APIAddr()}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	token, err := api.ReadToken(n.cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	keyBytes, err := n.key.Raw()
	if err != nil {
		t.Fatal(err)
	}
	// The data dir by its whole path: test nodes' dirs are named n0, n1
	// ..., which a peer ID or a signature in an answer holds by chance.
	secrets := map[string]string{"the API token": token, "the data dir": n.cfg.DataDir, "the key": fmt.Sprintf("%x", keyBytes[:16])}
	maps.Copy(secrets, private)
	checked := 0
	for path, item := range doc.Paths.Map() {
		op := item.Get
		if op == nil || path == api.PathJobLogs || path == api.PathJob {
			continue // not a JSON list; a job needs one
		}
		url := path
		for k, v := range fill {
			url = strings.ReplaceAll(url, k, v)
		}
		req, err := http.NewRequest(http.MethodGet, "http://"+n.APIAddr()+url, nil)
		if err != nil {
			t.Fatal(err)
		}
		public := op.Security != nil && len(*op.Security) == 0
		if !public {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %s: %s", url, resp.Status, body)
			continue
		}
		if public {
			for what, s := range secrets {
				if bytes.Contains(body, []byte(s)) {
					t.Errorf("GET %s (public) shows %s", url, what)
				}
			}
		}
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || path == api.PathOpenAPI {
			continue
		}
		route, params, err := router.FindRoute(req)
		if err != nil {
			t.Fatalf("GET %s: no route in the document: %v", url, err)
		}
		in := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
				Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}},
			Status: resp.StatusCode, Header: resp.Header, Options: &openapi3filter.Options{MultiError: true},
		}
		in.SetBodyBytes(body)
		if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
			t.Errorf("GET %s: the answer does not match the document: %v", url, err)
		}
		checked++
	}
	t.Logf("%d answers checked", checked)
	if checked < 15 {
		t.Errorf("only %d answers checked against the document", checked)
	}
}
