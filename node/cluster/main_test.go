package cluster

import (
	"testing"

	"github.com/gpumesh/gpumesh/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }
