package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/gpumesh/gpumesh/market"
)

// Error is a non-2xx answer of the API.
type Error struct {
	Method, Path string
	Status       int
	Message      string   // the body, trimmed and bounded
	Reasons      []string // of a 409: why no supplier matched
}

// Sentinels for errors.Is: an *Error is its status's sentinel.
var (
	ErrUnauthorized = &Error{Status: http.StatusUnauthorized}       // no token, or another node's
	ErrNotFound     = &Error{Status: http.StatusNotFound}           // no such job
	ErrConflict     = &Error{Status: http.StatusConflict}           // no lease made
	ErrUnavailable  = &Error{Status: http.StatusServiceUnavailable} // not started yet
)

// ErrUnreachable is wrapped by errors of calls that reached no node.
var ErrUnreachable = errors.New("node API unreachable")

func (e *Error) Error() string {
	s := fmt.Sprintf("node API %s %s: %d %s", e.Method, e.Path, e.Status, http.StatusText(e.Status))
	if e.Message != "" {
		s += ": " + e.Message
	}
	if len(e.Reasons) > 0 {
		s += " (" + strings.Join(e.Reasons, "; ") + ")"
	}
	return s
}

// Is reports whether target is the sentinel of e's status.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Method == "" && t.Message == "" && t.Status == e.Status
}

// Unwrap makes a 409 of POST /api/v1/jobs or /api/v1/leases (rent) a
// *market.NoMatch for errors.As, with the reasons the node gave.
func (e *Error) Unwrap() error {
	if e.Status == http.StatusConflict && e.Method == http.MethodPost && (e.Path == PathJobs || e.Path == PathLeases) {
		return &market.NoMatch{Reasons: e.Reasons}
	}
	return nil
}
