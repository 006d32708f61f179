package main

import (
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// redisModes are the Redis deployments the commands connect to, named by
// --redis-mode (FRESHREAD_REDIS_MODE).
const redisModes = "single, cluster or sentinel"

// openRedis returns a client of the deployment mode names, from a redis://
// or rediss:// URL in go-redis's forms:
//
//   - single: redis://[user:password@]host:port/db (redis.ParseURL)
//   - cluster: redis://[user:password@]host:port?addr=host2:port2&addr=...
//     (redis.ParseClusterURL: every seed node)
//   - sentinel: redis://[user:password@]sentinel:port?master_name=name&addr=sentinel2:port...
//     (redis.ParseFailoverURL: the sentinels and the master's name)
//
// Errors never hold the URL, which may hold a password.
func openRedis(mode, url string) (redis.UniversalClient, error) {
	switch mode {
	case "", "single":
		o, err := redis.ParseURL(url)
		if err != nil {
			return nil, errRedisURL(mode)
		}
		o.ContextTimeoutEnabled = true
		return redis.NewClient(o), nil
	case "cluster":
		o, err := redis.ParseClusterURL(url)
		if err != nil {
			return nil, errRedisURL(mode)
		}
		o.ContextTimeoutEnabled = true
		return redis.NewClusterClient(o), nil
	case "sentinel":
		o, err := redis.ParseFailoverURL(url)
		if err != nil {
			return nil, errRedisURL(mode)
		}
		if o.MasterName == "" {
			return nil, errors.New("the sentinel URL names no master (add ?master_name=...)")
		}
		o.ContextTimeoutEnabled = true
		return redis.NewFailoverClient(o), nil
	}
	return nil, fmt.Errorf("--redis-mode %q: want %s", mode, redisModes)
}

// errRedisURL says that the URL does not parse, without repeating it or
// the parser's message (which may quote it).
func errRedisURL(mode string) error {
	if mode == "" {
		mode = "single"
	}
	return fmt.Errorf("the Redis URL does not parse as a %s URL (value not shown: it may hold a password)", mode)
}
