package market

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/p2p"
)

// Limits on a filter's size, so that a filter from a peer or an API caller
// cannot cost much to parse or to match.
const (
	MaxFilterBytes = 4096
	MaxFilterTerms = 32
)

// Op is a comparison operator of a filter term.
type Op uint8

// The operators. The zero Op is not valid.
const (
	OpEq Op = iota + 1 // =
	OpNe               // !=
	OpLt               // <
	OpLe               // <=
	OpGt               // >
	OpGe               // >=
)

// opsLongestFirst is the order in which operators are recognised, so that
// "<=" wins over "<".
var opsLongestFirst = [...]Op{OpLe, OpGe, OpNe, OpEq, OpLt, OpGt}

const (
	opChars    = "=!<>"
	opsAllowed = "= != < <= > >="
)

// String returns the operator's symbol.
func (op Op) String() string {
	switch op {
	case OpEq:
		return "="
	case OpNe:
		return "!="
	case OpLt:
		return "<"
	case OpLe:
		return "<="
	case OpGt:
		return ">"
	case OpGe:
		return ">="
	}
	return "Op(" + strconv.Itoa(int(op)) + ")"
}

// ordering reports whether op compares by order rather than equality.
func (op Op) ordering() bool { return op >= OpLt && op <= OpGe }

// holds reports whether a comparison result c (as from cmp.Compare(have,
// want)) satisfies op.
func (op Op) holds(c int) bool {
	switch op {
	case OpEq:
		return c == 0
	case OpNe:
		return c != 0
	case OpLt:
		return c < 0
	case OpLe:
		return c <= 0
	case OpGt:
		return c > 0
	case OpGe:
		return c >= 0
	}
	return false
}

// Term is one KEY OP VALUE term of a filter.
type Term struct {
	Key    string   // canonical (lower-case) key, e.g. "vram"
	Op     Op       // comparison
	Values []string // alternatives as written; more than one only with OpEq and OpNe

	vals []value // Values parsed by the key's type; set by ParseFilter
}

// String returns the term in canonical form, e.g. "model=h100-sxm|a100-80gb".
func (t Term) String() string {
	return t.Key + t.Op.String() + strings.Join(t.Values, "|")
}

// Filter is a conjunction of terms. The zero Filter matches everything.
// Build one with ParseFilter.
type Filter struct {
	Terms []Term
}

// FilterError reports a filter that cannot be parsed. Index is the 1-based
// position of the bad term and Term its text; both are zero for an error
// about the filter as a whole (e.g. too long).
type FilterError struct {
	Term   string
	Index  int
	Reason string
}

func (e *FilterError) Error() string {
	if e.Index == 0 {
		return "filter: " + e.Reason
	}
	return fmt.Sprintf("filter term %d %q: %s", e.Index, e.Term, e.Reason)
}

// FilterOption configures ParseFilter.
type FilterOption func(*filterConfig)

type filterConfig struct {
	anyModel bool // accept model slugs the catalog does not know
}

// AnyModel makes ParseFilter accept any well-formed model slug, not only
// the catalog's. It is for filters that come from peers or from stored
// records, which may name models that this build's catalog does not know.
func AnyModel() FilterOption {
	return func(c *filterConfig) { c.anyModel = true }
}

