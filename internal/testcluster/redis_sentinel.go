package testcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisSentinel is a Redis primary, one replica and three sentinels, as
// local processes without persistence, for failover tests. The replica
// replicates through a relay in front of the primary, so a test can stall
// its replication (StallReplication) and make the replica miss writes the
// primary acknowledged: after KillMaster, the promoted replica lacks them,
// as after a real crash with asynchronous replication.
//
// There is no container provider yet: where no redis-server binary is
// found, NewRedisSentinel returns an error wrapping ErrUnavailable.
type RedisSentinel struct {
	bin       string
	dir       string
	nodes     [2]*sentinelNode // nodes[0] starts as the master
	sentinels [3]*sentinelNode
	relay     *relay   // in front of the master the replica follows
	relays    []*relay // every relay made, closed at the end
	killed    *sentinelNode
}

type sentinelNode struct {
	name string
	port int
	srv  server
}

// SentinelMaster is the master name the sentinels monitor.
const SentinelMaster = "freshread"

// RedisSentinelFor starts a RedisSentinel for t (stopped when t ends), or
// skips t (fails it when FRESHREAD_REQUIRE_INTEGRATION=1).
func RedisSentinelFor(t testing.TB) *RedisSentinel {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := NewRedisSentinel(ctx)
	need(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// NewRedisSentinel starts the servers and waits until the sentinels know
// the replica.
func NewRedisSentinel(ctx context.Context) (*RedisSentinel, error) {
	if os.Getenv(EnvNoLocal) == "1" {
		return nil, unavailable("Redis Sentinel", EnvNoLocal+"=1 disables local servers")
	}
	bin, err := lookPath("redis-server", "/usr/bin", "/usr/local/bin")
	if err != nil {
		return nil, unavailable("Redis Sentinel", "redis-server not found; install it (Debian: apt-get install -y redis-server)")
	}
	dir, err := os.MkdirTemp("", "freshread-sentinel-")
	if err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	s := &RedisSentinel{bin: bin, dir: dir}
	if err := s.start(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *RedisSentinel) start(ctx context.Context) error {
	for i := range s.nodes {
		n, err := s.startNode(ctx, fmt.Sprintf("redis%d", i))
		if err != nil {
			return err
		}
		s.nodes[i] = n
	}
	if err := s.follow(ctx, s.nodes[1], s.nodes[0].port); err != nil {
		return err
	}
	for i := range s.sentinels {
		n, err := s.startSentinel(ctx, i)
		if err != nil {
			return err
		}
		s.sentinels[i] = n
	}
	// Every sentinel knows the replica and the other sentinels.
	for _, n := range s.sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addrOf(n.port)})
		err := waitFor(ctx, func() bool {
			reps, err := sc.Replicas(ctx, SentinelMaster).Result()
			if err != nil || len(reps) != 1 {
				return false
			}
			sens, err := sc.Sentinels(ctx, SentinelMaster).Result()
			return err == nil && len(sens) == len(s.sentinels)-1
		})
		sc.Close()
		if err != nil {
			return fmt.Errorf("testcluster: the sentinels do not see the replica and each other: %w", err)
		}
	}
	return nil
}

