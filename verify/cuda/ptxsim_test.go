package cuda

import (
	"encoding/binary"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/verify/challenge"
)

// A small interpreter of the PTX subset the modules use, so that the
// tests run the kernels' actual text (not the fake driver's C
// references) on the CPU: every thread of every block of a grid, with
// bar.sync as a block barrier and mma.sync as a warp-collective computed
// from the PTX ISA's fragment layout of mma.m16n8k32 (.s8):
//
//	A (16×32, row): a_i at row g (i < 4 or 8 ≤ i < 12) else g+8,
//	                column 4t + (i & 3), + 16 for i ≥ 8
//	B (32×8, col):  b_i at row 4t + (i & 3), + 16 for i ≥ 4, column g
//	C, D (16×8):    c_i at row g (i < 2) else g+8, column 2t + (i & 1)
//
// with g = lane >> 2, t = lane & 3, four bytes per 32-bit register from
// the lowest. It is not NVIDIA's semantics, only the ISA manual's as
// read here; what it proves is that the kernels' address arithmetic,
// loops, modular arithmetic and reductions compute the references'
// values given that reading. Memory accesses outside an allocation fail
// the test.

// simOperand is one parsed operand.
type simOperand struct {
	kind byte // 'r' register, 'i' immediate, 's' special register, 'm' memory, 'v' vector, 'l' label, 'y' symbol
	reg  int  // 'r': register index
	imm  uint64
	name string // special register, label, or the parameter of a memory operand
	base int    // 'm': base register index, -1 for a parameter
	off  int64  // 'm': offset
	regs []int  // 'v': register indices
}

type simInstr struct {
	op     string
	pred   int // register index of the guard, -1 for none
	negate bool
	args   []simOperand
	target int // branch target (instruction index)
}

type simKernel struct {
	name   string
	params []string
	nregs  int
	code   []simInstr
	shared map[string]uint64 // the module's .shared variables: offsets
	smem   int               // their total size
}

// sharedVars lays out the module's .shared variables in order.
func sharedVars(t *testing.T, code string) (map[string]uint64, int) {
	t.Helper()
	vars := map[string]uint64{}
	off := 0
	decl := regexp.MustCompile(`(?m)^\.shared\s+\.align\s+(\d+)\s+\.b(\d+)\s+(\w+)\[(\d+)\];`)
	for _, m := range decl.FindAllStringSubmatch(code, -1) {
		align, _ := strconv.Atoi(m[1])
		bits, _ := strconv.Atoi(m[2])
		count, _ := strconv.Atoi(m[4])
		off = (off + align - 1) / align * align
		vars[m[3]] = uint64(off)
		off += bits / 8 * count
	}
	return vars, off
}

// parseSimKernel compiles the entry name of its module for the
// interpreter.
func parseSimKernel(t *testing.T, name string) *simKernel {
	t.Helper()
	kd, ok := kernelByName(name)
	if !ok {
		t.Fatalf("no kernel %s", name)
	}
	var code string
	for _, m := range modules {
		if m.name == kd.module {
			code = ptxCode(t, m.ptx)
		}
	}
	var e *ptxEntry
	for _, x := range parseEntries(t, code) {
		if x.name == name {
			e = &x
		}
	}
	if e == nil {
		t.Fatalf("no entry %s", name)
	}
	k := &simKernel{name: name}
	k.shared, k.smem = sharedVars(t, code)
	for _, p := range e.params {
		f := strings.Fields(p)
		k.params = append(k.params, f[2])
	}
	regs := map[string]int{}
	regDecl := regexp.MustCompile(`^\.reg\s+\.\w+\s+%(\w+?)<(\d+)>$`)
	labelDef := regexp.MustCompile(`^(\$\w+):\s*`)
	labels := map[string]int{}
	type pending struct {
		idx   int
		label string
	}
	var jumps []pending
	for stmt := range strings.SplitSeq(e.body, ";") {
		stmt = strings.TrimSpace(stmt)
		for {
			m := labelDef.FindStringSubmatch(stmt)
			if m == nil {
				break
			}
			labels[m[1]] = len(k.code)
			stmt = strings.TrimSpace(stmt[len(m[0]):])
		}
		if stmt == "" {
			continue
		}
		if m := regDecl.FindStringSubmatch(strings.Join(strings.Fields(stmt), " ")); m != nil {
			n, _ := strconv.Atoi(m[2])
			for i := range n {
				regs["%"+m[1]+strconv.Itoa(i)] = len(regs)
			}
			continue
		}
		in := simInstr{pred: -1}
		if strings.HasPrefix(stmt, "@") {
			f := strings.Fields(stmt)
			g := strings.TrimPrefix(f[0], "@")
			if strings.HasPrefix(g, "!") {
				in.negate, g = true, g[1:]
			}
			r, ok := regs[g]
			if !ok {
				t.Fatalf("%s: guard %s not declared", name, g)
			}
			in.pred = r
			stmt = strings.TrimSpace(strings.TrimPrefix(stmt, f[0]))
		}
		op, rest, _ := strings.Cut(stmt, " ")
		if i := strings.IndexAny(stmt, " \t\n"); i >= 0 {
			op, rest = stmt[:i], stmt[i:]
		}
		in.op = op
		for _, a := range splitTop(rest) {
			in.args = append(in.args, parseOperand(t, name, a, regs, k.params, k.shared))
		}
		if strings.HasPrefix(op, "bra") {
			jumps = append(jumps, pending{len(k.code), in.args[0].name})
		}
		k.code = append(k.code, in)
	}
	for _, j := range jumps {
		idx, ok := labels[j.label]
		if !ok {
			t.Fatalf("%s: no label %s", name, j.label)
		}
		k.code[j.idx].target = idx
	}
	k.nregs = len(regs)
	return k
}

