package main

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// The chain settlement's gas: the chain module's TestGasPerOperation
// runs every operation of the PaymentChannel contract on go-ethereum's
// simulated chain (every dev fork active; an L2's figures differ) and
// logs its gas, beside plain ERC-20 transfers of the same token in the
// same run: the baselines. The chain module is a Go module of its own,
// so the test runs in it, as a process.

// gasLine is one line of TestGasPerOperation's log.
var gasLine = regexp.MustCompile(`gas (baseline: )?(.+?)\s+(\d+)\s*$`)

// gasRows runs TestGasPerOperation and returns its rows.
func gasRows() ([]Row, error) {
	cmd := exec.Command("go", "test", "-count=1", "-run", "^TestGasPerOperation$", "-v", ".")
	cmd.Dir = "chain"
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("gas (cd chain && go test -run TestGasPerOperation): %w: %s", err, out)
	}
	return parseGas(out)
}

// parseGas makes a row of each operation's gas with the transfer that
// compares: to a new holder for the operations that make new storage
// (a first deposit, a first redeem of a channel or of a lease), to a
// holder for the others.
func parseGas(log []byte) ([]Row, error) {
	base := map[string]float64{}
	type op struct {
		name string
		gas  float64
	}
	var ops []op
	for _, line := range strings.Split(string(log), "\n") {
		m := gasLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		g, _ := strconv.ParseFloat(m[3], 64)
		name := strings.TrimSpace(m[2])
		if m[1] != "" {
			base[name] = g
			continue
		}
		ops = append(ops, op{name, g})
	}
	newHolder, holder := "ERC-20 transfer (new holder)", "ERC-20 transfer (holder)"
	if base[newHolder] == 0 || base[holder] == 0 || len(ops) == 0 {
		return nil, fmt.Errorf("gas: the test's log has no baselines or operations:\n%s", log)
	}
	var rows []Row
	for _, o := range ops {
		b := holder
		if strings.Contains(o.name, "first") {
			b = newHolder
		}
		rows = append(rows, Row{
			Figure:   "chain gas: " + o.name + " (PaymentChannel on the simulated chain, chain module TestGasPerOperation)",
			Value:    fmt.Sprintf("%.0f gas", o.gas),
			Baseline: fmt.Sprintf("%.0f gas %s", base[b], b),
			Ratio:    o.gas / base[b],
			Goal:     "—",
		})
	}
	return rows, nil
}
