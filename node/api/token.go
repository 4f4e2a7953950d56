package api

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// TokenFile, in a node's data dir, holds the bearer token of its API.
const TokenFile = "api.token"

// AddrFile, in a node's data dir, holds the host:port its API listens on,
// written once it listens: how a supervisor finds an API started on a
// kernel-chosen port (--api 127.0.0.1:0).
const AddrFile = "api.addr"

// EnsureToken returns the API token of the data dir, creating it (mode
// 0600) on first use, and making an existing one readable by its owner
// only.
func EnsureToken(dataDir string) (string, error) {
	path := filepath.Join(dataDir, TokenFile)
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= 32 {
		// The token is the API's only guard: whoever reads it drives
		// the node, so it is kept readable by its owner alone.
		if err := os.Chmod(path, 0o600); err != nil {
			return "", fmt.Errorf("api: make %s readable by its owner only: %w", path, err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("api: draw a token: %w", err)
	}
	tok := hex.EncodeToString(raw[:])
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("api: write %s: %w", path, err)
	}
	return tok, nil
}

// ReadToken reads the API token of a data dir, for a client.
func ReadToken(dataDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, TokenFile))
	if err != nil {
		return "", fmt.Errorf("read the node's API token: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// RequireToken serves h only to requests that carry token as a bearer
// token; the Public requests alone are open: GET /healthz, so that
// supervisors and the testnet can check a node is up, and the Explorer's
// page and read routes, which show only what the network publishes. Loopback is no trust boundary: every local
// user, and every job a supplier runs (they share its network until jobs
// get a network of their own), can connect to it, and none of them can
// read the token (mode 0600, hidden from jobs).
func RequireToken(token string, h http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if Public(r) {
			h.ServeHTTP(w, r)
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			http.Error(w, "a bearer token (DATA/"+TokenFile+") is required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