// splitTop splits operands at commas outside braces and brackets.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	if last := strings.TrimSpace(s[start:]); last != "" {
		out = append(out, last)
	}
	return out
}

func parseOperand(t *testing.T, kernel, a string, regs map[string]int, params []string, shared map[string]uint64) simOperand {
	t.Helper()
	a = strings.Join(strings.Fields(a), "")
	switch {
	case strings.HasPrefix(a, "{"):
		var o simOperand
		o.kind = 'v'
		for _, r := range strings.Split(strings.Trim(a, "{}"), ",") {
			idx, ok := regs[r]
			if !ok {
				t.Fatalf("%s: register %s not declared", kernel, r)
			}
			o.regs = append(o.regs, idx)
		}
		return o
	case strings.HasPrefix(a, "["):
		inner := strings.Trim(a, "[]")
		o := simOperand{kind: 'm', base: -1}
		base, off, hasOff := strings.Cut(inner, "+")
		if hasOff {
			n, err := strconv.ParseInt(off, 0, 64)
			if err != nil {
				t.Fatalf("%s: offset %q", kernel, a)
			}
			o.off = n
		}
		if r, ok := regs[base]; ok {
			o.base = r
		} else if slices.Contains(params, base) {
			o.name = base
		} else {
			t.Fatalf("%s: memory operand %q", kernel, a)
		}
		return o
	case strings.HasPrefix(a, "$"):
		return simOperand{kind: 'l', name: a}
	case strings.HasPrefix(a, "%"):
		if r, ok := regs[a]; ok {
			return simOperand{kind: 'r', reg: r}
		}
		switch a {
		case "%tid.x", "%ntid.x", "%ctaid.x", "%ctaid.y", "%nctaid.x":
			return simOperand{kind: 's', name: a}
		}
		t.Fatalf("%s: register %s not declared", kernel, a)
	}
	if off, ok := shared[a]; ok {
		return simOperand{kind: 'y', name: a, imm: off}
	}
	v, err := strconv.ParseUint(a, 0, 64)
	if err != nil {
		t.Fatalf("%s: operand %q", kernel, a)
	}
	return simOperand{kind: 'i', imm: v}
}

// simMem is global memory: allocations at distinct addresses.
type simMem struct {
	bases []uint64
	data  map[uint64][]byte
	next  uint64
}

func newSimMem() *simMem { return &simMem{data: map[uint64][]byte{}, next: 0x7f0000000000} }

func (m *simMem) alloc(b []byte) uint64 {
	p := m.next
	m.data[p] = b
	m.bases = append(m.bases, p)
	m.next += uint64(len(b)+255)/256*256 + 4096
	return p
}

