package metrics

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines as internal/leakcheck does; a
// leaf's tests, like its code, import nothing of the module.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
