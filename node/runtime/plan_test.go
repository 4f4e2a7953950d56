//go:build linux

package runtime

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestBuildPlanCovers(t *testing.T) {
	base := t.TempDir()
	data := filepath.Join(base, "data")
	work := filepath.Join(data, "jobs", "ab", "1", "work")
	ck := filepath.Join(data, "jobs", "ab", "1", "checkpoint")
	other := filepath.Join(data, "jobs", "cd")
	key := filepath.Join(data, "identity.key")
	for _, d := range []string{work, ck, other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(key, []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	// base is 0700 (t.TempDir): searchable by its owner only.
	if err := os.Chmod(base, 0o700); err != nil {
		t.Fatal(err)
	}
	s := Spec{JobID: "ab", Attempt: 1, Argv: []string{"true"}, WorkDir: work, CheckpointDir: ck,
		Hide: []string{key, other, filepath.Join(data, "jobs"), filepath.Join(data, "missing"), key}}
	if err := validate(&s); err != nil {
		t.Fatal(err)
	}

	owner := planInput{uid: os.Geteuid(), gid: os.Getegid()}
	cfg, notes, err := buildPlan(s, owner)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cfg.Covers {
		got = append(got, c.Path+" "+string(c.Kind)+" "+modeString(c.Mode))
	}
	want := []string{
		other + " dir 0000",
		key + " file 0000",
		filepath.Join(data, "jobs") + " dir 0711", // holds WorkDir: the way down is recreated
		"/dev/shm scratch 1777",
		"/tmp scratch 1777",
	}
	if _, err := os.Stat("/dev/shm"); err != nil {
		want = slicesDelete(want, "/dev/shm scratch 1777")
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("covers (owner):\n got %q\nwant %q", got, want)
	}
	if !reflect.DeepEqual(cfg.Keep, []string{work, ck}) {
		t.Errorf("keep = %q, want work and checkpoint", cfg.Keep)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "missing") {
		t.Errorf("notes = %q, want one about the missing path", notes)
	}

	// Another user cannot search base: it is covered too, so that the
	// job still reaches its dirs.
	stranger := planInput{runAs: &jobUser{uid: 4242, gid: 4242}, uid: 4242, gid: 4242}
	cfg, _, err = buildPlan(s, stranger)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range cfg.Covers {
		if c.Path == base || under(base, c.Path) && c.Path != "/tmp" {
			found = c.Kind == coverDir && c.Mode == 0o711
		}
	}
	if !found {
		t.Errorf("unsearchable ancestor %s (or one above) not covered: %+v", base, cfg.Covers)
	}
	if cfg.User == nil || cfg.User.UID != 4242 {
		t.Errorf("user = %+v, want 4242", cfg.User)
	}

	s.Hide = []string{work}
	if _, _, err := buildPlan(s, owner); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("hiding WorkDir: err = %v, want ErrInvalidSpec", err)
	}
}

func slicesDelete(s []string, v string) []string {
	var out []string
	for _, x := range s {
		if x != v {
			out = append(out, x)
		}
	}
	return out
}

func modeString(m uint32) string {
	const digits = "01234567"
	return string([]byte{digits[m>>9&7], digits[m>>6&7], digits[m>>3&7], digits[m&7]})
}

func TestRlimits(t *testing.T) {
	nobody := &jobUser{uid: 65534, gid: 65534}
	names := func(rs []rlimit) map[string]uint64 {
		m := map[string]uint64{}
		for _, r := range rs {
			m[r.Name] = r.Cur
		}
		return m
	}
	for _, tc := range []struct {
		name string
		s    Spec
		in   planInput
		want map[string]uint64
	}{
		{"defaults", Spec{}, planInput{}, map[string]uint64{"core": 0, "nofile": 1024}},
		{"all", Spec{Limits: Limits{MemoryBytes: 1 << 30, CPUSeconds: 60, Procs: 10, FileBytes: 1 << 20, OpenFiles: 64}}, planInput{runAs: nobody},
			map[string]uint64{"core": 0, "as": 1 << 30, "cpu": 60, "nproc": 10, "fsize": 1 << 20, "nofile": 64}},
		{"procs without RunAs", Spec{Limits: Limits{Procs: 10}}, planInput{}, map[string]uint64{"core": 0, "nofile": 1024}},
		{"gpus skip RLIMIT_AS", Spec{GPUs: []string{"0"}, Limits: Limits{MemoryBytes: 1 << 30}}, planInput{memoryByCgroup: true},
			map[string]uint64{"core": 0, "nofile": 1024}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, _ := rlimits(tc.s, tc.in, nil)
			if got := names(rs); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("rlimits = %v, want %v", got, tc.want)
			}
			for _, r := range rs {
				if r.Name == "cpu" && r.Max != r.Cur+1 {
					t.Errorf("cpu hard limit %d, want soft+1 so SIGXCPU comes first", r.Max)
				}
			}
		})
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/a`:                 "/a",
		`/with\040space`:     "/with space",
		`/tab\011x\134y`:     "/tab\tx\\y",
		`/trailing\04`:       `/trailing\04`,
		`/not\999octal\040`:  `/not\999octal `,
		`/nl\012`:            "/nl\n",
		`/two\040\040spaces`: "/two  spaces",
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMountFlags(t *testing.T) {
	for _, tc := range []struct {
		st   int64
		want uintptr
	}{
		{0, unix.MS_STRICTATIME},
		{unix.ST_RELATIME | unix.ST_NOSUID | unix.ST_NODEV, unix.MS_RELATIME | unix.MS_NOSUID | unix.MS_NODEV},
		{unix.ST_NOATIME | unix.ST_NOEXEC | unix.ST_RDONLY, unix.MS_NOATIME | unix.MS_NOEXEC},
	} {
		if got := mountFlags(tc.st); got != tc.want {
			t.Errorf("mountFlags(%#x) = %#x, want %#x", tc.st, got, tc.want)
		}
	}
}

func TestSearchable(t *testing.T) {
	dir := t.TempDir()
	uid, gid := os.Geteuid(), os.Getegid()
	for _, tc := range []struct {
		mode                os.FileMode
		owner, group, other bool
	}{
		{0o700, true, false, false},
		{0o710, true, true, false},
		{0o711, true, true, true},
		{0o601, false, false, true},
	} {
		if err := os.Chmod(dir, tc.mode); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name     string
			uid, gid int
			want     bool
		}{{"owner", uid, gid, tc.owner}, {"group", uid + 1000, gid, tc.group}, {"other", uid + 1000, gid + 1000, tc.other}} {
			got, err := searchable(dir, c.uid, c.gid, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("mode %o, %s: searchable = %v, want %v", tc.mode, c.name, got, c.want)
			}
		}
	}
}
