// Command pkg builds gpumesh's .deb and .rpm (`make package`) with nfpm
// as a library: the binary, the systemd unit, sysusers.d and sysctl.d
// files and the default config from packaging/, and the man pages and
// shell completions the binary writes itself (`gpumesh gen-docs`). It is
// a module of its own so that nfpm's dependencies stay out of gpumesh's
// go.mod.
//
//	go run . -bin ../../bin/gpumesh -src ../../packaging -out ../../dist
//
// SOURCE_DATE_EPOCH, when set, is the files' mtime (reproducible builds).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the packagers
	"github.com/goreleaser/nfpm/v2/files"
	_ "github.com/goreleaser/nfpm/v2/rpm"
)

func main() {
	bin := flag.String("bin", "bin/gpumesh", "the gpumesh binary to package (built for -arch)")
	src := flag.String("src", "packaging", "the directory of the unit, config and scripts")
	out := flag.String("out", "dist", "where the packages are written")
	arch := flag.String("arch", runtime.GOARCH, "GOARCH of the binary")
	formats := flag.String("formats", "deb,rpm", "package formats, comma-separated")
	flag.Parse()
	paths, err := build(*bin, *src, *out, *arch, strings.Split(*formats, ","))
	if err != nil {
		fmt.Fprintln(os.Stderr, "pkg:", err)
		os.Exit(1)
	}
	for _, p := range paths {
		fmt.Println(p)
	}
}

// build writes one package per format into out and returns their paths.
func build(bin, src, out, arch string, formats []string) ([]string, error) {
	version, err := binVersion(bin)
	if err != nil {
		return nil, err
	}
	docs, err := os.MkdirTemp("", "gpumesh-pkg-docs-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(docs)
	if b, err := exec.Command(bin, "gen-docs", docs).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s gen-docs: %w: %s", bin, err, b)
	}
	contents, err := contents(bin, src, docs)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	for _, format := range formats {
		p, err := pack(format, version, arch, src, out, contents)
		if err != nil {
			return paths, fmt.Errorf("%s: %w", format, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// binVersion asks the binary its version (`gpumesh version --json`).
func binVersion(bin string) (string, error) {
	b, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		return "", fmt.Errorf("%s version: %w", bin, err)
	}
	var v struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(b, &v); err != nil || v.Version == "" {
		return "", fmt.Errorf("%s version --json: %q: %v", bin, b, err)
	}
	return v.Version, nil
}

// contents is what the packages install: the same files for every
// format, but for zsh's completion directory.
func contents(bin, src, docs string) (files.Contents, error) {
	file := func(from, to string, mode os.FileMode) *files.Content {
		return &files.Content{Source: from, Destination: to, FileInfo: &files.ContentFileInfo{Mode: mode}}
	}
	cs := files.Contents{
		file(bin, "/usr/bin/gpumesh", 0o755),
		file(filepath.Join(src, "gpumesh.service"), "/usr/lib/systemd/system/gpumesh.service", 0o644),
		file(filepath.Join(src, "sysusers.conf"), "/usr/lib/sysusers.d/gpumesh.conf", 0o644),
		file(filepath.Join(src, "sysctl.conf"), "/usr/lib/sysctl.d/60-gpumesh.conf", 0o644),
		file(filepath.Join(docs, "completions", "gpumesh.bash"), "/usr/share/bash-completion/completions/gpumesh", 0o644),
		file(filepath.Join(docs, "completions", "gpumesh.fish"), "/usr/share/fish/vendor_completions.d/gpumesh.fish", 0o644),
	}
	// The operator edits the config; an upgrade keeps the edits.
	conf := file(filepath.Join(src, "config.toml"), "/etc/gpumesh/config.toml", 0o644)
	conf.Type = files.TypeConfigNoReplace
	cs = append(cs, conf)
	// Debian's zsh looks in vendor-completions, Fedora's in site-functions.
	zsh := filepath.Join(docs, "completions", "_gpumesh")
	deb := file(zsh, "/usr/share/zsh/vendor-completions/_gpumesh", 0o644)
	deb.Packager = "deb"
	rpm := file(zsh, "/usr/share/zsh/site-functions/_gpumesh", 0o644)
	rpm.Packager = "rpm"
	cs = append(cs, deb, rpm)
	pages, err := filepath.Glob(filepath.Join(docs, "man", "man1", "*.1"))
	if err != nil || len(pages) == 0 {
		return nil, fmt.Errorf("no man pages from gen-docs in %s (%v)", docs, err)
	}
	for _, p := range pages {
		cs = append(cs, file(p, "/usr/share/man/man1/"+filepath.Base(p), 0o644))
	}
	for _, c := range cs {
		if _, err := os.Stat(c.Source); err != nil {
			return nil, err
		}
	}
	return cs, nil
}

// pack writes the package of one format into out.
func pack(format, version, arch, src, out string, contents files.Contents) (string, error) {
	packager, err := nfpm.Get(format)
	if err != nil {
		return "", err
	}
	depends := []string{"iproute2", "nftables"}
	if format == "rpm" {
		depends = []string{"iproute", "nftables"}
	}
	info := nfpm.WithDefaults(&nfpm.Info{
		Name:        "gpumesh",
		Arch:        arch,
		Platform:    "linux",
		Version:     version,
		Section:     "net",
		Priority:    "optional",
		Maintainer:  "gpumesh developers <gpumesh@users.noreply.github.com>",
		Description: "Peer-to-peer GPU compute marketplace: sell this machine's GPUs (gpumesh node) or rent others'",
		Homepage:    "https://github.com/gpumesh/gpumesh",
		Overridables: nfpm.Overridables{
			Depends:  depends,
			Suggests: []string{"nvidia-container-toolkit", "docker.io", "podman"},
			Contents: contents,
			Scripts: nfpm.Scripts{
				PostInstall: filepath.Join(src, "postinstall.sh"),
				PreRemove:   filepath.Join(src, "preremove.sh"),
				PostRemove:  filepath.Join(src, "postremove.sh"),
			},
		},
	})
	if format == "rpm" {
		info.Suggests = []string{"nvidia-container-toolkit", "podman"}
	}
	path := filepath.Join(out, packager.ConventionalFileName(info))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	info.Target = path
	if err := packager.Package(info, f); err != nil {
		f.Close()
		os.Remove(path)
		return "", err
	}
	return path, f.Close()
}
