package sharding

import (
	"fmt"

	"github.com/freshread/freshread/plugin"
)

// Freshness returns the freshread plugin of the named shard: the one the
// plugin installed on a shard opened from its Dialector with replicas, or
// the one installed on a ShardConfig.DB by the caller. It fails with
// ErrUnknownShard for a name that is not a shard, and with ErrNoFreshness
// for a shard without a freshread plugin (no replicas).
func (s *Sharding) Freshness(shard string) (*plugin.Plugin, error) {
	sh := s.byName[shard]
	if sh == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownShard, shard)
	}
	// Name has no state: a nil *plugin.Plugin says the key GORM files it under.
	if p, ok := sh.db.Config.Plugins[(*plugin.Plugin)(nil).Name()].(*plugin.Plugin); ok {
		return p, nil
	}
	return nil, fmt.Errorf("%w: shard %q", ErrNoFreshness, shard)
}
