package testcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
)

// redisNode is one redis-server of a Redis Cluster or Sentinel setup: a
// local process (localRedisNode) or a container (dockerRedisNode). Its
// address does not change while the group lives.
type redisNode interface {
	// addr is host:port, reached alike by the test process and by the
	// group's other servers.
	addr() string
	port() int
	// busPort is a cluster node's cluster bus port, for CLUSTER MEET.
	busPort() int
	// start starts a new, empty server on the node's port (also after
	// kill) and waits until it answers.
	start(ctx context.Context) error
	// kill ends the server at once: SIGKILL, or docker kill.
	kill(ctx context.Context) error
	// pause and resume freeze and thaw it: SIGSTOP/SIGCONT, or docker
	// pause/unpause.
	pause(ctx context.Context) error
	resume(ctx context.Context) error
	// down reports whether the server is not running (killed, exited).
	down() bool
	// close stops the server for good.
	close() error
}

// redisGroup makes the nodes of one Cluster or Sentinel setup on one
// provider: local processes on 127.0.0.1 (localRedisGroup), or containers
// on a private Docker network reached at its gateway (dockerRedisGroup).
type redisGroup interface {
	// host is the address the nodes listen on as seen by the test process
	// and announce to each other.
	host() string
	// server makes a redis-server, not started; cluster adds the cluster
	// options (cluster-enabled, the announced address and bus port); args
	// follow the provider's own options.
	server(name string, cluster bool, args ...string) (redisNode, error)
	// sentinel makes a sentinel monitoring SentinelMaster at master, not
	// started.
	sentinel(name string, master redisNode) (redisNode, error)
	// relay starts a relay to target that the group's servers reach.
	relay(target string) (*relay, error)
	close() error
}

// newRedisGroup picks the provider for what ("Redis Cluster"): containers
// when useDocker says so, else local redis-server processes.
func newRedisGroup(ctx context.Context, what string) (redisGroup, error) {
	containers, err := useDocker(ctx)
	if err != nil {
		return nil, err
	}
	if containers {
		return newDockerRedisGroup(ctx, what)
	}
	return newLocalRedisGroup(what)
}

// sentinelConfig is a sentinel's configuration file: listening on port,
// announcing host, monitoring the master at masterAddr (host:port).
func sentinelConfig(port int, bind, host, dir, masterAddr string) (string, error) {
	mh, mp, err := net.SplitHostPort(masterAddr)
	if err != nil {
		return "", fmt.Errorf("testcluster: master address %q: %w", masterAddr, err)
	}
	return fmt.Sprintf(`port %d
bind %s
protected-mode no
dir %s
sentinel announce-ip %s
sentinel monitor %s %s %s 2
sentinel down-after-milliseconds %s 1500
sentinel failover-timeout %s 15000
sentinel parallel-syncs %s 1
`, port, bind, dir, host, SentinelMaster, mh, mp, SentinelMaster, SentinelMaster, SentinelMaster), nil
}

// startNodes starts nodes concurrently and joins their errors.
func startNodes(ctx context.Context, nodes ...redisNode) error {
	errs := make(chan error, len(nodes))
	for _, n := range nodes {
		go func() { errs <- n.start(ctx) }()
	}
	var all []error
	for range nodes {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// closeNodes closes the nodes that were made.
func closeNodes(nodes ...redisNode) error {
	var errs []error
	for _, n := range nodes {
		if n != nil {
			errs = append(errs, n.close())
		}
	}
	return errors.Join(errs...)
}
