package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/node"
)

func newConfigCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Inspect the configuration"}
	show := &cobra.Command{
		Use:   "show",
		Short: "Print the effective configuration and where each value came from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.loadConfig(cmd)
			if err != nil {
				return err
			}
			settings := cfg.Settings()
			if a.json {
				return a.printJSON(settings)
			}
			var rows [][]string
			for _, s := range settings {
				v := fmt.Sprint(s.Value)
				if l, ok := s.Value.([]string); ok {
					v = strings.Join(l, ",")
				}
				rows = append(rows, []string{s.Key, orDash(v), s.Source})
			}
			a.table([]string{"KEY", "VALUE", "SOURCE"}, rows)
			return nil
		},
	}
	// config show reports node settings too, so it takes the node's flags.
	addKeyFlags(show.Flags(), nodeKeys())
	cmd.AddCommand(show, newConfigKeysCmd(a))
	return cmd
}

// keyInfo is one row of `gpumesh config keys --json`.
type keyInfo struct {
	Key        string   `json:"key"`
	Flag       string   `json:"flag"`
	Env        string   `json:"env"`
	Type       string   `json:"type"`
	Repeatable bool     `json:"repeatable"`
	Default    []string `json:"default"`
	Help       string   `json:"help"`
}

func newConfigKeysCmd(a *app) *cobra.Command {
	var markdown bool
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "List the configuration keys with their flag, environment variable, default and meaning",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			keys := node.ConfigKeys()
			switch {
			case markdown:
				_, err := fmt.Fprint(a.stdout, node.KeysMarkdown())
				return err
			case a.json:
				out := make([]keyInfo, 0, len(keys))
				for _, k := range keys {
					out = append(out, keyInfo{Key: k.Name, Flag: "--" + k.Flag(), Env: k.Env(), Type: [...]string{"string", "integer", "boolean"}[k.Kind],
						Repeatable: k.Repeatable, Default: orEmpty(k.Default), Help: strings.ReplaceAll(k.Help, "`", "")})
				}
				return a.printJSON(out)
			}
			var rows [][]string
			for _, k := range keys {
				rows = append(rows, []string{k.Name, "--" + k.Flag(), k.Env(), strings.ReplaceAll(k.DefaultText(), "`", "")})
			}
			a.table([]string{"KEY", "FLAG", "ENV", "DEFAULT"}, rows)
			return nil
		},
	}
	cmd.Flags().BoolVar(&markdown, "markdown", false, "print the table of configuration keys (docs/suppliers.md)")
	return cmd
}
