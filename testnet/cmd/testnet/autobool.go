package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
)

// autoBool is a boolean flag whose default, auto, is decided by what the
// machine can do. As a boolean flag, a bare --name sets it true.
type autoBool struct {
	set, value bool
}

func (b *autoBool) String() string {
	if b == nil || !b.set {
		return "auto"
	}
	return strconv.FormatBool(b.value)
}

func (b *autoBool) Set(s string) error {
	if s == "auto" {
		*b = autoBool{}
		return nil
	}
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("want auto, true or false")
	}
	*b = autoBool{set: true, value: v}
	return nil
}

func (b *autoBool) IsBoolFlag() bool { return true }

// resolve is the flag's value: what was set, else what possible says.
func (b *autoBool) resolve(possible func() bool) bool {
	if b.set {
		return b.value
	}
	return possible()
}

// jobNetworkPossible reports whether nodes started here can give jobs
// networks of their own: Linux, root, and the ip and nft commands. The
// nodes check the rest (network namespaces, nftables in the kernel) and
// say so through their doctor's services check.
func jobNetworkPossible() bool {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		return false
	}
	for _, cmd := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(cmd); err != nil {
			return false
		}
	}
	return true
}
