package api_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumesh/gpumesh/node/api"
)

// requestCounts reads gpumesh_api_requests_total by "route code", and the
// number of observations of the duration histogram by route.
func requestCounts(t *testing.T, reg prometheus.Gatherer) (counts map[string]float64, timed map[string]uint64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts, timed = map[string]float64{}, map[string]uint64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			switch mf.GetName() {
			case "gpumesh_api_requests_total":
				counts[l["route"]+" "+l["code"]] = m.GetCounter().GetValue()
			case "gpumesh_api_request_duration_seconds":
				timed[l["route"]] = m.GetHistogram().GetSampleCount()
			}
		}
	}
	return counts, timed
}

// TestInstrumentLabelsByPattern: requests are counted under the
// ServeMux pattern that served them and their status, whatever their
// path; one refused before routing (no token) or not routed (404, 405)
// is counted as unmatched; a handler that flushes still can through the
// wrapper.
func TestInstrumentLabelsByPattern(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") == "gone" {
			http.Error(w, "no such job", http.StatusNotFound)
			return
		}
		io.WriteString(w, "job "+r.PathValue("id"))
	})
	mux.HandleFunc("GET /follow", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "a line\n")
		f, ok := w.(http.Flusher)
		if !ok {
			t.Error("the wrapped writer cannot flush")
			return
		}
		f.Flush()
	})
	reg := prometheus.NewRegistry()
	h, err := api.Instrument(api.RequireToken("secret", mux), reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.Instrument(mux, reg); err == nil {
		t.Fatal("a second Instrument registered in one registry")
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	do := func(method, path, token string) int {
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for i, c := range []struct {
		method, path, token string
		want                int
	}{
		{"GET", "/api/v1/jobs/a1b2c3", "secret", 200},
		{"GET", "/api/v1/jobs/d4e5f6", "secret", 200},
		{"GET", "/api/v1/jobs/gone", "secret", 404},
		{"GET", "/api/v1/jobs/a1b2c3", "", 401},
		{"GET", "/no/such/route", "secret", 404},
		{"POST", "/api/v1/jobs/a1b2c3", "secret", 405},
		{"GET", "/follow", "secret", 200},
	} {
		if got := do(c.method, c.path, c.token); got != c.want {
			t.Fatalf("request %d, %s %s: %d, want %d", i, c.method, c.path, got, c.want)
		}
	}
	counts, timed := requestCounts(t, reg)
	want := map[string]float64{
		"GET /api/v1/jobs/{id} 200": 2,
		"GET /api/v1/jobs/{id} 404": 1,
		api.UnmatchedRoute + " 401": 1,
		api.UnmatchedRoute + " 404": 1,
		api.UnmatchedRoute + " 405": 1,
		"GET /follow 200":           1,
	}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("requests %q = %v, want %v", k, counts[k], v)
		}
	}
	if len(counts) != len(want) {
		t.Errorf("request series %v, want exactly %v", counts, want)
	}
	for k := range counts {
		if strings.Contains(k, "a1b2c3") || strings.Contains(k, "/no/such") {
			t.Errorf("a path became a label: %q", k)
		}
	}
	if timed["GET /api/v1/jobs/{id}"] != 3 || timed[api.UnmatchedRoute] != 3 {
		t.Errorf("durations observed: %v", timed)
	}
}