// ParseFilter parses a filter: space-separated terms KEY OP VALUE, where OP
// is one of = != < <= > >= and VALUE may list alternatives separated by "|"
// (with = and != only). Terms split across several command-line arguments
// may be joined with spaces first. The empty string gives the zero Filter.
//
// Keys and their values:
//
//	model      a model slug of the catalog (= and != only; any slug with AnyModel)
//	region     region name, compared case-insensitively (= and != only)
//	count      GPUs of the model at the supplier (whole number)
//	free       of which free (whole number)
//	vram       memory per GPU in GiB (number)
//	cc         compute capability "N.M" or "N", compared as (major, minor)
//	price      per GPU-hour in currency units, at most 6 decimal places
//	rep        reputation, 0 to 1
//	uptime     uptime percentage, 0 to 100
//	tflops     dense BF16 TFLOPS (number)
//	verified   true, false, yes, no, 1 or 0 (= and != only)
//	simulated  true, false, yes, no, 1 or 0 (= and != only)
//	reach      how the supplier is reached, as its profile states it:
//	           public, punchable, relay-only or unknown (= and != only)
//	pcie       PCIe link generation of the GPUs (whole number)
//	nvlink     NVLink links active per GPU (whole number)
//	cuda       CUDA version the supplier's driver supports, "N.M" or "N"
//	membw      memory bandwidth of the model's spec, GB/s (number)
//
// Numbers are non-negative decimals such as 80 or 0.95. Errors are
// *FilterError values naming the bad term.
func ParseFilter(s string, opts ...FilterOption) (Filter, error) {
	var cfg filterConfig
	for _, opt := range opts {
		opt(&cfg)
	}
	if len(s) > MaxFilterBytes {
		return Filter{}, &FilterError{Reason: fmt.Sprintf("filter is %d bytes; the limit is %d", len(s), MaxFilterBytes)}
	}
	fields := strings.Fields(s)
	if len(fields) > MaxFilterTerms {
		return Filter{}, &FilterError{Reason: fmt.Sprintf("filter has %d terms; the limit is %d", len(fields), MaxFilterTerms)}
	}
	var f Filter
	for i, text := range fields {
		t, err := parseTerm(text, &cfg)
		if err != nil {
			return Filter{}, &FilterError{Term: text, Index: i + 1, Reason: err.Error()}
		}
		f.Terms = append(f.Terms, t)
	}
	return f, nil
}

// String returns the filter in canonical form: canonical terms separated by
// single spaces. ParseFilter(f.String()) gives back an equal Filter.
func (f Filter) String() string {
	parts := make([]string, len(f.Terms))
	for i, t := range f.Terms {
		parts[i] = t.String()
	}
	return strings.Join(parts, " ")
}

// Has reports whether f has a term about key (a canonical key, e.g.
// "simulated").
func (f Filter) Has(key string) bool {
	return slices.ContainsFunc(f.Terms, func(t Term) bool { return t.Key == key })
}

// realOnly is the term RealOnly adds.
var realOnly = Term{Key: "simulated", Op: OpEq, Values: []string{"false"}, vals: []value{{b: false}}}

// RealOnly returns f with the term simulated=false added, unless f
// already says something of simulated GPUs (simulated=true, simulated!=
// ...) or allowSimulated is set; added reports whether it added the term.
// Renters lease, run on and are shown real GPUs only unless they ask for
// simulated ones: a simulated GPU proves nothing about hardware.
func (f Filter) RealOnly(allowSimulated bool) (out Filter, added bool) {
	if allowSimulated || f.Has("simulated") {
		return f, false
	}
	return Filter{Terms: append(slices.Clip(f.Terms), realOnly)}, true
}

// Match reports whether o satisfies every term of f. When it does not,
// reason names the first failing term and what the offer has, e.g.
// "vram>=80: has 24". An offer lacking the attribute a term is about (no
// advertised price, unknown reputation or uptime) does not satisfy it.
func (f Filter) Match(o Offer) (ok bool, reason string) {
	for _, t := range f.Terms {
		if ok, why := t.match(o); !ok {
			return false, t.String() + ": " + why
		}
	}
	return true, ""
}

// Models returns the model slugs that f allows, sorted and deduplicated:
// those every model= term lists, less those any model!= term lists. It
// returns nil when f does not restrict the model to a list (no model= term),
// and an empty, non-nil slice when its model terms exclude every model.
func (f Filter) Models() []string {
	var allowed []string
	restricted := false
	for _, t := range f.Terms {
		if t.Key != "model" || t.Op != OpEq {
			continue
		}
		if !restricted {
			allowed, restricted = slices.Clone(t.Values), true
			continue
		}
		allowed = slices.DeleteFunc(allowed, func(m string) bool { return !slices.Contains(t.Values, m) })
	}
	if !restricted {
		return nil
	}
	for _, t := range f.Terms {
		if t.Key == "model" && t.Op == OpNe {
			allowed = slices.DeleteFunc(allowed, func(m string) bool { return slices.Contains(t.Values, m) })
		}
	}
	slices.Sort(allowed)
	return slices.Compact(allowed)
}

