package sharding

import (
	"errors"
	"testing"

	"github.com/freshread/freshread/plugin"
)

// Freshness returns a shard's freshread plugin, and an error naming an
// unknown shard or a shard without one.
func TestFreshness(t *testing.T) {
	p := plugin.New(plugin.Config{})
	mt := newMapTest(t, nil, func(c *Config) {
		// As db.Use(p) files it, without opening replicas.
		c.Shards[1].DB.Config.Plugins[p.Name()] = p
	})
	if got, err := mt.s.Freshness("s1"); err != nil || got != p {
		t.Fatalf("s1: %p, %v; want %p", got, err, p)
	}
	if _, err := mt.s.Freshness("s0"); !errors.Is(err, ErrNoFreshness) {
		t.Fatalf("s0 (no plugin): %v", err)
	}
	if _, err := mt.s.Freshness("s9"); !errors.Is(err, ErrUnknownShard) {
		t.Fatalf("s9 (unknown): %v", err)
	}
}
