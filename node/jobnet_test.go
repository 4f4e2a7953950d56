package node

import (
	"os"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/internal/testenv"
	"github.com/gpumesh/gpumesh/node/runtime"
)

// TestJobNetworkErrsNamesEachRuntime: the node's services check and its
// warning name every offered runtime whose jobs lack a network of their
// own, not only the process runtime's, and the node's own reason once.
func TestJobNetworkErrsNamesEachRuntime(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "jobNetworkErr reports a node that is not root before it asks the runtimes")
	}
	bare, err := runtime.New("process", runtime.Options{}) // no Options.Net: not isolated
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{cfg: Config{JobNetwork: true}}
	if err := n.jobNetworkErrs(map[string]runtime.Runtime{"process": bare}); err == nil || !strings.Contains(err.Error(), "runtime process:") {
		t.Fatalf("a process runtime without a job network: %v, want its reason", err)
	}
	off := &Node{cfg: Config{}}
	err = off.jobNetworkErrs(map[string]runtime.Runtime{"process": bare, "other": bare})
	if err == nil || strings.Count(err.Error(), "job_network is off") != 1 {
		t.Fatalf("job_network off: %v, want that said once", err)
	}
	t.Run("container", func(t *testing.T) {
		for _, engine := range []string{"docker", "podman"} {
			rt, err := runtime.New(engine, runtime.Options{})
			if err != nil {
				continue
			}
			err = n.jobNetworkErrs(map[string]runtime.Runtime{"process": bare, engine: rt})
			if err == nil || !strings.Contains(err.Error(), "runtime process:") || !strings.Contains(err.Error(), "runtime "+engine+":") {
				t.Fatalf("process and %s without job networks: %v, want both named", engine, err)
			}
			return
		}
		testenv.Skip(t, testenv.Docker, "no docker or podman engine answers")
	})
}