// slice returns n bytes at addr, or an error outside every allocation.
func (m *simMem) slice(addr uint64, n int) ([]byte, error) {
	i := sort.Search(len(m.bases), func(i int) bool { return m.bases[i] > addr }) - 1
	if i >= 0 {
		b := m.data[m.bases[i]]
		off := addr - m.bases[i]
		if off+uint64(n) <= uint64(len(b)) {
			return b[off : off+uint64(n)], nil
		}
	}
	return nil, fmt.Errorf("access of %d bytes at %#x outside every allocation", n, addr)
}

// simThread is one thread's state.
type simThread struct {
	regs  []uint64
	pc    int
	tid   int
	state byte // 0 running, 'b' at bar.sync, 'm' at mma, 'd' done
}

// launch runs kernel k over grid × block threads with the given parameter
// values (in order).
func (k *simKernel) launch(t *testing.T, mem *simMem, grid [2]int, block int, params ...uint64) {
	t.Helper()
	if len(params) != len(k.params) {
		t.Fatalf("%s: %d parameters, want %d", k.name, len(params), len(k.params))
	}
	pv := map[string]uint64{}
	for i, p := range k.params {
		pv[p] = params[i]
	}
	for by := range grid[1] {
		for bx := range grid[0] {
			if err := k.runBlock(mem, pv, grid, [2]int{bx, by}, block); err != nil {
				t.Fatalf("%s block (%d, %d): %v", k.name, bx, by, err)
			}
		}
	}
}

// simShared is a block's shared memory with a race detector: between two
// barriers (an epoch), a byte written by one thread must not be read or
// written by another, nor a byte read by one thread written by another.
type simShared struct {
	b      []byte
	epoch  int
	wEpoch []int // per byte: epoch+1 of the last write, 0 for none
	writer []int
	rEpoch []int
	reader []int // -1 when several threads read it in rEpoch
}

func newSimShared(n int) *simShared {
	return &simShared{b: make([]byte, n), wEpoch: make([]int, n), writer: make([]int, n), rEpoch: make([]int, n), reader: make([]int, n)}
}

// access checks and records thread tid's access of [a, a+n).
func (sh *simShared) access(tid int, a uint64, n int, write bool) ([]byte, error) {
	if a%uint64(n) != 0 || a+uint64(n) > uint64(len(sh.b)) {
		return nil, fmt.Errorf("shared access of %d bytes at %d", n, a)
	}
	e := sh.epoch + 1
	for i := a; i < a+uint64(n); i++ {
		if sh.wEpoch[i] == e && sh.writer[i] != tid {
			return nil, fmt.Errorf("race on shared byte %d: thread %d and thread %d (which wrote it) between two barriers", i, tid, sh.writer[i])
		}
		if write {
			if sh.rEpoch[i] == e && sh.reader[i] != tid {
				return nil, fmt.Errorf("race on shared byte %d: thread %d writes what another thread read between two barriers", i, tid)
			}
			sh.wEpoch[i], sh.writer[i] = e, tid
		} else {
			if sh.rEpoch[i] == e && sh.reader[i] != tid {
				sh.reader[i] = -1
			} else if sh.rEpoch[i] != e {
				sh.rEpoch[i], sh.reader[i] = e, tid
			}
		}
	}
	return sh.b[a : a+uint64(n)], nil
}

func (k *simKernel) runBlock(mem *simMem, pv map[string]uint64, grid, cta [2]int, block int) error {
	shared := newSimShared(k.smem)
	threads := make([]*simThread, block)
	for i := range threads {
		threads[i] = &simThread{regs: make([]uint64, k.nregs), tid: i}
	}
	for {
		for _, th := range threads {
			if th.state == 0 {
				if err := k.run(th, mem, shared, pv, grid, cta, block); err != nil {
					return fmt.Errorf("thread %d: %w", th.tid, err)
				}
			}
		}
		progress := false
		// Warps whose live lanes all wait at the same mma execute it.
		for w := 0; w*32 < block; w++ {
			lanes := threads[w*32 : min(block, w*32+32)]
			at, live, pc := 0, 0, -1
			for _, th := range lanes {
				if th.state != 'd' {
					live++
				}
				if th.state == 'm' {
					at++
					if pc >= 0 && th.pc != pc {
						return fmt.Errorf("warp %d: lanes at different mma instructions", w)
					}
					pc = th.pc
				}
			}
			if at == 0 {
				continue
			}
			if at != 32 || live != 32 {
				if at == live {
					return fmt.Errorf("warp %d: mma with %d lanes, want 32", w, at)
				}
				continue
			}
			k.mma(lanes, k.code[pc])
			for _, th := range lanes {
				th.pc++
				th.state = 0
			}
			progress = true
		}
		if progress {
			continue
		}
		atBar, done := 0, 0
		for _, th := range threads {
			switch th.state {
			case 'b':
				atBar++
			case 'd':
				done++
			}
		}
		if done == block {
			return nil
		}
		if atBar+done == block && atBar > 0 {
			if done > 0 {
				return fmt.Errorf("bar.sync with %d threads exited", done)
			}
			for _, th := range threads {
				th.pc++
				th.state = 0
			}
			shared.epoch++
			continue
		}
		return fmt.Errorf("deadlock: %d at a barrier, %d done of %d", atBar, done, block)
	}
}

