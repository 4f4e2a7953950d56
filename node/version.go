package node

import "runtime/debug"

// Version is gpumesh's release version.
const Version = "0.1.0"

// Software is the software string advertised in records and identify.
func Software() string { return "gpumesh/" + Version }

// BuildInfo describes the running binary.
type BuildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	GoVersion string `json:"go_version"`
}

// Build reports the version, the VCS revision the binary was built from (if
// the toolchain recorded one) and the Go version.
func Build() BuildInfo {
	b := BuildInfo{Version: Version}
	if info, ok := debug.ReadBuildInfo(); ok {
		b.GoVersion = info.GoVersion
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				b.Commit = s.Value
			}
		}
	}
	return b
}