// match reports whether o satisfies t and, if not, why.
func (t Term) match(o Offer) (bool, string) {
	spec, vals, err := t.resolve()
	if err != nil {
		return false, err.Error()
	}
	have, known := spec.attr(o)
	if !known {
		return false, spec.absent
	}
	if !t.holds(spec, have, vals) {
		return false, "has " + spec.format(have)
	}
	return true, ""
}

// holds applies t's operator to have and the parsed alternatives: with !=
// no alternative may equal have; otherwise one must satisfy the operator.
func (t Term) holds(spec *keySpec, have value, vals []value) bool {
	if t.Op == OpNe {
		return !slices.ContainsFunc(vals, func(v value) bool { return spec.compare(have, v) == 0 })
	}
	return slices.ContainsFunc(vals, func(v value) bool { return t.Op.holds(spec.compare(have, v)) })
}

// resolve returns t's key spec and parsed values. A Term built by hand
// rather than by ParseFilter has no parsed values; it is parsed from its
// text here.
func (t Term) resolve() (*keySpec, []value, error) {
	if t.Op < OpEq || t.Op > OpGe {
		return nil, nil, fmt.Errorf("invalid operator %s (want one of %s)", t.Op, opsAllowed)
	}
	spec := lookupKey(t.Key)
	if spec != nil && len(t.vals) == len(t.Values) && len(t.vals) > 0 {
		return spec, t.vals, nil
	}
	parsed, err := parseTerm(t.String(), &filterConfig{anyModel: true})
	if err != nil {
		return nil, nil, err
	}
	return lookupKey(parsed.Key), parsed.vals, nil
}

// parseTerm parses one term's text.
func parseTerm(text string, cfg *filterConfig) (Term, error) {
	rawKey, op, rawValue, err := splitTerm(text)
	if err != nil {
		return Term{}, err
	}
	spec := lookupKey(strings.ToLower(rawKey))
	if spec == nil {
		return Term{}, fmt.Errorf("unknown key %q (valid keys: %s)", rawKey, keyNames())
	}
	if err := spec.checkOp(op); err != nil {
		return Term{}, err
	}
	alts, err := splitAlternatives(spec, op, rawValue)
	if err != nil {
		return Term{}, err
	}
	t := Term{Key: spec.name, Op: op, Values: alts, vals: make([]value, len(alts))}
	for i, alt := range alts {
		if t.vals[i], err = spec.parse(alt); err != nil {
			return Term{}, err
		}
		if err := cfg.checkModel(spec, alt); err != nil {
			return Term{}, err
		}
		if spec.name == "reach" && !p2p.Reach(alt).Valid() {
			return Term{}, fmt.Errorf("unknown reach %q (known: public, punchable, relay-only, unknown)", alt)
		}
	}
	return t, nil
}

// splitTerm splits a term into key, operator and value text.
func splitTerm(text string) (key string, op Op, val string, err error) {
	i := strings.IndexAny(text, opChars)
	if i < 0 {
		return "", 0, "", fmt.Errorf("missing operator (want KEY OP VALUE with no spaces, OP one of %s)", opsAllowed)
	}
	if i == 0 {
		return "", 0, "", fmt.Errorf("missing key before the operator (valid keys: %s)", keyNames())
	}
	key, rest := text[:i], text[i:]
	run := rest[:len(rest)-len(strings.TrimLeft(rest, opChars))]
	for _, cand := range opsLongestFirst {
		if run == cand.String() {
			return key, cand, rest[len(run):], nil
		}
	}
	return "", 0, "", fmt.Errorf("invalid operator %q (want one of %s)", run, opsAllowed)
}

