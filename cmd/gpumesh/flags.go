package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/gpumesh/gpumesh/node"
)

// addKeyFlags registers the flags of configuration keys on fs, from
// node's key table. Values stay text: LoadConfig parses them, so that a
// bad one is reported with its key and where it came from, as for the
// file and the environment.
func addKeyFlags(fs *pflag.FlagSet, keys []node.Key) {
	for _, k := range keys {
		v := &keyValue{key: k}
		f := fs.VarPF(v, k.Flag(), "", k.Usage())
		if k.Kind == node.KindBool {
			f.NoOptDefVal = "true"
		}
	}
}

// keyValue is the value of a key's flag, and what marks a flag as a
// key's (a command's own flag of the same name, run --runtime, is not):
// the text given, each time it is given for a repeatable key, else the
// last.
type keyValue struct {
	key  node.Key
	vals []string
}

func (v *keyValue) Set(s string) error {
	if !v.key.Repeatable {
		v.vals = v.vals[:0]
	}
	v.vals = append(v.vals, s)
	return nil
}

func (v *keyValue) String() string { return strings.Join(v.vals, ",") }

// Type names the value in --help.
func (v *keyValue) Type() string {
	if v.key.Kind == node.KindBool {
		return "bool" // pflag then shows no placeholder
	}
	return v.key.Arg
}

// keyFlagValues are the values of the configuration key flags set on fs,
// by key, as node.Input.Flags takes them.
func keyFlagValues(fs *pflag.FlagSet) map[string][]string {
	vals := map[string][]string{}
	fs.Visit(func(f *pflag.Flag) {
		if v, ok := f.Value.(*keyValue); ok {
			vals[v.key.Name] = slices.Clone(v.vals)
		}
	})
	return vals
}

// globalKeys are the keys whose flags every command takes.
func globalKeys() []node.Key { return keysWhere(func(k node.Key) bool { return k.Global }) }

// nodeKeys are the keys whose flags `gpumesh node` and `config show` take
// besides the global ones.
func nodeKeys() []node.Key { return keysWhere(func(k node.Key) bool { return !k.Global }) }

func keysWhere(keep func(node.Key) bool) []node.Key {
	var out []node.Key
	for _, k := range node.ConfigKeys() {
		if keep(k) {
			out = append(out, k)
		}
	}
	return out
}

// namedKeys are the keys named; a name that is no key is a programming
// error, caught when the commands are built.
func namedKeys(names ...string) []node.Key {
	out := make([]node.Key, 0, len(names))
	for _, n := range names {
		k, ok := node.LookupKey(n)
		if !ok {
			panic(fmt.Sprintf("gpumesh: no configuration key %q", n))
		}
		out = append(out, k)
	}
	return out
}
