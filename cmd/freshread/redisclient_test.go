package main

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestOpenRedis: each --redis-mode gives its client type from its URL
// form; a bad URL or mode is an error that never repeats the URL.
func TestOpenRedis(t *testing.T) {
	for _, c := range []struct {
		mode, url string
		want      string // client type, or "" for an error
	}{
		{"single", "redis://:pw@127.0.0.1:6379/0", "*redis.Client"},
		{"", "redis://127.0.0.1:6379", "*redis.Client"},
		{"cluster", "redis://:pw@127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002", "*redis.ClusterClient"},
		{"sentinel", "redis://:pw@127.0.0.1:26379?master_name=freshread&addr=127.0.0.1:26380", "*redis.Client"},
		{"sentinel", "redis://:s3cret-pw@127.0.0.1:26379", ""},
		{"cluster", "redis://:s3cret-pw@127.0.0.1:7000?bogus_option=1", ""},
		{"single", "mysql://:s3cret-pw@x", ""},
		{"ring", "redis://:s3cret-pw@127.0.0.1:6379", ""},
	} {
		rdb, err := openRedis(c.mode, c.url)
		if c.want == "" {
			if err == nil {
				rdb.Close()
				t.Errorf("openRedis(%q, %q): no error", c.mode, c.url)
			} else if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("openRedis(%q): the error shows the password: %v", c.mode, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("openRedis(%q, %q): %v", c.mode, c.url, err)
			continue
		}
		var got string
		switch rdb.(type) {
		case *redis.Client:
			got = "*redis.Client"
		case *redis.ClusterClient:
			got = "*redis.ClusterClient"
		}
		rdb.Close()
		if got != c.want {
			t.Errorf("openRedis(%q, %q) = %T, want %s", c.mode, c.url, rdb, c.want)
		}
	}
}
