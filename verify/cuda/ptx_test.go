package cuda

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// ptxCode is a module's PTX without its comments.
func ptxCode(t *testing.T, ptx string) string {
	t.Helper()
	var b strings.Builder
	for line := range strings.SplitSeq(ptx, "\n") {
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// ptxEntry is one entry point parsed from the text.
type ptxEntry struct {
	name   string
	params []string // "u64 name"
	body   string
}

// parseEntries returns the entries of code in order. It fails the test on
// unbalanced braces.
func parseEntries(t *testing.T, code string) []ptxEntry {
	t.Helper()
	head := regexp.MustCompile(`\.visible\s+\.entry\s+(\w+)\s*\(([^)]*)\)\s*\{`)
	depth := 0
	for i, c := range code {
		switch c {
		case '{':
			depth++
		case '}':
			depth--
			if depth < 0 {
				t.Fatalf("unbalanced '}' at byte %d", i)
			}
		}
	}
	if depth != 0 {
		t.Fatalf("%d braces left open", depth)
	}
	var out []ptxEntry
	for _, m := range head.FindAllStringSubmatchIndex(code, -1) {
		e := ptxEntry{name: code[m[2]:m[3]]}
		for p := range strings.SplitSeq(code[m[4]:m[5]], ",") {
			if f := strings.Fields(p); len(f) > 0 {
				e.params = append(e.params, strings.Join(f, " "))
			}
		}
		// The body: from the opening brace to its match (no nested
		// braces but the mma operand lists, which balance).
		start, d := m[1]-1, 0
		for i := start; i < len(code); i++ {
			if code[i] == '{' {
				d++
			} else if code[i] == '}' {
				d--
				if d == 0 {
					e.body = code[start+1 : i]
					break
				}
			}
		}
		out = append(out, e)
	}
	return out
}

// TestPTXText checks each module's PTX as text: the header, every kernel
// of the host's table in its module with exactly its parameters (each
// loaded with its type), declared registers, defined branch targets, and
// the one mma form. It does not prove the kernels compute the right
// thing: TestPTXSim* runs them, and only a GPU runs them for real (make
// gpu-check).
func TestPTXText(t *testing.T) {
	for _, m := range modules {
		t.Run(m.name, func(t *testing.T) { checkModuleText(t, m) })
	}
}

func checkModuleText(t *testing.T, m module) {
	code := ptxCode(t, m.ptx)
	var directives []string
	for line := range strings.SplitSeq(code, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], ".") {
			directives = append(directives, strings.Join(f, " "))
		}
		if len(directives) == 3 {
			break
		}
	}
	if len(directives) < 3 {
		t.Fatalf("header directives %q", directives)
	}
	if v := strings.TrimPrefix(directives[0], ".version "); v == directives[0] || v < "7.0" || len(v) != 3 {
		t.Errorf("first directive %q, want .version 7.0 or later (7.x)", directives[0])
	}
	if directives[1] != ".target "+m.target || directives[2] != ".address_size 64" {
		t.Errorf("header %q, want .target %s, .address_size 64", directives, m.target)
	}

	entries := parseEntries(t, code)
	var mine []kernel
	for _, k := range kernels {
		if k.module == m.name {
			mine = append(mine, k)
		}
	}
	if len(entries) != len(mine) {
		t.Errorf("%d entries in the PTX, %d kernels of this module on the host", len(entries), len(mine))
	}
	byName := map[string]ptxEntry{}
	for _, e := range entries {
		if _, dup := byName[e.name]; dup {
			t.Errorf("entry %s twice", e.name)
		}
		byName[e.name] = e
	}
	regDecl := regexp.MustCompile(`\.reg\s+\.\w+\s+%(\w+?)<(\d+)>;`)
	regUse := regexp.MustCompile(`%([a-z]+)(\d*)\b`)
	special := map[string]bool{"tid": true, "ntid": true, "ctaid": true, "nctaid": true}
	for _, k := range mine {
		e, ok := byName[k.name]
		if !ok {
			t.Errorf("kernel %s: no .visible .entry in the PTX", k.name)
			continue
		}
		if len(e.params) != len(k.params) {
			t.Errorf("kernel %s: %d parameters in the PTX, the host passes %d", k.name, len(e.params), len(k.params))
			continue
		}
		for i, p := range e.params {
			f := strings.Fields(p)
			if len(f) != 3 || f[0] != ".param" || f[1] != k.params[i].String() || !strings.HasPrefix(f[2], k.name+"_") {
				t.Errorf("kernel %s parameter %d: %q, want .param %v %s_…", k.name, i, p, k.params[i], k.name)
				continue
			}
			load := "ld.param" + k.params[i].String()
			if !regexp.MustCompile(regexp.QuoteMeta(load) + `\s+%\w+,\s*\[` + f[2] + `\]`).MatchString(e.body) {
				t.Errorf("kernel %s: parameter %s is never loaded with %s", k.name, f[2], load)
			}
		}
		declared := map[string]int{}
		for _, m := range regDecl.FindAllStringSubmatch(e.body, -1) {
			n, _ := strconv.Atoi(m[2])
			declared[m[1]] = n
		}
		for _, m := range regUse.FindAllStringSubmatch(regDecl.ReplaceAllString(e.body, ""), -1) {
			if special[m[1]] && m[2] == "" {
				continue
			}
			n, ok := declared[m[1]]
			idx, err := strconv.Atoi(m[2])
			if !ok || err != nil || idx >= n {
				t.Errorf("kernel %s: register %%%s%s not declared", k.name, m[1], m[2])
			}
		}
	}

	labels := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^\s*(\$\w+):`).FindAllStringSubmatch(code, -1) {
		labels[m[1]]++
	}
	for l, n := range labels {
		if n != 1 {
			t.Errorf("label %s defined %d times", l, n)
		}
	}
	for _, m := range regexp.MustCompile(`bra(?:\.uni)?\s+(\$\w+);`).FindAllStringSubmatch(code, -1) {
		if labels[m[1]] == 0 {
			t.Errorf("branch to undefined label %s", m[1])
		}
	}

	// mma: 4 per k step in the untiled kernel (one per n8 tile of a
	// warp), 2·16 per stage in the tiled one (4×4 tiles, two k steps), 8
	// chains in the peak loop, none elsewhere; always the one s8 form, without .satfinite.
	wantMMA := map[string]int{kStepMMA: 4, kStepTiled: 32, kMMAPeak: 8}
	mmaRe := regexp.MustCompile(`\bmma\.[\w.]+`)
	for _, e := range entries {
		mmas := mmaRe.FindAllString(e.body, -1)
		if len(mmas) != wantMMA[e.name] {
			t.Errorf("kernel %s: %d mma instructions, want %d", e.name, len(mmas), wantMMA[e.name])
		}
		for _, m := range mmas {
			if m != "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32" {
				t.Errorf("kernel %s: mma form %q, want mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 (no .satfinite)", e.name, m)
			}
		}
	}
}

// TestPTXIsASCII: the driver's JIT (ptxas, CUDA 13) refuses a module with
// any byte outside ASCII, in comments too ("Unexpected non-ASCII character
// encountered"); the first run on an H200 failed so.
func TestPTXIsASCII(t *testing.T) {
	for name, src := range map[string]string{"base": basePTX, "tc": tensorPTX} {
		for i, line := range strings.Split(src, "\n") {
			for _, c := range []byte(line) {
				if c >= 0x80 || (c < 0x20 && c != '\t' && c != '\r') {
					t.Errorf("module %s, line %d: byte %#x is not printable ASCII: %q", name, i+1, c, line)
					break
				}
			}
		}
	}
}