// mma computes D = A·B + C for one warp, from the lanes' registers.
func (k *simKernel) mma(lanes []*simThread, in simInstr) {
	var a [16][32]int32
	var b [32][8]int32
	var c [16][8]int32
	byteOf := func(v uint64, i int) int32 { return int32(int8(uint8(v >> (8 * i)))) }
	for lane, th := range lanes {
		g, tq := lane>>2, lane&3
		for i := range 16 {
			row := g
			if !(i < 4 || (i >= 8 && i < 12)) {
				row = g + 8
			}
			col := 4*tq + (i & 3)
			if i >= 8 {
				col += 16
			}
			a[row][col] = byteOf(th.regs[in.args[1].regs[i/4]], i%4)
		}
		for i := range 8 {
			row := 4*tq + (i & 3)
			if i >= 4 {
				row += 16
			}
			b[row][g] = byteOf(th.regs[in.args[2].regs[i/4]], i%4)
		}
		for i := range 4 {
			row := g
			if i >= 2 {
				row = g + 8
			}
			c[row][2*tq+(i&1)] = int32(uint32(th.regs[in.args[3].regs[i]]))
		}
	}
	for lane, th := range lanes {
		g, tq := lane>>2, lane&3
		for i := range 4 {
			row := g
			if i >= 2 {
				row = g + 8
			}
			col := 2*tq + (i & 1)
			sum := c[row][col]
			for kk := range 32 {
				sum += a[row][kk] * b[kk][col]
			}
			th.regs[in.args[0].regs[i]] = uint64(uint32(sum))
		}
	}
}

