package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpumesh/gpumesh/internal/sdnotify"
	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
)

// statusEvery is how often the node tells systemd its STATUS= line, and
// at most the period of its watchdog pings.
const statusEvery = 30 * time.Second

// serviceNotify tells systemd (a Type=notify unit; see
// packaging/gpumesh.service) that the node is ready once its API
// answers, then, until ctx ends, what it is doing (STATUS=: peers,
// reach, free GPUs) and, when the unit has a watchdog, that it is alive
// (WATCHDOG=1) each time the node answers its own API's /healthz. A node
// that stops answering stops feeding the watchdog, and systemd restarts
// it. Outside systemd (no $NOTIFY_SOCKET) it returns at once.
func serviceNotify(ctx context.Context, sd *sdnotify.Notifier, n *node.Node, log *slog.Logger) {
	if !sd.Enabled() {
		return
	}
	send := func(states ...string) {
		if err := sd.Notify(states...); err != nil {
			log.Warn("systemd notify", "err", err)
		}
	}
	if err := probe(ctx, n); err != nil {
		// Ready anyway: the host listens; the watchdog will see to a
		// node that never answers.
		log.Warn("the node's API does not answer", "err", err)
	}
	send(sdnotify.Ready, sdnotify.Status(nodeStatus(n)))
	every := statusEvery
	if w := sd.WatchdogInterval(); w > 0 && w < every {
		every = w
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := probe(ctx, n); err != nil {
			log.Warn("the node's API does not answer: not feeding the watchdog", "err", err)
			send(sdnotify.Status("not answering its API: " + err.Error()))
			continue
		}
		states := []string{sdnotify.Status(nodeStatus(n))}
		if sd.WatchdogInterval() > 0 {
			states = append(states, sdnotify.Watchdog)
		}
		send(states...)
	}
}

// probe asks the node's own API for /healthz (the node is alive when
// its API answers); nil when the API is off.
func probe(ctx context.Context, n *node.Node) error {
	addr := n.APIAddr()
	if addr == "" {
		return nil
	}
	c := api.NewClient(addr, "", api.WithTimeout(20*time.Second))
	defer c.Close()
	_, err := c.Health(ctx)
	return err
}

// nodeStatus is the node's STATUS= line: what `systemctl status gpumesh`
// shows.
func nodeStatus(n *node.Node) string {
	return fmt.Sprintf("%d peers, reach %s, %d of %d GPUs free", len(n.Network().Host.Network().Peers()),
		n.Network().Reach().Reach, n.FreeGPUs(), len(n.GPUs()))
}
