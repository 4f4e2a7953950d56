//go:build !(linux && cgo)

package cuda

import (
	"errors"
	"strings"
	"testing"
)

// TestOpenElsewhere: without Linux and cgo there is no driver to load,
// and Open says so.
func TestOpenElsewhere(t *testing.T) {
	_, err := Open(Options{})
	if !errors.Is(err, ErrNoCUDA) || !strings.Contains(err.Error(), "no CUDA on this platform") {
		t.Fatalf("Open: %v, want ErrNoCUDA: no CUDA on this platform", err)
	}
}