// run executes th until it exits or reaches a collective.
func (k *simKernel) run(th *simThread, mem *simMem, shared *simShared, pv map[string]uint64, grid, cta [2]int, block int) error {
	for steps := 0; ; steps++ {
		if steps > 1<<26 {
			return fmt.Errorf("runaway at pc %d", th.pc)
		}
		in := k.code[th.pc]
		if in.pred >= 0 && (th.regs[in.pred] != 0) == in.negate {
			th.pc++
			continue
		}
		val := func(o simOperand) uint64 {
			switch o.kind {
			case 'r':
				return th.regs[o.reg]
			case 'i':
				return o.imm
			case 'y':
				return o.imm // a .shared variable's offset in the block's shared memory
			case 's':
				switch o.name {
				case "%tid.x":
					return uint64(th.tid)
				case "%ntid.x":
					return uint64(block)
				case "%ctaid.x":
					return uint64(cta[0])
				case "%ctaid.y":
					return uint64(cta[1])
				case "%nctaid.x":
					return uint64(grid[0])
				}
			}
			panic("operand " + string(o.kind))
		}
		addr := func(o simOperand) uint64 {
			if o.base < 0 {
				return pv[o.name] + uint64(o.off)
			}
			return th.regs[o.base] + uint64(o.off)
		}
		op := in.op
		width := 64
		if strings.HasSuffix(op, "32") || strings.HasSuffix(op, ".u8") {
			width = 32
		}
		mask := ^uint64(0)
		if width == 32 {
			mask = 0xFFFFFFFF
		}
		set := func(v uint64) { th.regs[in.args[0].reg] = v & mask }
		var x, y uint64
		if len(in.args) > 1 && in.args[1].kind != 'm' && in.args[1].kind != 'v' && in.args[1].kind != 'l' {
			x = val(in.args[1]) & mask
		}
		if len(in.args) > 2 && in.args[2].kind != 'v' {
			y = val(in.args[2]) & mask
		}
		switch {
		case strings.HasPrefix(op, "ld.param."):
			set(pv[in.args[1].name])
		case op == "cvta.to.global.u64", strings.HasPrefix(op, "mov."), op == "cvt.u64.u32":
			set(x)
		case op == "mad.lo.u32":
			set(x*y + val(in.args[3]))
		case op == "mul.wide.u32":
			th.regs[in.args[0].reg] = x * y
		case strings.HasPrefix(op, "mul.lo."):
			set(x * y)
		case op == "mul.hi.u64":
			hi, _ := mulHi(x, y)
			set(hi)
		case strings.HasPrefix(op, "add."):
			set(x + y)
		case strings.HasPrefix(op, "sub."):
			set(x - y)
		case strings.HasPrefix(op, "and."):
			set(x & y)
		case strings.HasPrefix(op, "or."):
			set(x | y)
		case strings.HasPrefix(op, "xor."):
			set(x ^ y)
		case strings.HasPrefix(op, "shl."):
			set(x << y)
		case strings.HasPrefix(op, "shr."):
			set(x >> y)
		case op == "min.u32":
			set(min(x, y))
		case op == "div.u32":
			set(x / y)
		case strings.HasPrefix(op, "setp."):
			var r bool
			switch strings.Split(op, ".")[1] {
			case "eq":
				r = x == y
			case "ne":
				r = x != y
			case "ge":
				r = x >= y
			default:
				return fmt.Errorf("setp %s", op)
			}
			th.regs[in.args[0].reg] = 0
			if r {
				th.regs[in.args[0].reg] = 1
			}
		case strings.HasPrefix(op, "ld.global."), strings.HasPrefix(op, "ld.shared."),
			strings.HasPrefix(op, "st.global."), strings.HasPrefix(op, "st.shared."):
			load := strings.HasPrefix(op, "ld.")
			size := map[string]int{"u8": 1, "u16": 2, "u32": 4, "u64": 8}[op[strings.LastIndex(op, ".")+1:]]
			memArg, valArg := in.args[0], in.args[1]
			if load {
				memArg, valArg = in.args[1], in.args[0]
			}
			regs := []int{valArg.reg}
			if valArg.kind == 'v' {
				regs = valArg.regs
			}
			if size == 0 || (valArg.kind != 'r' && valArg.kind != 'v') {
				return fmt.Errorf("pc %d: %s not simulated", th.pc, op)
			}
			n := size * len(regs)
			a := addr(memArg)
			var b []byte
			if strings.Contains(op, ".shared.") {
				var err error
				if b, err = shared.access(th.tid, a, n, !load); err != nil {
					return fmt.Errorf("pc %d %s: %w", th.pc, op, err)
				}
			} else {
				if a%uint64(n) != 0 {
					return fmt.Errorf("pc %d %s: global access of %d bytes at %#x misaligned", th.pc, op, n, a)
				}
				var err error
				if b, err = mem.slice(a, n); err != nil {
					return fmt.Errorf("pc %d %s: %w", th.pc, op, err)
				}
			}
			for i, r := range regs {
				var v [8]byte
				if load {
					copy(v[:], b[i*size:(i+1)*size])
					th.regs[r] = binary.LittleEndian.Uint64(v[:])
				} else {
					binary.LittleEndian.PutUint64(v[:], th.regs[r])
					copy(b[i*size:(i+1)*size], v[:size])
				}
			}
		case op == "bra", op == "bra.uni":
			th.pc = in.target
			continue
		case op == "bar.sync":
			th.state = 'b'
			return nil
		case strings.HasPrefix(op, "mma."):
			th.state = 'm'
			return nil
		case op == "ret":
			th.state = 'd'
			return nil
		default:
			return fmt.Errorf("instruction %s not simulated", op)
		}
		th.pc++
	}
}

// mulHi returns the high and low words of x·y.
func mulHi(x, y uint64) (uint64, uint64) {
	const m = 0xFFFFFFFF
	x0, x1 := x&m, x>>32
	y0, y1 := y&m, y>>32
	w0 := x0 * y0
	t := x1*y0 + w0>>32
	w1 := t&m + x0*y1
	return x1*y1 + t>>32 + w1>>32, x * y
}

