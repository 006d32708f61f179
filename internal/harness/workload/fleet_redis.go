package workload

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redisCommandStats reads INFO commandstats: the calls of each command
// since the server started (or CONFIG RESETSTAT).
func redisCommandStats(ctx context.Context, rdb *redis.Client) (map[string]int64, error) {
	s, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("workload: INFO commandstats: %w", err)
	}
	return parseCommandStats(s)
}

// parseCommandStats parses INFO commandstats lines such as
// "cmdstat_get:calls=21,usec=175,usec_per_call=8.33,rejected_calls=0,failed_calls=0"
// into calls per command ("get"; subcommands as Redis names them,
// "client|setinfo").
func parseCommandStats(info string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		found := false
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			if k != "calls" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("workload: INFO commandstats: %q: %w", line, err)
			}
			out[strings.TrimPrefix(name, "cmdstat_")] = n
			found = true
		}
		if !found {
			return nil, fmt.Errorf("workload: INFO commandstats: no calls in %q", line)
		}
	}
	return out, nil
}

// subCommandStats is after minus before per command (commands that did
// not change left out) and in total, less the one INFO of the earlier
// snapshot (Redis counts a command once it has answered, so the INFO
// that read before is in after, and after's own INFO is not).
func subCommandStats(after, before map[string]int64) (map[string]int64, int64) {
	d := map[string]int64{}
	var total int64
	for k, v := range after {
		v -= before[k]
		if k == "info" {
			v-- // the measurement's own
		}
		if v != 0 {
			d[k] = v
			total += v
		}
	}
	return d, total
}
