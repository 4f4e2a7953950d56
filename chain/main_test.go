package chain_test

import (
	"os"
	"testing"

	jobruntime "github.com/gpumesh/gpumesh/node/runtime"
)

// TestMain lets the test binary act as the job sandbox shim: the jobs
// that TestChainSettlementEndToEnd's nodes start re-execute it.
func TestMain(m *testing.M) {
	jobruntime.MaybeShim()
	os.Exit(m.Run())
}