// refStep is one chain step by its definition: y[i][c] = mix(Σ_k
// x[i][k]·b[k][c] mod 256).
func refStep(x, b []byte, n int) []byte {
	y := make([]byte, n*n)
	for i := range n {
		for c := range n {
			var acc uint32
			for k := range n {
				acc += uint32(x[i*n+k]) * uint32(b[k*n+c])
			}
			v := byte(acc)
			y[i*n+c] = v ^ v>>4
		}
	}
	return y
}

func randBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	s := seed*0x9E3779B97F4A7C15 + 1
	for i := range b {
		s ^= s << 13
		s ^= s >> 7
		s ^= s << 17
		b[i] = byte(s >> 24)
	}
	return b
}

// TestPTXSimChain runs gm_transpose, gm_chain_step, gm_chain_step_mma and
// gm_chain_step_tiled from their modules in the interpreter, with the host's grids, and
// compares with the step's definition.
func TestPTXSimChain(t *testing.T) {
	tr := parseSimKernel(t, kTranspose)
	step := parseSimKernel(t, kStep)
	mma := parseSimKernel(t, kStepMMA)
	tiled := parseSimKernel(t, kStepTiled)
	for _, n := range []int{128, 256, 384} {
		x, b := randBytes(n*n, uint64(n)), randBytes(n*n, uint64(n)+1)
		want := refStep(x, b, n)
		mem := newSimMem()
		px, pb, py := mem.alloc(slices.Clone(x)), mem.alloc(slices.Clone(b)), mem.alloc(randBytes(n*n, 99))
		nn := uint64(n)
		cb := (n + 255) / 256
		if n <= 128 { // the plain kernel is slow to interpret: one size
			step.launch(t, mem, [2]int{n, cb}, 256, px, pb, py, nn)
			if got, _ := mem.slice(py, n*n); !slices.Equal(got, want) {
				t.Fatalf("n=%d: gm_chain_step differs from the definition", n)
			}
		}
		pbt := mem.alloc(make([]byte, n*n))
		tr.launch(t, mem, [2]int{n / 32, n / 32}, 256, pb, pbt, nn)
		bt, _ := mem.slice(pbt, n*n)
		for k := range n {
			for c := range n {
				if bt[c*n+k] != b[k*n+c] {
					t.Fatalf("n=%d: gm_transpose: bt[%d][%d] = %d, want %d", n, c, k, bt[c*n+k], b[k*n+c])
				}
			}
		}
		py2 := mem.alloc(randBytes(n*n, 98))
		mma.launch(t, mem, [2]int{n / 16, n / 128}, 128, px, pbt, py2, nn)
		if got, _ := mem.slice(py2, n*n); !slices.Equal(got, want) {
			bad := 0
			for i := range got {
				if got[i] != want[i] {
					bad = i
					break
				}
			}
			t.Fatalf("n=%d: gm_chain_step_mma differs from the definition first at row %d column %d", n, bad/n, bad%n)
		}
		py3 := mem.alloc(randBytes(n*n, 97))
		tiled.launch(t, mem, [2]int{n / 128, n / 128}, 256, px, pbt, py3, nn)
		if got, _ := mem.slice(py3, n*n); !slices.Equal(got, want) {
			bad := 0
			for i := range got {
				if got[i] != want[i] {
					bad = i
					break
				}
			}
			t.Fatalf("n=%d: gm_chain_step_tiled differs from the definition first at row %d column %d", n, bad/n, bad%n)
		}
	}
}

