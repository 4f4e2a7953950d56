package runtime

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestContainerArgs(t *testing.T) {
	base := Spec{JobID: "ABC123", Attempt: 2, Argv: []string{"python", "train.py"}, WorkDir: "/d/work", CheckpointDir: "/d/ck", Image: "img:1"}
	common := []string{"run", "--rm", "--name", "gpumesh-abc123-2",
		"--label", "gpumesh.job=ABC123", "--label", "gpumesh.attempt=2",
		"--workdir", "/work", "--volume", "/d/work:/work", "--volume", "/d/ck:/checkpoint",
		"--env-file", "/e", "--security-opt", "no-new-privileges", "--cap-drop", "ALL"}
	var gpuMode string // a case may change it
	for _, tc := range []struct {
		name    string
		runtime string
		change  func(*Spec)
		user    string
		network []string
		want    []string
	}{
		{"minimal", "docker", func(*Spec) {}, "", nil,
			[]string{"--ulimit", "nofile=1024:1024", "img:1", "python", "train.py"}},
		{"limits, user and gpus", "docker", func(s *Spec) {
			s.Limits = Limits{MemoryBytes: 1 << 30, CPUSeconds: 10, Procs: 50, FileBytes: 1 << 20, OpenFiles: 99}
			s.GPUs = []string{"GPU-a", "GPU-b"}
		}, "65534:65534", nil,
			[]string{"--user", "65534:65534", "--memory", "1073741824", "--memory-swap", "1073741824", "--pids-limit", "50",
				"--ulimit", "cpu=10:11", "--ulimit", "fsize=1048576:1048576", "--ulimit", "nofile=99:99",
				"--gpus", `"device=GPU-a,GPU-b"`, "img:1", "python", "train.py"}},
		{"simulated gpus are no devices", "docker", func(s *Spec) { s.GPUs = []string{"GPU-sim-0011223344556677", "GPU-a"} }, "", nil,
			[]string{"--ulimit", "nofile=1024:1024", "--gpus", `"device=GPU-a"`, "img:1", "python", "train.py"}},
		{"podman gpus by CDI", "podman", func(s *Spec) { s.GPUs = []string{"GPU-a", "GPU-b"} }, "", nil,
			[]string{"--ulimit", "nofile=1024:1024", "--device", "nvidia.com/gpu=GPU-a", "--device", "nvidia.com/gpu=GPU-b", "img:1", "python", "train.py"}},
		{"job network", "podman", func(*Spec) {}, "", []string{"--network", "ns:/proc/1/fd/9", "--dns", "9.9.9.9"},
			[]string{"--ulimit", "nofile=1024:1024", "--network", "ns:/proc/1/fd/9", "--dns", "9.9.9.9", "img:1", "python", "train.py"}},
		{"gpus as devices", "docker", func(s *Spec) {
			s.GPUs, s.GPUDevices = []string{"GPU-a", "GPU-b"}, []string{"/d/nvidia3", "/d/nvidia1"}
			gpuMode = GPUModeDevices
		}, "", nil,
			[]string{"--ulimit", "nofile=1024:1024", "--device", "/d/nvidia3:/dev/nvidia3", "--device", "/d/nvidia1:/dev/nvidia1", "img:1", "python", "train.py"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			gpuMode = GPUModeToolkit
			tc.change(&s)
			// No control node: the device dir is empty.
			got := containerArgs(tc.runtime, s, containerName(s), "/e", tc.user, gpuArgs(tc.runtime, gpuMode, t.TempDir(), s), tc.network)
			want := append(append([]string{}, common...), tc.want...)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("args:\n got %q\nwant %q", got, want)
			}
		})
	}
}

