package job

import (
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/gpumesh/gpumesh/verify/inventory"
)

// DeviceNodes returns the ExecutorConfig.GPUDevices of a supplier whose
// GPUs are gpus: the device node of each leased GPU, devDir/nvidia<minor>
// (NVML's minor number), for the runtime to confine the job to exactly
// those. A simulated GPU has no node. A GPU the supplier does not have,
// or a real one whose minor number is unknown, is an error: the job does
// not start, rather than start with no GPU or with every GPU.
func DeviceNodes(gpus []inventory.GPU, devDir string) func(uuids []string) ([]string, error) {
	byUUID := make(map[string]inventory.GPU, len(gpus))
	for _, g := range gpus {
		byUUID[g.UUID] = g
	}
	return func(uuids []string) ([]string, error) {
		var nodes []string
		for _, u := range uuids {
			g, ok := byUUID[u]
			switch {
			case !ok:
				return nil, fmt.Errorf("gpu %s: not a GPU of this supplier", u)
			case g.Simulated:
				continue
			case g.DeviceMinor < 0:
				return nil, fmt.Errorf("gpu %s: its device node is unknown (NVML gave no minor number), so its job could not be confined to it", u)
			}
			nodes = append(nodes, filepath.Join(devDir, "nvidia"+strconv.Itoa(g.DeviceMinor)))
		}
		return nodes, nil
	}
}
