package testcluster

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// dockerRedisGroup runs a group's servers as containers of the test image
// on a private Docker network. Each listens inside its container on the
// port it is published on, and is published on the network's gateway (the
// host's address on that network, not every interface: the servers trust
// every client). The test process and the other containers both reach it
// at gateway:port, the address it announces (cluster-announce-ip,
// replica-announce-ip, sentinel announce-ip); relays listen on the gateway
// too.
type dockerRedisGroup struct {
	what    string
	net     *dockerNet
	gateway string
}

func newDockerRedisGroup(ctx context.Context, what string) (*dockerRedisGroup, error) {
	_, _, nw, err := dockerNetwork(ctx)
	if err != nil {
		return nil, err
	}
	gw, err := networkGateway(ctx, nw)
	if err != nil {
		removeNetwork(nw)
		return nil, err
	}
	// The gateway is an address of this machine only when the engine runs
	// here (not in a VM, not behind a remote DOCKER_HOST): then the test
	// process can listen on it and connect to ports published on it.
	l, err := net.Listen("tcp", net.JoinHostPort(gw, "0"))
	if err != nil {
		removeNetwork(nw)
		return nil, unavailable(what, fmt.Sprintf("in containers its servers announce the Docker network's gateway %s, which the test process must reach too, but it is no address of this machine (%v): the engine runs elsewhere (a VM, a remote DOCKER_HOST); %s=0 runs local redis-server processes", gw, err, EnvDocker))
	}
	l.Close()
	return &dockerRedisGroup{what: what, net: nw, gateway: gw}, nil
}

// freePort is a port free on the gateway a moment ago and never handed
// out before (freePortOn).
func (g *dockerRedisGroup) freePort() (int, error) { return freePortOn(g.gateway) }

func (g *dockerRedisGroup) host() string { return g.gateway }

func (g *dockerRedisGroup) server(name string, cluster bool, args ...string) (redisNode, error) {
	n := &dockerRedisNode{g: g, name: name, cluster: cluster, args: args}
	return n, n.pickPorts()
}

func (g *dockerRedisGroup) sentinel(name string, master redisNode) (redisNode, error) {
	n := &dockerRedisNode{g: g, name: name, master: master}
	return n, n.pickPorts()
}

func (g *dockerRedisGroup) relay(target string) (*relay, error) {
	return newRelayOn(g.gateway, target, 0)
}

func (g *dockerRedisGroup) close() error { return removeNetwork(g.net) }

// dockerRedisNode is a redis-server container; start replaces it with a
// new one (empty: no persistence) on the same ports.
type dockerRedisNode struct {
	g       *dockerRedisGroup
	name    string
	cluster bool
	args    []string  // after the provider's options
	master  redisNode // a sentinel's master; nil for a server
	p       int
	bus     int // cluster bus port, 0 outside a cluster

	mu      sync.Mutex
	c       *dockerContainer
	killed  bool
	started bool // once: the ports are the node's for good
}

func (n *dockerRedisNode) addr() string { return hostPort(n.g.gateway, n.p) }
func (n *dockerRedisNode) port() int    { return n.p }
func (n *dockerRedisNode) busPort() int { return n.bus }

// pickPorts chooses the node's port (and a cluster node's bus port: chosen,
// as cluster-port, rather than port+10000, which may be past 65535).
func (n *dockerRedisNode) pickPorts() (err error) {
	if n.p, err = n.g.freePort(); err != nil {
		return err
	}
	if n.cluster {
		n.bus, err = n.g.freePort()
	}
	return err
}

