package chaos

import (
	"testing"

	"github.com/gpumesh/gpumesh/internal/leakcheck"
)

func TestMain(m *testing.M) {
	if FloodMain() { // this binary, started again as a chaos run's flooder
		return
	}
	leakcheck.Main(m)
}
