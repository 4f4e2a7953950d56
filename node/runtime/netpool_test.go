//go:build linux

package runtime_test

import (
	"bufio"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/runtime"
	"golang.org/x/sys/unix"
)

// netPoolChildEnv marks the copy of the test binary that
// TestJobNetworkWarm runs inside its lab's "host" namespace.
const netPoolChildEnv = "GPUMESH_RUNTIME_NETPOOL_CHILD"

// TestJobNetworkWarm checks the job networks a runtime keeps ready
// (NetConfig.Warm), in a lab "host" namespace: they are made before any
// job, each job gets a fresh one that no other job ever gets, the pool
// fills up again, Close removes what it holds, and those of a node that
// died go with it.
func TestJobNetworkWarm(t *testing.T) {
	if os.Getenv(netPoolChildEnv) != "" {
		jobNetworkWarmChild(t)
		return
	}
	needNetLab(t)
	host, _ := netLab(t)
	runInLab(t, host, "TestJobNetworkWarm", netPoolChildEnv+"=1")
}

func jobNetworkWarmChild(t *testing.T) {
	const warm = 2
	t.Run("fresh", func(t *testing.T) {
		rt := netRuntime(t, runtime.NetConfig{Warm: warm})
		eventually(t, "the pool to fill", func() bool { return len(jobLinks(t)) == warm })
		// More jobs than the pool holds, one after another: each in a
		// namespace of its own (held here, so that no namespace number
		// can come back), with lo and its eth0 only.
		seen := map[uint64]bool{}
		for i := range 2*warm + 1 {
			ino, links := netnsOfJob(t, rt)
			if seen[ino] {
				t.Errorf("job %d got the namespace %d of an earlier job", i, ino)
			}
			seen[ino] = true
			if links != "eth0 lo" {
				t.Errorf("job %d sees links %q, want eth0 and lo", i, links)
			}
			eventually(t, "the pool to fill again", func() bool { return len(jobLinks(t)) == warm })
		}
		closeRuntime(t, rt)
		noLeftovers(t)
		// After Close a job makes its own network, which goes with it.
		var out syncBuffer
		if res := runJob(t, rt, spec(t, &out, "sh", "-c", "grep -q eth0 /proc/net/dev")); res.ExitCode != 0 {
			t.Errorf("a job after Close has no eth0: %+v", res)
		}
		noLeftovers(t)
	})
	t.Run("node-dies", func(t *testing.T) {
		// A node killed with its pool full: the pool's namespaces, held
		// by nothing but its descriptors, go with it, and their links
		// with them; the next node removes the table.
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), helperEnv+"=netpool")
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		if line != "READY\n" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("stand-in node said %q", line)
		}
		if n := len(jobLinks(t)); n != warm {
			t.Errorf("%d job links with the stand-in node's pool full, want %d", n, warm)
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		eventually(t, "the dead node's links to go", func() bool { return len(jobLinks(t)) == 0 })
		netRuntime(t, runtime.NetConfig{Warm: -1})
		noLeftovers(t)
	})
}

// netnsOfJob runs a job, holds its network namespace while it runs and
// until the test ends, and returns the namespace's number and the links
// the job saw, sorted.
func netnsOfJob(t *testing.T, rt runtime.Runtime) (ino uint64, links string) {
	t.Helper()
	lines := newLines()
	p := start(t, rt, spec(t, lines, "sh", "-c", `echo $(sed -n 's/^ *\([a-z0-9]*\):.*/\1/p' /proc/net/dev | sort); exec sleep 100`))
	links = lines.next(t)
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", p.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(time.Second); err != nil {
		t.Errorf("Stop: %v", err)
	}
	return st.Ino, links
}

// jobLinks lists the links named gmj* of this namespace.
func jobLinks(t *testing.T) []string {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range ifs {
		if strings.HasPrefix(i.Name, "gmj") {
			names = append(names, i.Name)
		}
	}
	return names
}

// netPoolHelper is the "netpool" helper mode: a stand-in node whose
// runtime keeps 2 job networks ready prints READY once it holds them,
// then waits to be killed.
func netPoolHelper() int {
	rt, err := runtime.New("process", runtime.Options{Log: slog.New(slog.NewTextHandler(os.Stderr, nil)), Net: &runtime.NetConfig{Warm: 2}})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer rt.Close()
	for deadline := time.Now().Add(waitLimit); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ifs, _ := net.Interfaces()
		n := 0
		for _, i := range ifs {
			if strings.HasPrefix(i.Name, "gmj") {
				n++
			}
		}
		if n == 2 {
			fmt.Println("READY")
			select {}
		}
	}
	fmt.Println("the pool never filled")
	return 1
}