func TestContainerEnv(t *testing.T) {
	s := Spec{JobID: "ab", Attempt: 3, Env: []string{"PATH=/opt/bin", "CHECKPOINT_DIR=/evil", "A=1"}}
	got := containerEnv("docker", GPUModeToolkit, s)
	want := []string{"TMPDIR=/work/tmp", "PATH=/opt/bin", "CHECKPOINT_DIR=/checkpoint", "A=1", "HOME=/work",
		"CUDA_VISIBLE_DEVICES=", "NVIDIA_VISIBLE_DEVICES=void",
		"NVIDIA_MIG_CONFIG_DEVICES=", "NVIDIA_MIG_MONITOR_DEVICES=", "NVIDIA_IMEX_CHANNELS=",
		"NVIDIA_GDS=", "NVIDIA_MOFED=", "NVIDIA_NVSWITCH=", "NVIDIA_GDRCOPY=",
		"JOB_ATTEMPT=3", "GPUMESH_JOB_ID=ab"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("env:\n got %q\nwant %q", got, want)
	}
	s.GPUs = []string{"GPU-x"}
	if env := strings.Join(containerEnv("docker", GPUModeToolkit, s), " "); !strings.Contains(env, "CUDA_VISIBLE_DEVICES=GPU-x") {
		t.Errorf("env %s: want the GPU UUID", env)
	}
	s.GPUs = []string{"0"}
	if env := strings.Join(containerEnv("docker", GPUModeToolkit, s), " "); strings.Contains(env, "CUDA_VISIBLE_DEVICES") {
		t.Errorf("env %s: a host index means nothing in the container", env)
	}
}

// TestContainerNvidiaVisibleDevices: the env file always sets
// NVIDIA_VISIBLE_DEVICES, so that neither the image's ENV nor anything
// else makes the NVIDIA toolkit give the container GPUs it did not
// lease: docker's --gpus devices in toolkit mode, "void" otherwise.
func TestContainerNvidiaVisibleDevices(t *testing.T) {
	for _, c := range []struct {
		runtime, mode string
		gpus          []string
		want          string
	}{
		{"docker", GPUModeToolkit, []string{"GPU-a", "GPU-b"}, "GPU-a,GPU-b"},
		{"docker", GPUModeToolkit, []string{"GPU-sim-0011223344556677", "GPU-a"}, "GPU-a"},
		{"docker", GPUModeToolkit, []string{"GPU-sim-0011223344556677"}, "void"},
		{"docker", GPUModeToolkit, nil, "void"},
		{"docker", GPUModeDevices, []string{"GPU-a"}, "void"},
		{"podman", GPUModeToolkit, []string{"GPU-a"}, "void"}, // CDI, whose spec sets void too
		{"podman", GPUModeToolkit, nil, "void"},
		{"podman", GPUModeDevices, []string{"GPU-a"}, "void"},
	} {
		s := Spec{JobID: "ab", GPUs: c.gpus}
		env := containerEnv(c.runtime, c.mode, s)
		var got []string
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, "NVIDIA_VISIBLE_DEVICES="); ok {
				got = append(got, v)
			}
		}
		if len(got) != 1 || got[0] != c.want {
			t.Errorf("%s %s gpus %q: NVIDIA_VISIBLE_DEVICES %q, want %q once", c.runtime, c.mode, c.gpus, got, c.want)
		}
		// docker's --gpus names the same devices as the env file.
		if args := strings.Join(gpuArgs(c.runtime, c.mode, t.TempDir(), s), " "); c.want != "void" && args != `--gpus "device=`+c.want+`"` {
			t.Errorf("%s %s gpus %q: gpu args %q, want the devices of NVIDIA_VISIBLE_DEVICES", c.runtime, c.mode, c.gpus, args)
		}
	}
}

func TestValidateContainer(t *testing.T) {
	dir := t.TempDir()
	ok := Spec{JobID: "ab", Argv: []string{"x"}, WorkDir: dir, CheckpointDir: dir, Image: "img"}
	for _, tc := range []struct {
		name   string
		change func(*Spec)
	}{
		{"no image", func(s *Spec) { s.Image = "" }},
		{"newline in env", func(s *Spec) { s.Env = []string{"A=b\nC=d"} }},
		{"comment name", func(s *Spec) { s.Env = []string{"#A=b"} }},
	} {
		s := ok
		tc.change(&s)
		if err := validateContainer(&s); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%s: err = %v, want ErrInvalidSpec", tc.name, err)
		}
	}
	if err := validateContainer(&ok); err != nil {
		t.Errorf("valid spec: %v", err)
	}
}