// splitAlternatives splits a value on "|" and checks that alternatives are
// non-empty and used only with = and !=.
func splitAlternatives(spec *keySpec, op Op, raw string) ([]string, error) {
	if raw == "" {
		return nil, fmt.Errorf("empty value (want e.g. %s%s%s)", spec.name, op, spec.example)
	}
	alts := strings.Split(raw, "|")
	if len(alts) > 1 && op.ordering() {
		return nil, fmt.Errorf("alternatives (|) need = or !=, not %s", op)
	}
	if slices.Contains(alts, "") {
		return nil, fmt.Errorf("empty alternative in %q (separate values with one |, e.g. %s=%s|%s)", raw, spec.name, spec.example, spec.example)
	}
	return alts, nil
}

// checkModel rejects a model slug that the catalog does not know, unless
// any model is accepted.
func (c *filterConfig) checkModel(spec *keySpec, slug string) error {
	if spec.name != "model" || c.anyModel || catalog.Known(slug) {
		return nil
	}
	return fmt.Errorf("unknown model %q (known: %s)", slug, strings.Join(catalog.Slugs(), ", "))
}

// kind is the type of a filter key's values.
type kind uint8

const (
	kindString kind = iota + 1 // = and != only
	kindInt                    // whole number
	kindNumber                 // non-negative decimal, compared as float64
	kindPrice                  // decimal currency units, exact money.Micros
	kindCC                     // compute capability major.minor
	kindBool                   // = and != only
)

// value is a parsed filter value or an offer attribute; which field is used
// depends on the key's kind.
type value struct {
	str string       // kindString
	num float64      // kindNumber
	n   int64        // kindInt
	m   money.Micros // kindPrice
	cc  ccVersion    // kindCC
	b   bool         // kindBool
}

// keySpec describes one filter key.
type keySpec struct {
	name    string
	kind    kind
	fold    bool    // kindString: compare case-insensitively
	max     float64 // kindNumber: largest valid value; 0 = none
	example string  // a valid value, shown in errors
	absent  string  // Match's reason when the offer lacks the attribute
	attr    func(Offer) (value, bool)
}

// filterKeys is the read-only table of filter keys, in the order errors
// list them.
var filterKeys = [...]keySpec{
	{name: "model", kind: kindString, example: "h100-sxm", absent: "model unknown",
		attr: func(o Offer) (value, bool) { return value{str: o.Model}, o.Model != "" }},
	{name: "region", kind: kindString, fold: true, example: "eu-west", absent: "region unknown",
		attr: func(o Offer) (value, bool) { return value{str: o.Region}, o.Region != "" }},
	{name: "count", kind: kindInt, example: "8",
		attr: func(o Offer) (value, bool) { return value{n: int64(o.Count)}, true }},
	{name: "free", kind: kindInt, example: "1",
		attr: func(o Offer) (value, bool) { return value{n: int64(o.Free)}, true }},
	{name: "vram", kind: kindNumber, example: "80",
		attr: func(o Offer) (value, bool) { return value{num: float64(o.VRAMGiB)}, true }},
	{name: "cc", kind: kindCC, example: "8.9", absent: "compute capability unknown",
		attr: offerCC},
	{name: "price", kind: kindPrice, example: "2.50", absent: "price not advertised",
		attr: func(o Offer) (value, bool) { return value{m: o.PriceMicros}, o.PriceMicros > 0 }},
	{name: "rep", kind: kindNumber, max: 1, example: "0.9", absent: "reputation unknown",
		attr: func(o Offer) (value, bool) { return optionalNumber(o.Reputation) }},
	{name: "uptime", kind: kindNumber, max: 100, example: "99", absent: "uptime unknown",
		attr: func(o Offer) (value, bool) { return optionalNumber(o.UptimePct) }},
	{name: "tflops", kind: kindNumber, example: "500",
		attr: func(o Offer) (value, bool) { return value{num: float64(o.TFLOPS)}, true }},
	{name: "verified", kind: kindBool, example: "true",
		attr: func(o Offer) (value, bool) { return value{b: o.Verified}, true }},
	{name: "simulated", kind: kindBool, example: "false",
		attr: func(o Offer) (value, bool) { return value{b: o.Simulated}, true }},
	{name: "reach", kind: kindString, example: "punchable", absent: "reach unknown",
		attr: func(o Offer) (value, bool) { return value{str: o.Reach}, o.Reach != "" }},
	{name: "pcie", kind: kindInt, example: "4", absent: "pcie generation unknown",
		attr: func(o Offer) (value, bool) { return value{n: int64(o.PCIeGen)}, o.PCIeGen > 0 }},
	{name: "nvlink", kind: kindInt, example: "1", absent: "nvlink unknown",
		attr: func(o Offer) (value, bool) {
			if o.NVLinks == nil {
				return value{}, false
			}
			return value{n: int64(*o.NVLinks)}, true
		}},
	{name: "cuda", kind: kindCC, example: "12.4", absent: "cuda version unknown",
		attr: func(o Offer) (value, bool) {
			v, err := parseCC(o.CUDAVersion)
			return value{cc: v}, err == nil
		}},
	{name: "membw", kind: kindNumber, example: "2000", absent: "memory bandwidth unknown",
		attr: func(o Offer) (value, bool) { return value{num: float64(o.MemBandwidthGBps)}, o.MemBandwidthGBps > 0 }},
}

