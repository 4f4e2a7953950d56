package node

import (
	"errors"
	"fmt"

	"github.com/gpumesh/gpumesh/internal/metrics"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/settle"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// The node's own metrics (package internal/metrics) sit in its registry
// beside go-libp2p's. The parts count what they do through the *metrics
// types their configs take; this file holds what only the node can do:
// name why a gossip record was refused, whichever package's validator
// refused it, and read the gauges of its jobs and store at scrape time.

// topic returns the option that has a topic's records counted, after
// creating its series.
func (n *Node) topic(name string) p2p.TopicOption {
	n.metrics.Gossip.Topic(name)
	return p2p.WithObserver(gossipObserver{n.metrics.Gossip})
}

// gossipObserver counts what the gossip validators decide
// (p2p.Observer).
type gossipObserver struct{ g *metrics.Gossip }

func (o gossipObserver) Validated(topic string, err error) {
	if err == nil {
		o.g.Accepted(topic)
		return
	}
	o.g.Rejected(topic, gossipReason(err))
}

func (o gossipObserver) Published(topic string) { o.g.Published(topic) }

// gossipReason names the named error a validator's err wraps. The ones
// p2p.Verdict ignores come first, as there, so that an error wrapping two
// of them (market.ErrNotNew is p2p.ErrStale) gets the reason of its
// verdict.
func gossipReason(err error) metrics.Reason {
	is := func(targets ...error) bool {
		for _, t := range targets {
			if errors.Is(err, t) {
				return true
			}
		}
		return false
	}
	switch {
	case is(p2p.ErrRateLimited):
		return metrics.ReasonRate
	case is(p2p.ErrOverQuota):
		return metrics.ReasonQuota
	case is(p2p.ErrExpired):
		return metrics.ReasonExpired
	case is(p2p.ErrStale):
		return metrics.ReasonStale
	case is(p2p.ErrTooLarge):
		return metrics.ReasonOversize
	case is(p2p.ErrBadEnvelope, p2p.ErrSignerMismatch, p2p.ErrSignaturePolicy):
		return metrics.ReasonSignature
	case is(p2p.ErrMalformed, p2p.ErrUnsupported, p2p.ErrBadKey):
		return metrics.ReasonMalformed
	case is(p2p.ErrFutureDated):
		return metrics.ReasonFuture
	case is(market.ErrReplayed, reputation.ErrReplayed):
		return metrics.ReasonReplay
	case is(market.ErrMismatch, settle.ErrBadEvidence):
		return metrics.ReasonMismatch
	default:
		return metrics.ReasonOther
	}
}

// stateNames are the metric labels of states, each reported even when
// no job is in it.
func stateNames(states []job.State) []string {
	out := make([]string, len(states))
	for i, s := range states {
		out[i] = s.String()
	}
	return out
}

// watchJobs registers the gauges of the renter's jobs and, on a node that
// sells, of the executor's attempts, both read at scrape time.
func (n *Node) watchJobs() error {
	if err := n.metrics.WatchJobs(stateNames(job.JobStates()), n.jobs.ctrl.CountByState); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if n.jobs.exec != nil {
		if err := n.metrics.WatchAttempts(stateNames(job.AttemptStates()), n.jobs.exec.CountByState); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	return nil
}

// watchStore registers the store's size gauge when the store can tell
// its size (Badger; not the in-memory store of tests).
func (n *Node) watchStore() error {
	s, ok := n.store.(interface{ Size() (lsm, vlog int64) })
	if !ok {
		return nil
	}
	if err := n.metrics.WatchStore(s.Size); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	return nil
}