// follow makes n a replica of the server on masterPort through a new
// relay (the one StallReplication controls) and waits until it has synced.
func (s *RedisSentinel) follow(ctx context.Context, n *sentinelNode, masterPort int) error {
	r, err := newRelay(addrOf(masterPort), 0)
	if err != nil {
		return err
	}
	s.relay = r
	s.relays = append(s.relays, r)
	c := redis.NewClient(&redis.Options{Addr: addrOf(n.port)})
	defer c.Close()
	if err := c.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(r.Port())).Err(); err != nil {
		return fmt.Errorf("testcluster: REPLICAOF: %w", err)
	}
	if err := waitFor(ctx, func() bool {
		info, _ := c.Info(ctx, "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	}); err != nil {
		return fmt.Errorf("testcluster: the Redis replica does not sync: %w", err)
	}
	return nil
}

// Rejoin starts the server KillMaster killed again, empty, on its port, as
// a replica of the current master through a new relay (StallReplication
// then controls it), and waits until it has synced: the setup can fail
// over again. A no-op when no server is down. The sentinels point a
// replica that follows another address than the master's at the master
// itself after their failover-timeout (15 s here) once they notice: stall
// soon after Rejoin.
func (s *RedisSentinel) Rejoin(ctx context.Context) error {
	n := s.killed
	if n == nil {
		return nil
	}
	master, err := s.MasterAddr(ctx)
	if err != nil {
		return err
	}
	_, p, err := net.SplitHostPort(master)
	if err != nil {
		return fmt.Errorf("testcluster: master address %q: %w", master, err)
	}
	masterPort, err := strconv.Atoi(p)
	if err != nil {
		return fmt.Errorf("testcluster: master address %q: %w", master, err)
	}
	if err := s.launchNode(ctx, n); err != nil {
		return err
	}
	s.killed = nil
	if err := s.follow(ctx, n, masterPort); err != nil {
		return err
	}
	// Every sentinel sees it as a healthy replica of the master.
	if err := s.settled(ctx, master, addrOf(n.port)); err != nil {
		return fmt.Errorf("testcluster: the sentinels do not see the rejoined replica: %w", err)
	}
	return nil
}

// settled waits until every sentinel names master as the master and, when
// replica is set, lists it as a replica without a down flag.
func (s *RedisSentinel) settled(ctx context.Context, master, replica string) error {
	for _, n := range s.sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addrOf(n.port)})
		var seen string // what the sentinel said last, for the error
		err := waitFor(ctx, func() bool {
			m, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
			if err != nil || len(m) != 2 || net.JoinHostPort(m[0], m[1]) != master {
				seen = fmt.Sprintf("master %v (%v), want %s", m, err, master)
				return false
			}
			if replica == "" {
				return true
			}
			reps, err := sc.Replicas(ctx, SentinelMaster).Result()
			if err != nil {
				seen = fmt.Sprintf("replicas: %v", err)
				return false
			}
			seen = fmt.Sprintf("replicas %v, want %s with flags slave", reps, replica)
			for _, r := range reps {
				if net.JoinHostPort(r["ip"], r["port"]) == replica {
					return r["flags"] == "slave"
				}
			}
			return false
		})
		sc.Close()
		if err != nil {
			return fmt.Errorf("sentinel %s: %s: %w", addrOf(n.port), seen, err)
		}
	}
	return nil
}