func offerCC(o Offer) (value, bool) {
	cc, err := parseCC(o.ComputeCapability)
	return value{cc: cc}, err == nil
}

func optionalNumber(p *float64) (value, bool) {
	if p == nil {
		return value{}, false
	}
	return value{num: *p}, true
}

// lookupKey returns the spec of a canonical key, or nil.
func lookupKey(name string) *keySpec {
	for i := range filterKeys {
		if filterKeys[i].name == name {
			return &filterKeys[i]
		}
	}
	return nil
}

// keyNames lists the valid keys for error messages.
func keyNames() string {
	names := make([]string, len(filterKeys))
	for i := range filterKeys {
		names[i] = filterKeys[i].name
	}
	return strings.Join(names, ", ")
}

// checkOp rejects an ordering operator on a key that has no order.
func (k *keySpec) checkOp(op Op) error {
	if !op.ordering() {
		return nil
	}
	switch k.kind {
	case kindString:
		return fmt.Errorf("operator %s is not valid for %s, a string (use = or !=)", op, k.name)
	case kindBool:
		return fmt.Errorf("operator %s is not valid for %s, a bool (use = or !=)", op, k.name)
	}
	return nil
}

// parse parses one alternative by the key's kind.
func (k *keySpec) parse(s string) (value, error) {
	switch k.kind {
	case kindString:
		return value{str: s}, checkWord(k.name, s)
	case kindInt:
		n, err := parseWhole(k.name, s)
		return value{n: n}, err
	case kindNumber:
		f, err := parseNumber(k, s)
		return value{num: f}, err
	case kindPrice:
		m, err := money.ParseMicros(s)
		if err != nil {
			return value{}, fmt.Errorf("%s: %w", k.name, err)
		}
		return value{m: m}, nil
	case kindCC:
		cc, err := parseCC(s)
		if err != nil && k.name != "cc" {
			err = fmt.Errorf("bad %s version %q (want N.M or N, e.g. %s)", k.name, s, k.example)
		}
		return value{cc: cc}, err
	case kindBool:
		b, err := parseBool(k.name, s)
		return value{b: b}, err
	}
	return value{}, fmt.Errorf("key %s has no type", k.name)
}

// compare orders an offer's attribute a against a filter value b. Kinds
// without an order return 0 when equal and 1 otherwise.
func (k *keySpec) compare(a, b value) int {
	switch k.kind {
	case kindString:
		if a.str == b.str || (k.fold && strings.EqualFold(a.str, b.str)) {
			return 0
		}
		return 1
	case kindInt:
		return cmp.Compare(a.n, b.n)
	case kindPrice:
		return cmp.Compare(a.m, b.m)
	case kindNumber:
		return cmp.Compare(a.num, b.num)
	case kindCC:
		return a.cc.compare(b.cc)
	case kindBool:
		if a.b == b.b {
			return 0
		}
		return 1
	}
	return 1
}

