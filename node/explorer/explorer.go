// Package explorer serves the Explorer, the web page every node serves on
// its API address: a transparency view of the network (suppliers, GPUs,
// prices, the order book, verdicts and uptime) drawn from the node's open
// explorer routes, which answer only from signed records the node checked.
//
// The page is a small TypeScript program in web/, bundled by esbuild into
// dist/ (index.html and content-hashed files under dist/assets). dist/ is
// committed and embedded here, so building gpumesh needs no npm; `make
// explorer` rebuilds it. Nothing is loaded from anywhere but the node.
package explorer

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"regexp"
	"strings"
	"time"
)

//go:embed dist
var dist embed.FS

// AssetsPrefix is the path under which the page's compiled assets are
// served; the page itself is served at "/".
const AssetsPrefix = "/assets/"

// The page's Content-Security-Policy: its own script and styles, requests
// to this node only, no frames, nothing else.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// hashedName matches the content-hashed names esbuild gives assets
// (app-XLT5GVUX.js): they never change, so browsers may keep them.
var hashedName = regexp.MustCompile(`-[A-Z0-9]{8}\.[a-z0-9]+$`)

// file is one embedded file, ready to serve.
type file struct {
	name  string
	data  []byte
	ctype string
	cache string
	etag  string
}

type handler struct {
	index  file
	assets map[string]file // by name under assets/
}

// Handler serves the Explorer: index.html at exactly "/" (revalidated on
// every load) and the compiled assets under AssetsPrefix (kept for a year,
// as their names change with their content). It answers GET and HEAD; any
// other path is a 404.
func Handler() http.Handler {
	h, err := newHandler(dist)
	if err != nil {
		// dist is compiled in: a broken one is a build error.
		panic(err)
	}
	return h
}

func newHandler(fsys fs.FS) (*handler, error) {
	root, err := fs.Sub(fsys, "dist")
	if err != nil {
		return nil, fmt.Errorf("explorer: %w", err)
	}
	index, err := load(root, "index.html")
	if err != nil {
		return nil, err
	}
	index.cache = "no-cache"
	h := &handler{index: index, assets: map[string]file{}}
	err = fs.WalkDir(root, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := load(root, p)
		if err != nil {
			return err
		}
		h.assets[strings.TrimPrefix(p, "assets/")] = f
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("explorer: assets: %w", err)
	}
	return h, nil
}

func load(fsys fs.FS, name string) (file, error) {
	data, err := fs.ReadFile(fsys, name)
	if err != nil {
		return file{}, fmt.Errorf("explorer: %w (run `make explorer`)", err)
	}
	sum := sha256.Sum256(data)
	f := file{
		name:  path.Base(name),
		data:  data,
		ctype: contentType(name),
		cache: "no-cache",
		etag:  `"` + hex.EncodeToString(sum[:12]) + `"`,
	}
	if hashedName.MatchString(name) {
		f.cache = "public, max-age=31536000, immutable"
	}
	return f, nil
}

// contentType is a file's type by its extension, with the common web
// types fixed here rather than taken from the machine's MIME tables.
func contentType(name string) string {
	switch ext := path.Ext(name); ext {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js", ".mjs":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".json", ".map":
		return "application/json"
	case ".svg":
		return "image/svg+xml"
	case ".png":
		return "image/png"
	case ".woff2":
		return "font/woff2"
	case ".txt":
		return "text/plain; charset=utf-8"
	default:
		if t := mime.TypeByExtension(ext); t != "" {
			return t
		}
		return "application/octet-stream"
	}
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var f file
	switch p := r.URL.Path; {
	case p == "/":
		f = h.index
		w.Header().Set("Content-Security-Policy", contentSecurityPolicy)
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("X-Frame-Options", "DENY")
	case strings.HasPrefix(p, AssetsPrefix):
		var ok bool
		if f, ok = h.assets[strings.TrimPrefix(p, AssetsPrefix)]; !ok {
			http.NotFound(w, r)
			return
		}
	default:
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", f.ctype)
	hd.Set("Cache-Control", f.cache)
	hd.Set("ETag", f.etag)
	hd.Set("X-Content-Type-Options", "nosniff")
	// ServeContent answers If-None-Match (304), ranges and HEAD.
	http.ServeContent(w, r, f.name, time.Time{}, bytes.NewReader(f.data))
}
