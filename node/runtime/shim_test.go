//go:build linux

package runtime

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCheckCgroupsReadOnly: a start fails when a cgroup or cgroup2
// mount stays writable in the job's view after the read-only remount;
// other mounts, and mounts the shim cannot reach, do not count.
func TestCheckCgroupsReadOnly(t *testing.T) {
	const mountinfo = `26 1 254:0 / / rw,relatime - ext4 /dev/vda rw
35 30 0:32 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
41 30 0:38 / /sys/fs/cgroup/my\040cg rw,relatime - cgroup cgroup rw,pids
`
	for _, c := range []struct {
		name     string
		writable string     // the mount statfs says is writable ("": none)
		gone     unix.Errno // statfs's error for /sys/fs/cgroup/devices
		want     string     // "": no error
	}{
		{"all read-only", "", 0, ""},
		{"v1 devices writable", "/sys/fs/cgroup/devices", 0, "the cgroup mount /sys/fs/cgroup/devices stays writable"},
		{"cgroup2 writable", "/sys/fs/cgroup/unified", 0, "the cgroup2 mount /sys/fs/cgroup/unified stays writable"},
		{"escaped name", "/sys/fs/cgroup/my cg", 0, "/sys/fs/cgroup/my cg stays writable"},
		{"root fs writable does not count", "/", 0, ""},
		{"unreachable", "/sys/fs/cgroup/devices", unix.EACCES, ""},
		{"statfs fails", "", unix.EIO, "check that /sys/fs/cgroup/devices is read-only"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkCgroupsReadOnly([]byte(mountinfo), func(p string) (int64, error) {
				if p == "/sys/fs/cgroup/devices" && c.gone != 0 {
					return 0, c.gone
				}
				if p == c.writable {
					return 0, nil
				}
				return unix.ST_RDONLY, nil
			})
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("err = %v, want %q", err, c.want)
			}
		})
	}
}