func addrOf(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

func (s *RedisSentinel) startNode(ctx context.Context, name string) (*sentinelNode, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	n := &sentinelNode{name: name, port: port}
	return n, s.launchNode(ctx, n)
}

// launchNode starts n's redis-server (empty: no persistence).
func (s *RedisSentinel) launchNode(ctx context.Context, n *sentinelNode) error {
	d := filepath.Join(s.dir, n.name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	return s.launch(ctx, n, filepath.Join(d, "redis.log"),
		"--port", strconv.Itoa(n.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", d, "--daemonize", "no", "--protected-mode", "no",
		"--replica-announce-ip", "127.0.0.1", "--repl-timeout", "5", "--repl-diskless-sync-delay", "0")
}

// launch starts redis-server with args as n and waits for its port.
func (s *RedisSentinel) launch(ctx context.Context, n *sentinelNode, logPath string, args ...string) error {
	cmd, err := osUser{asSelf: true}.command(nil, logPath, s.bin, args...)
	if err != nil {
		return err
	}
	if err := n.srv.start(cmd); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := waitPort(ctx, &n.srv, n.port); err != nil {
		n.srv.stop(time.Second)
		return err
	}
	return nil
}

func (s *RedisSentinel) startSentinel(ctx context.Context, i int) (*sentinelNode, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	n := &sentinelNode{port: port}
	d := filepath.Join(s.dir, fmt.Sprintf("sentinel%d", i))
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	conf := filepath.Join(d, "sentinel.conf")
	body := fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode no
dir %s
sentinel announce-ip 127.0.0.1
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %s 1500
sentinel failover-timeout %s 15000
sentinel parallel-syncs %s 1
`, port, d, SentinelMaster, s.nodes[0].port, SentinelMaster, SentinelMaster, SentinelMaster)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	return n, s.launch(ctx, n, filepath.Join(d, "sentinel.log"), conf, "--sentinel")
}

// SentinelAddrs are the sentinels' addresses, for redis.FailoverOptions.
func (s *RedisSentinel) SentinelAddrs() []string {
	out := make([]string, len(s.sentinels))
	for i, n := range s.sentinels {
		out[i] = addrOf(n.port)
	}
	return out
}

// MasterAddr asks a sentinel for the current master's address.
func (s *RedisSentinel) MasterAddr(ctx context.Context) (string, error) {
	var lastErr error
	for _, n := range s.sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addrOf(n.port)})
		a, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
		sc.Close()
		if err == nil && len(a) == 2 {
			return net.JoinHostPort(a[0], a[1]), nil
		}
		lastErr = err
	}
	return "", fmt.Errorf("testcluster: no sentinel names the master: %w", lastErr)
}

// StallReplication holds (true) or releases (false) the replication stream
// from the first master to the replica: while held, writes acknowledged
// by the master do not reach the replica.
func (s *RedisSentinel) StallReplication(stall bool) {
	if stall {
		s.relay.SetDelay(time.Hour)
	} else {
		s.relay.SetDelay(0)
	}
}

// KillMaster kills the current master (SIGKILL: no goodbye, no
// persistence) and waits until the sentinels have promoted the replica
// and it accepts writes. It returns the new master's address.
func (s *RedisSentinel) KillMaster(ctx context.Context) (string, error) {
	old, err := s.MasterAddr(ctx)
	if err != nil {
		return "", err
	}
	var victim *sentinelNode
	for _, n := range s.nodes {
		if addrOf(n.port) == old {
			victim = n
		}
	}
	if victim == nil {
		return "", fmt.Errorf("testcluster: the master %s is none of the sentinel setup's servers", old)
	}
	victim.srv.stop(0) // SIGTERM, then SIGKILL at once
	s.killed = victim
	return s.newMaster(ctx, old)
}

// Failover asks a sentinel for a failover (SENTINEL FAILOVER: no vote,
// and no wait for the replica to have the master's last writes: those
// held back by StallReplication are lost) and waits until every sentinel
// names the replica as master. The old master becomes its replica. It
// returns the new master's address.
func (s *RedisSentinel) Failover(ctx context.Context) (string, error) {
	old, err := s.MasterAddr(ctx)
	if err != nil {
		return "", err
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: addrOf(s.sentinels[0].port)})
	err = sc.Failover(ctx, SentinelMaster).Err()
	sc.Close()
	if err != nil {
		return "", fmt.Errorf("testcluster: sentinel failover: %w", err)
	}
	return s.newMaster(ctx, old)
}

// newMaster waits until the sentinels name a master other than old that
// accepts writes, and agree on it.
func (s *RedisSentinel) newMaster(ctx context.Context, old string) (string, error) {
	var now string
	err := waitFor(ctx, func() bool {
		a, err := s.MasterAddr(ctx)
		if err != nil || a == old {
			return false
		}
		c := redis.NewClient(&redis.Options{Addr: a})
		defer c.Close()
		role, err := c.Do(ctx, "ROLE").Slice()
		if err != nil || len(role) == 0 || role[0] != "master" {
			return false
		}
		now = a
		return true
	})
	if err != nil {
		return "", fmt.Errorf("testcluster: no failover from the master %s: %w", old, err)
	}
	if err := s.settled(ctx, now, ""); err != nil {
		return "", fmt.Errorf("testcluster: the sentinels do not agree on the new master %s: %w", now, err)
	}
	return now, nil
}

// Close stops every process and removes the files.
func (s *RedisSentinel) Close() error {
	for _, n := range s.sentinels {
		if n != nil {
			n.srv.stop(5 * time.Second)
		}
	}
	for _, r := range s.relays {
		r.Close()
	}
	for _, n := range s.nodes {
		if n != nil {
			n.srv.stop(5 * time.Second)
		}
	}
	return os.RemoveAll(s.dir)
}

// waitFor polls ok every 50 ms until it holds or ctx ends.
func waitFor(ctx context.Context, ok func() bool) error {
	for !ok() {
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), errors.New("condition not met"))
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}
