package node

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpumesh/gpumesh/node/api"
	explorerui "github.com/gpumesh/gpumesh/node/explorer"
)

// startAPI serves the node's HTTP API (package api) on cfg.API unless it
// is "off". The listener is bound before New returns, so a port conflict
// fails start-up.
func (n *Node) startAPI() error {
	if n.cfg.API == "" || n.cfg.API == "off" {
		return nil
	}
	ln, err := net.Listen("tcp", n.cfg.API)
	if err != nil {
		return fmt.Errorf("node: api: listen on %s: %w (pick another --api address, or --api off)", n.cfg.API, err)
	}
	if host, _, _ := net.SplitHostPort(ln.Addr().String()); !net.ParseIP(host).IsLoopback() {
		n.log.Warn("the API listens beyond loopback", "addr", ln.Addr())
	}
	token, err := api.EnsureToken(n.cfg.DataDir)
	if err != nil {
		ln.Close()
		return fmt.Errorf("node: %w", err)
	}
	if err := writeAtomic(filepath.Join(n.cfg.DataDir, api.AddrFile), []byte(ln.Addr().String()+"\n")); err != nil {
		ln.Close()
		return fmt.Errorf("node: api: record the address: %w", err)
	}
	b := &apiBackend{n: n, started: n.now()}
	h := api.NewHandler(b, token,
		api.WithMetrics(promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{})),
		api.WithExplorer(newExplorer(n, b), explorerui.Handler()))
	// Requests are counted by route pattern and status (api.Instrument).
	h, err = api.Instrument(h, n.reg)
	if err != nil {
		ln.Close()
		return fmt.Errorf("node: %w", err)
	}
	n.api = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	n.apiLn = ln
	n.goLoop(func() {
		if err := n.api.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("api stopped", "err", err)
		}
	})
	return nil
}

// writeAtomic writes b to path (mode 0600) through a temporary file and a
// rename, so that a reader never sees it half written.
func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// APIAddr is the address the API listens on, or "" when it is off.
func (n *Node) APIAddr() string {
	if n.apiLn == nil {
		return ""
	}
	return n.apiLn.Addr().String()
}
