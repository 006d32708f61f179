package testcluster_test

import (
	"net"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

// TestRedisGroupsRunWhereAsked: FRESHREAD_DOCKER=1 runs a single Redis and
// every server of a Redis Cluster and of a Sentinel setup in a container and =0 as a local
// process, and they do: a server in a container is its container's first
// process (INFO's process_id is 1); a local one has a PID of this machine
// and listens on 127.0.0.1.
func TestRedisGroupsRunWhereAsked(t *testing.T) {
	asked := os.Getenv(testcluster.EnvDocker)
	if asked != "0" && asked != "1" {
		t.Skipf("%s is neither 0 nor 1: the provider follows the engine", testcluster.EnvDocker)
	}
	inContainers := asked == "1"
	check := func(what string, addrs []string) {
		t.Helper()
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			info, err := c.Info(ctxT(t), "server").Result()
			c.Close()
			if err != nil {
				t.Fatalf("%s %s: INFO server: %v", what, a, err)
			}
			pid1 := strings.Contains(info, "\r\nprocess_id:1\r\n")
			host, _, _ := net.SplitHostPort(a)
			if pid1 != inContainers || (!inContainers && host != "127.0.0.1") {
				t.Fatalf("%s=%s: %s %s has process_id 1: %v", testcluster.EnvDocker, asked, what, a, pid1)
			}
		}
	}
	check("redis", []string{testcluster.RedisWithArgsFor(t).Addr()})
	check("cluster node", testcluster.RedisClusterFor(t).Addrs())
	s := testcluster.RedisSentinelFor(t)
	master, err := s.MasterAddr(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	check("sentinel", s.SentinelAddrs())
	check("sentinel master", []string{master})
}