// TestPTXSimFold runs gm_fold_partial and gm_fold_reduce from their module
// in the interpreter over windows of several buffers, several blocks and
// block sizes, and compares with challenge.MemFold.
func TestPTXSimFold(t *testing.T) {
	part := parseSimKernel(t, kFoldPartial)
	red := parseSimKernel(t, kFoldReduce)
	tests := []struct {
		words, wpb, threads int
	}{
		{8, 1024, 256},    // one block, most threads idle
		{2500, 1024, 256}, // three blocks, the last partial
		{3000, 1000, 64},  // a block size that is not a multiple of the threads
		{4096, 4096, 32},  // one block of many words per thread
		// Words per thread 1 to 9 around the four-word unrolled loop: the
		// top m mod 4 words one at a time, then groups of four.
		{32, 32, 32},   // m = 1 for every thread
		{64, 64, 32},   // m = 2
		{96, 96, 32},   // m = 3
		{128, 128, 32}, // m = 4: the unrolled loop only
		{160, 160, 32}, // m = 5
		{224, 224, 32}, // m = 7
		{256, 256, 32}, // m = 8
		{288, 288, 32}, // m = 9
		// m differs between threads of a block: 300 = 9*32 + 12, so
		// threads 0-11 take 10 words and the rest 9.
		{300, 300, 32},
		// wpb not a multiple of 4*threads (232 = 7*32 + 8), and a last
		// short block of 1000 - 4*232 = 72 words (m = 3 or 2).
		{1000, 232, 32},
		// wpb 1000 = 3*256 + 232 and a last block of 200 words: threads
		// take 4 or 3 words, then 1 or none.
		{2200, 1000, 256},
		{4099, 4096, 16}, // a last block of 3 words, most threads idle
	}
	// Random words, then words 2^64-1, P, P-1, 2^61, 2^63 and 0 in turn:
	// the largest inputs to a step, whose sums the kernel leaves above P.
	for _, edge := range []bool{false, true} {
		for _, tt := range tests {
			const buffers = 3
			mem := newSimMem()
			wins := make([]byte, 8*buffers)
			rhos := make([]byte, 8*buffers)
			raw := make([][]byte, buffers)
			rho := []uint64{0, 1, 0x1234567890ABCDE % challenge.P, challenge.P - 1}
			for j := range buffers {
				raw[j] = randBytes(8*tt.words+64, uint64(j+tt.words))
				for i := 0; i < 8; i++ { // words ≥ P too
					raw[j][8*i+7] = 0xFF
				}
				if edge {
					edges := []uint64{^uint64(0), challenge.P, challenge.P - 1, 1 << 61, 1 << 63, 0}
					for i := range tt.words + 8 {
						binary.LittleEndian.PutUint64(raw[j][8*i:], edges[i%len(edges)])
					}
				}
				base := mem.alloc(raw[j])
				binary.LittleEndian.PutUint64(wins[8*j:], base+64) // windows at an offset
				binary.LittleEndian.PutUint64(rhos[8*j:], rho[(j+tt.threads)%len(rho)])
			}
			pw, pr := mem.alloc(wins), mem.alloc(rhos)
			blocks := (tt.words + tt.wpb - 1) / tt.wpb
			partials := mem.alloc(make([]byte, 8*buffers*blocks))
			out := mem.alloc(make([]byte, 8*buffers))
			part.launch(t, mem, [2]int{blocks, buffers}, tt.threads, pw, pr, partials, uint64(tt.words), uint64(tt.wpb))
			red.launch(t, mem, [2]int{buffers, 1}, 32, partials, out, uint64(blocks))
			got, _ := mem.slice(out, 8*buffers)
			for j := range buffers {
				r := binary.LittleEndian.Uint64(rhos[8*j:])
				want := challenge.MemFold(raw[j][64:64+8*tt.words], r)
				if g := binary.LittleEndian.Uint64(got[8*j:]); g != want {
					t.Errorf("words %d, wpb %d, %d threads, edge words %v, buffer %d, ρ %d: fold %d, want %d", tt.words, tt.wpb, tt.threads, edge, j, r, g, want)
				}
			}
		}
	}
}

// TestPTXSimMMAPeak runs gm_mma_peak: every thread writes 1024·iters.
func TestPTXSimMMAPeak(t *testing.T) {
	k := parseSimKernel(t, kMMAPeak)
	mem := newSimMem()
	const blocks, threads, iters = 2, 64, 3
	out := mem.alloc(make([]byte, 4*blocks*threads))
	k.launch(t, mem, [2]int{blocks, 1}, threads, out, iters)
	got, _ := mem.slice(out, 4*blocks*threads)
	for i := range blocks * threads {
		if v := binary.LittleEndian.Uint32(got[4*i:]); v != 1024*iters {
			t.Fatalf("thread %d wrote %d, want %d", i, v, 1024*iters)
		}
	}
}
