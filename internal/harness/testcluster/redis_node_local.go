package testcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// localRedisGroup runs a group's servers as local redis-server processes
// on 127.0.0.1, each with a directory under dir.
type localRedisGroup struct {
	bin string
	dir string
}

func newLocalRedisGroup(what string) (*localRedisGroup, error) {
	if os.Getenv(EnvNoLocal) == "1" {
		return nil, unavailable(what, EnvNoLocal+"=1 disables local servers")
	}
	bin, err := lookPath("redis-server", "/usr/bin", "/usr/local/bin")
	if err != nil {
		return nil, unavailable(what, "redis-server not found; install it (Debian: apt-get install -y redis-server)")
	}
	dir, err := os.MkdirTemp("", "freshread-redis-group-")
	if err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	return &localRedisGroup{bin: bin, dir: dir}, nil
}

func (g *localRedisGroup) host() string { return "127.0.0.1" }

func (g *localRedisGroup) server(name string, cluster bool, args ...string) (redisNode, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	d := filepath.Join(g.dir, name)
	opts := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", d, "--daemonize", "no", "--protected-mode", "no"}
	bus := 0
	if cluster {
		// A bus port of its own: Redis's default, port+10000, does not
		// exist for the ephemeral ports above 55535, and Redis then
		// refuses to start.
		if bus, err = freePort(); err != nil {
			return nil, err
		}
		opts = append(opts, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(d, "nodes.conf"),
			"--cluster-announce-ip", "127.0.0.1", "--cluster-port", strconv.Itoa(bus))
	} else {
		opts = append(opts, "--replica-announce-ip", "127.0.0.1")
	}
	return &localRedisNode{bin: g.bin, dir: d, log: "redis.log", p: port, bus: bus, args: append(opts, args...)}, nil
}

func (g *localRedisGroup) sentinel(name string, master redisNode) (redisNode, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	d := filepath.Join(g.dir, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	body, err := sentinelConfig(port, "127.0.0.1", "127.0.0.1", d, master.addr())
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(d, "sentinel.conf")
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	return &localRedisNode{bin: g.bin, dir: d, log: "sentinel.log", p: port, args: []string{conf, "--sentinel"}}, nil
}

func (g *localRedisGroup) relay(target string) (*relay, error) { return newRelay(target, 0) }

func (g *localRedisGroup) close() error { return os.RemoveAll(g.dir) }

// localRedisNode is a redis-server process; a new start appends to its
// log in dir.
type localRedisNode struct {
	bin, dir, log string
	p             int
	bus           int // cluster bus port; 0 when not a cluster node
	args          []string
	srv           server
}

func (n *localRedisNode) addr() string { return addrOf(n.p) }
func (n *localRedisNode) port() int    { return n.p }
func (n *localRedisNode) busPort() int { return n.bus }

// addrOf is 127.0.0.1:port.
func addrOf(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

func (n *localRedisNode) start(ctx context.Context) error {
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	logPath := filepath.Join(n.dir, n.log)
	cmd, err := osUser{asSelf: true}.command(nil, logPath, n.bin, n.args...)
	if err != nil {
		return err
	}
	if err := n.srv.start(cmd); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := waitPort(ctx, &n.srv, n.p); err != nil {
		n.srv.stop(time.Second)
		return fmt.Errorf("%w (log: %s)", err, logPath)
	}
	return nil
}

func (n *localRedisNode) kill(context.Context) error {
	n.srv.kill()
	return nil
}

func (n *localRedisNode) pause(context.Context) error  { return n.srv.signal(syscall.SIGSTOP) }
func (n *localRedisNode) resume(context.Context) error { return n.srv.signal(syscall.SIGCONT) }
func (n *localRedisNode) down() bool                   { return n.srv.exited() }

func (n *localRedisNode) close() error {
	n.srv.stop(5 * time.Second)
	return nil
}
