package sim

import (
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/internal/leakcheck"
)

// TestMain checks for leaks with more patience than the default: the
// mocknet streams of a hundred closed hosts take a while to wind down on
// a loaded machine.
func TestMain(m *testing.M) {
	leakcheck.MainWithin(m, 30*time.Second)
}
