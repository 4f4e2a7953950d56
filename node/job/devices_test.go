package job

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpumesh/gpumesh/internal/testenv"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/verify/inventory"
)

func TestDeviceNodes(t *testing.T) {
	gpus := []inventory.GPU{
		{UUID: "GPU-a", DeviceMinor: 0},
		{UUID: "GPU-b", DeviceMinor: 3},
		{UUID: "GPU-sim-c", DeviceMinor: -1, Simulated: true},
		{UUID: "GPU-d", DeviceMinor: -1},
	}
	nodes := DeviceNodes(gpus, "/dev")
	for _, tc := range []struct {
		uuids   []string
		want    []string
		wantErr string
	}{
		{uuids: nil, want: nil},
		{uuids: []string{"GPU-b"}, want: []string{"/dev/nvidia3"}},
		{uuids: []string{"GPU-b", "GPU-a"}, want: []string{"/dev/nvidia3", "/dev/nvidia0"}},
		{uuids: []string{"GPU-sim-c"}, want: nil},
		{uuids: []string{"GPU-a", "GPU-d"}, wantErr: "GPU-d: its device node is unknown"},
		{uuids: []string{"GPU-x"}, wantErr: "GPU-x: not a GPU of this supplier"},
	} {
		got, err := nodes(tc.uuids)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("DeviceNodes(%q) = %q, %v; want an error with %q", tc.uuids, got, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || !slices.Equal(got, tc.want)):
			t.Errorf("DeviceNodes(%q) = %q, %v; want %q", tc.uuids, got, err, tc.want)
		}
	}
}

// TestExecutorConfinesJobToItsGPUs: a supplier whose leased GPU has a
// device node starts the job with that node, and only it, in its /dev;
// one whose real GPU has no known node refuses to start the job at all.
func TestExecutorConfinesJobToItsGPUs(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "needs root, to make a device node")
	}
	devDir := t.TempDir()
	// NVIDIA's major, minor 5: no driver backs it here, the job only
	// lists it.
	if err := unix.Mknod(filepath.Join(devDir, "nvidia5"), unix.S_IFCHR|0o666, int(unix.Mkdev(195, 5))); err != nil {
		t.Fatal(err)
	}
	m := newMeshWith(t, 2, nil, func(c *ExecutorConfig) {
		gpus := []inventory.GPU{{UUID: "GPU-test-1", DeviceMinor: 5}, {UUID: "GPU-test-2", DeviceMinor: -1}}
		c.GPUDevices = DeviceNodes(gpus, devDir)
	})
	spec, err := EncodeSpec(&pb.JobSpec{JobId: NewJobID(), Argv: []string{"sh", "-c", "ls -A /dev | tr '\\n' ' ' > devs; exec sleep 600"}, Gpus: 1})
	if err != nil {
		t.Fatal(err)
	}
	terms := market.Terms{JobSpecHash: spec.Hash[:], ReceiptInterval: 500 * time.Millisecond}

	s := m.sups[0]
	l, err := m.lease(s, 1, terms)
	if err != nil {
		t.Fatal(err)
	}
	st, w := m.rawSession(m.renter, s, startHello(l, spec, 1), spec.Raw)
	defer st.Reset()
	if w.Refused != "" {
		t.Fatalf("start with GPU-test-1 (node nvidia5): refused %q", w.Refused)
	}
	devs := filepath.Join(s.exec.cfg.DataDir, "jobs", l.ID.String(), "1", "work", "devs")
	var got []byte
	eventually(t, time.Minute, "the job's list of /dev", func() bool {
		got, _ = os.ReadFile(devs)
		return len(got) > 0
	})
	names := strings.Fields(string(got))
	if !slices.Contains(names, "nvidia5") {
		t.Errorf("the job's /dev %q lacks its GPU's node nvidia5", names)
	}
	for _, n := range names {
		if strings.HasPrefix(n, "nvidia") && n != "nvidia5" {
			t.Errorf("the job's /dev holds %s, not its GPU's", n)
		}
	}

	s = m.sups[1]
	l, err = m.lease(s, 2, terms)
	if err != nil {
		t.Fatal(err)
	}
	st2, w := m.rawSession(m.renter, s, startHello(l, spec, 1), spec.Raw)
	defer st2.Reset()
	if !strings.Contains(w.Refused, "GPU-test-2: its device node is unknown") {
		t.Errorf("start with GPU-test-2 (no node): %+v, want it refused for the unknown device node", w)
	}
}