// entrypoint is the container's command line.
func (n *dockerRedisNode) entrypoint() ([]string, error) {
	gw, port := n.g.gateway, strconv.Itoa(n.p)
	if n.master != nil {
		body, err := sentinelConfig(n.p, "0.0.0.0", gw, "/tmp", n.master.addr())
		if err != nil {
			return nil, err
		}
		// A sentinel rewrites its configuration file: the container
		// writes it.
		return []string{"sh", "-c", `printf '%s' "$1" > /tmp/sentinel.conf && exec redis-server /tmp/sentinel.conf --sentinel`, "sh", body}, nil
	}
	cmd := []string{"redis-server", "--port", port, "--bind", "0.0.0.0", "--save", "", "--appendonly", "no",
		"--dir", "/tmp", "--daemonize", "no", "--protected-mode", "no"}
	if n.cluster {
		bus := strconv.Itoa(n.bus)
		cmd = append(cmd, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", bus, "--cluster-announce-ip", gw,
			"--cluster-announce-port", port, "--cluster-announce-bus-port", bus)
	} else {
		cmd = append(cmd, "--replica-announce-ip", gw)
	}
	return append(cmd, n.args...), nil
}

func (n *dockerRedisNode) start(ctx context.Context) error {
	n.mu.Lock()
	old, started := n.c, n.started
	n.c = nil
	n.mu.Unlock()
	if err := terminate(old); err != nil {
		return fmt.Errorf("testcluster: remove the old %s %s container: %w", n.g.what, n.name, err)
	}
	what := n.g.what + " " + n.name
	for attempt := 1; ; attempt++ {
		c, err := n.run(ctx, what)
		if err != nil && !started && attempt < 3 && strings.Contains(err.Error(), "port is already allocated") {
			// Taken since it was chosen; nothing knows the port
			// yet, so another will do.
			if err := n.pickPorts(); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if err := waitContainer(ctx, c, what, func(ctx context.Context) error { return pingRedis(ctx, n.addr()) }); err != nil {
			terminate(c)
			return err
		}
		n.mu.Lock()
		n.c, n.killed, n.started = c, false, true
		n.mu.Unlock()
		return nil
	}
}

// run creates and starts the container, published on the gateway.
func (n *dockerRedisNode) run(ctx context.Context, what string) (*dockerContainer, error) {
	cmd, err := n.entrypoint()
	if err != nil {
		return nil, err
	}
	opts := []runOption{
		withEntrypoint(cmd...),
		withNetwork([]string{n.name}, n.g.net),
		withFixedPort(strconv.Itoa(n.p)+"/tcp", n.g.gateway, n.p),
	}
	if n.bus != 0 {
		opts = append(opts, withFixedPort(strconv.Itoa(n.bus)+"/tcp", n.g.gateway, n.bus))
	}
	return runContainer(ctx, what, "", opts...)
}

// running is the container, or an error when there is none running.
func (n *dockerRedisNode) running() (*dockerContainer, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.c == nil || n.killed {
		return nil, fmt.Errorf("testcluster: %s %s container not running", n.g.what, n.name)
	}
	return n.c, nil
}

// engine runs op on n's container.
func (n *dockerRedisNode) engine(ctx context.Context, what string, op func(*dockerContainer) error) error {
	c, err := n.running()
	if err != nil {
		return err
	}
	if err := op(c); err != nil {
		return fmt.Errorf("testcluster: docker %s %s %s: %w", what, n.g.what, n.name, err)
	}
	return nil
}

// kill is docker kill (SIGKILL to redis-server, the container's first
// process), returning once the container has stopped. The container stays
// until start or close replaces it.
func (n *dockerRedisNode) kill(ctx context.Context) error {
	err := n.engine(ctx, "kill", func(c *dockerContainer) error {
		if err := c.Kill(ctx, "KILL"); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return c.WaitStopped(ctx)
	})
	if err == nil {
		n.mu.Lock()
		n.killed = true
		n.mu.Unlock()
	}
	return err
}

func (n *dockerRedisNode) pause(ctx context.Context) error {
	return n.engine(ctx, "pause", func(c *dockerContainer) error { return c.Pause(ctx) })
}

func (n *dockerRedisNode) resume(ctx context.Context) error {
	return n.engine(ctx, "unpause", func(c *dockerContainer) error { return c.Unpause(ctx) })
}

func (n *dockerRedisNode) down() bool {
	_, err := n.running()
	return err != nil
}

func (n *dockerRedisNode) close() error {
	n.mu.Lock()
	c := n.c
	n.c = nil
	n.mu.Unlock()
	return terminate(c)
}