// format renders an offer's attribute for Match's reason.
func (k *keySpec) format(v value) string {
	switch k.kind {
	case kindString:
		return v.str
	case kindInt:
		return strconv.FormatInt(v.n, 10)
	case kindNumber:
		return strconv.FormatFloat(v.num, 'f', -1, 64)
	case kindPrice:
		return v.m.String()
	case kindCC:
		return v.cc.String()
	case kindBool:
		return strconv.FormatBool(v.b)
	}
	return "?"
}

// checkWord accepts a string value made of letters, digits and - _ . : / +.
func checkWord(key, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s value %q is not valid UTF-8", key, s)
	}
	for _, r := range s {
		if unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("-_.:/+", r) {
			continue
		}
		return fmt.Errorf("%s value %q has invalid character %q (allowed: letters, digits, - _ . : / +)", key, s, r)
	}
	return nil
}

// splitDecimal checks that s is a non-negative decimal "D+" or "D+.D+" and
// returns its whole and fraction digits.
func splitDecimal(key, s string) (whole, frac string, err error) {
	if rest, neg := strings.CutPrefix(s, "-"); neg && isDecimal(rest) {
		return "", "", fmt.Errorf("negative number %s for %s (values are non-negative)", s, key)
	}
	if !isDecimal(s) {
		return "", "", fmt.Errorf("bad number %q for %s (want a non-negative decimal such as 8 or 0.95)", s, key)
	}
	whole, frac, _ = strings.Cut(s, ".")
	return whole, frac, nil
}

// isDecimal reports whether s is digits, optionally followed by "." and
// more digits.
func isDecimal(s string) bool {
	whole, frac, hasDot := strings.Cut(s, ".")
	return isDigits(whole) && (!hasDot || isDigits(frac))
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// parseWhole parses a non-negative whole number.
func parseWhole(key, s string) (int64, error) {
	_, frac, err := splitDecimal(key, s)
	if err != nil {
		return 0, err
	}
	if frac != "" {
		return 0, fmt.Errorf("%s takes a whole number, not %s", key, s)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("number %s for %s is too large", s, key)
	}
	return n, nil
}

// parseNumber parses a non-negative decimal within the key's range.
func parseNumber(k *keySpec, s string) (float64, error) {
	if _, _, err := splitDecimal(k.name, s); err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("number %s for %s is too large", s, k.name)
	}
	if k.max > 0 && f > k.max {
		return 0, fmt.Errorf("%s is between 0 and %g, not %s", k.name, k.max, s)
	}
	return f, nil
}

// ccVersion is a CUDA compute capability.
type ccVersion struct{ major, minor int }

// parseCC parses a compute capability "N.M" or "N" (minor 0).
func parseCC(s string) (ccVersion, error) {
	whole, frac, err := splitDecimal("cc", s)
	if err != nil {
		return ccVersion{}, fmt.Errorf("bad compute capability %q (want N.M or N, e.g. 8.9)", s)
	}
	major, err1 := strconv.ParseUint(whole, 10, 16)
	minor := uint64(0)
	var err2 error
	if frac != "" {
		minor, err2 = strconv.ParseUint(frac, 10, 16)
	}
	if err1 != nil || err2 != nil {
		return ccVersion{}, fmt.Errorf("compute capability %s is too large", s)
	}
	return ccVersion{major: int(major), minor: int(minor)}, nil
}

func (c ccVersion) compare(d ccVersion) int {
	if r := cmp.Compare(c.major, d.major); r != 0 {
		return r
	}
	return cmp.Compare(c.minor, d.minor)
}

func (c ccVersion) String() string {
	return strconv.Itoa(c.major) + "." + strconv.Itoa(c.minor)
}

// parseBool parses true/false, yes/no or 1/0, in any case.
func parseBool(key, s string) (bool, error) {
	switch strings.ToLower(s) {
	case "true", "yes", "1":
		return true, nil
	case "false", "no", "0":
		return false, nil
	}
	return false, fmt.Errorf("%s value %q is not a bool (want true, false, yes, no, 1 or 0)", key, s)
}
