package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/light"
)

// joinLight joins the network as a light client through cfg's bootstrap
// peers, within its bootstrap timeout, logging as cfg says; opts add the
// rest (a key, a store, renting).
func (a *app) joinLight(ctx context.Context, cfg node.Config, opts ...light.Option) (*light.Client, error) {
	boot, err := node.LightBootstrap(ctx, cfg, nil)
	if errors.Is(err, node.ErrDefaultBootstrapUnavailable) {
		return nil, fmt.Errorf("%w: pass --bootstrap MULTIADDR (or set %s); %w", light.ErrNoBootstrap, node.EnvName("bootstrap"), err)
	}
	if err != nil {
		return nil, err
	}
	base := []light.Option{
		light.WithNetwork(cfg.Network),
		light.WithBootstrap(boot...), light.WithBootstrapTimeout(cfg.BootstrapTimeout),
		light.WithLogger(a.logger(cfg)), light.WithUserAgent(node.Software()),
	}
	c, err := light.New(ctx, append(base, opts...)...)
	if errors.Is(err, light.ErrNoBootstrap) {
		return nil, fmt.Errorf("%w: pass --bootstrap MULTIADDR (or set %s)", err, node.EnvName("bootstrap"))
	}
	return c, err
}
