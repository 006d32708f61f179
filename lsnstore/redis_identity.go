package lsnstore

import "github.com/redis/go-redis/v9"

// Client is the go-redis client the store uses (for the tracker's
// registry, which lives in the same Redis).
func (r *Redis) Client() redis.UniversalClient { return r.rdb }

// Database is RedisOptions.Database.
func (r *Redis) Database() string { return r.opts.Database }

// Prefix is the key prefix in use (RedisOptions.Prefix after defaults; ""
// with NoPrefix).
func (r *Redis) Prefix() string { return r.opts.Prefix }
