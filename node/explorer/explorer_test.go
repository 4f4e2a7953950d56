package explorer

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, path string, hdr ...string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, res *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// refs are the src and href values of index.html.
var refs = regexp.MustCompile(`(?:src|href)="([^"]*)"`)

func TestHandlerServesPageAndAssets(t *testing.T) {
	h := Handler()
	res := get(t, h, http.MethodGet, "/")
	page := body(t, res)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /: status %d, want 200", res.StatusCode)
	}
	for k, want := range map[string]string{
		"Content-Type":           "text/html; charset=utf-8",
		"Cache-Control":          "no-cache",
		"X-Content-Type-Options": "nosniff",
	} {
		if got := res.Header.Get(k); got != want {
			t.Errorf("GET /: %s = %q, want %q", k, got, want)
		}
	}
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("GET /: Content-Security-Policy = %q, want scripts and requests to this node only", csp)
	}

	types := map[string]string{".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
	seen := map[string]bool{}
	for _, m := range refs.FindAllStringSubmatch(page, -1) {
		ref := m[1]
		if strings.HasPrefix(ref, "#") || strings.HasPrefix(ref, "data:") {
			continue
		}
		if !strings.HasPrefix(ref, AssetsPrefix) {
			t.Errorf("index.html refers to %q: everything must come from %s on this node", ref, AssetsPrefix)
			continue
		}
		res := get(t, h, http.MethodGet, ref)
		data := body(t, res)
		if res.StatusCode != http.StatusOK || len(data) == 0 {
			t.Errorf("GET %s: status %d, %d bytes; want 200 with a body", ref, res.StatusCode, len(data))
			continue
		}
		ext := ref[strings.LastIndex(ref, "."):]
		seen[ext] = true
		if got, want := res.Header.Get("Content-Type"), types[ext]; got != want {
			t.Errorf("GET %s: Content-Type = %q, want %q", ref, got, want)
		}
		if got, want := res.Header.Get("Cache-Control"), "public, max-age=31536000, immutable"; got != want {
			t.Errorf("GET %s: Cache-Control = %q, want %q (its name carries its hash)", ref, got, want)
		}
		for _, far := range []string{"url(http", "url(//", "@import", "fonts.googleapis"} {
			if strings.Contains(data, far) {
				t.Errorf("%s loads something from elsewhere (%s)", ref, far)
			}
		}
		// a second load revalidates to a 304
		res = get(t, h, http.MethodGet, ref, "If-None-Match", res.Header.Get("ETag"))
		if res.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with its ETag: status %d, want 304", ref, res.StatusCode)
		}
	}
	if !seen[".js"] || !seen[".css"] {
		t.Errorf("index.html links assets %v, want a script and a stylesheet", seen)
	}
}

func TestHandlerRefuses(t *testing.T) {
	h := Handler()
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/index.html", http.StatusNotFound},
		{http.MethodGet, "/nope", http.StatusNotFound},
		{http.MethodGet, "/assets/", http.StatusNotFound},
		{http.MethodGet, "/assets/nope.js", http.StatusNotFound},
		{http.MethodGet, "/assets/../index.html", http.StatusNotFound},
		{http.MethodPost, "/", http.StatusMethodNotAllowed},
		{http.MethodHead, "/", http.StatusOK},
	} {
		if got := get(t, h, tc.method, tc.path).StatusCode; got != tc.want {
			t.Errorf("%s %s: status %d, want %d", tc.method, tc.path, got, tc.want)
		}
	}
}
