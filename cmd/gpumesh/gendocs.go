package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newGenDocsCmd writes the man pages and shell completions the packages
// ship (tools/pkg): DIR/man/man1/gpumesh*.1 and
// DIR/completions/{gpumesh.bash,_gpumesh,gpumesh.fish}, all made from
// the commands themselves, so they cannot drift from the CLI. Hidden: it
// is for packagers.
func newGenDocsCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:    "gen-docs DIR",
		Short:  "Write man pages and shell completions into DIR (for packagers)",
		Args:   cobra.ExactArgs(1),
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return genDocs(cmd.Root(), args[0])
		},
	}
}

func genDocs(root *cobra.Command, dir string) error {
	man := filepath.Join(dir, "man", "man1")
	comp := filepath.Join(dir, "completions")
	for _, d := range []string{man, comp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("gen-docs: %w", err)
		}
	}
	root.DisableAutoGenTag = true // no date: the same CLI gives the same pages
	hdr := &doc.GenManHeader{Title: "GPUMESH", Section: "1", Source: "gpumesh", Manual: "gpumesh manual"}
	if err := doc.GenManTree(root, hdr, man); err != nil {
		return fmt.Errorf("gen-docs: man pages: %w", err)
	}
	for name, gen := range map[string]func(string) error{
		"gpumesh.bash": func(p string) error { return root.GenBashCompletionFileV2(p, true) },
		"_gpumesh":     root.GenZshCompletionFile,
		"gpumesh.fish": func(p string) error { return root.GenFishCompletionFile(p, true) },
	} {
		if err := gen(filepath.Join(comp, name)); err != nil {
			return fmt.Errorf("gen-docs: %s: %w", name, err)
		}
	}
	return nil
}
