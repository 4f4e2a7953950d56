package testenv

import (
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name, require, capability string
		fail                      bool
		msg                       string
	}{
		{"not required", "", Docker, false, "no engine (capability docker, not in GPUMESH_REQUIRE)"},
		{"others required", "netlab,podman", Docker, false, "no engine (capability docker, not in GPUMESH_REQUIRE)"},
		{"required", "netlab,docker,podman,cgroup", Docker, true, "required capability docker unavailable: no engine"},
		{"required with spaces", " cgroup , docker ", Docker, true, "required capability docker unavailable: no engine"},
		{"prefix is not a match", "dockerd", Docker, false, "no engine (capability docker, not in GPUMESH_REQUIRE)"},
		{"unknown capability", "", "dokcer", true, `testenv: unknown capability "dokcer"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fail, msg := Decide(tc.require, tc.capability, "no engine")
			if fail != tc.fail || !strings.HasPrefix(msg, tc.msg) {
				t.Errorf("Decide(%q, %q) = %v, %q; want %v, %q", tc.require, tc.capability, fail, msg, tc.fail, tc.msg)
			}
		})
	}
}

func TestUnknown(t *testing.T) {
	if got := Unknown("netlab, docker,,podman,cgroup,root,jobnet,chromium,python3"); len(got) != 0 {
		t.Errorf("Unknown of known capabilities = %q, want none", got)
	}
	if got, want := Unknown("docker,dokcer,nft"), []string{"dokcer", "nft"}; !slices.Equal(got, want) {
		t.Errorf("Unknown = %q, want %q", got, want)
	}
}

// TestRequireNamesCapabilities fails a run whose GPUMESH_REQUIRE names
// something that is not a capability: a misspelt name would otherwise
// require nothing.
func TestRequireNamesCapabilities(t *testing.T) {
	if bad := Unknown(os.Getenv(RequireEnv)); len(bad) > 0 {
		t.Errorf("%s=%q names %q, which are not capabilities (%s)", RequireEnv, os.Getenv(RequireEnv), bad, strings.Join(Capabilities(), ", "))
	}
}

// recorder is a testing.TB that records how a test ended; Skip and
// Fatal end the goroutine as the real ones do.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Helper() {}
func (r *recorder) Skip(args ...any) {
	r.skipped, r.msg = true, args[0].(string)
	runtime.Goexit()
}
func (r *recorder) Fatal(args ...any) {
	r.failed, r.msg = true, args[0].(string)
	runtime.Goexit()
}

func TestSkipFailsWhenRequired(t *testing.T) {
	for _, tc := range []struct {
		require       string
		skip, fail    bool
		wantInMessage string
	}{
		{"", true, false, "no writable cgroup2"},
		{"cgroup", false, true, "required capability cgroup unavailable: no writable cgroup2 at /x"},
	} {
		t.Setenv(RequireEnv, tc.require)
		r := &recorder{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			Skip(r, Cgroup, "no writable cgroup2 at %s", "/x")
			t.Errorf("GPUMESH_REQUIRE=%q: Skip returned", tc.require)
		}()
		<-done
		if r.skipped != tc.skip || r.failed != tc.fail || !strings.Contains(r.msg, tc.wantInMessage) {
			t.Errorf("GPUMESH_REQUIRE=%q: skipped %v, failed %v, %q; want skipped %v, failed %v, a message with %q", tc.require, r.skipped, r.failed, r.msg, tc.skip, tc.fail, tc.wantInMessage)
		}
	}
}
