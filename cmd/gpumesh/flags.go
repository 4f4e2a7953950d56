package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/gpumesh/gpumesh/node"
)

// keyAnnotation marks a flag as a configuration key's, with the key's
// name: a command's own flag of the same name (run --runtime) is not.
const keyAnnotation = "gpumesh-config-key"

// addKeyFlags registers the flags of configuration keys on fs, from
// node's key table. Values stay text: LoadConfig parses them, so that a
// bad one is reported with its key and where it came from, as for the
// file and the environment.
func addKeyFlags(fs *pflag.FlagSet, keys []node.Key) {
	for _, k := range keys {
		switch {
		case k.Kind == node.KindBool:
			fs.Bool(k.Flag(), false, k.Usage())
		case k.Repeatable:
			fs.StringArray(k.Flag(), nil, k.Usage())
		default:
			fs.String(k.Flag(), "", k.Usage())
		}
		if err := fs.SetAnnotation(k.Flag(), keyAnnotation, []string{k.Name}); err != nil {
			panic(err) // the flag was just added
		}
	}
}

// keyFlagValues are the values of the configuration key flags set on fs,
// by key, as node.Input.Flags takes them.
func keyFlagValues(fs *pflag.FlagSet) map[string][]string {
	vals := map[string][]string{}
	fs.Visit(func(f *pflag.Flag) {
		key := f.Annotations[keyAnnotation]
		if len(key) != 1 {
			return
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			vals[key[0]] = sv.GetSlice()
		} else {
			vals[key[0]] = []string{f.Value.String()}
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
