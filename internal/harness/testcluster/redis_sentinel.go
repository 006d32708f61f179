package testcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisSentinel is a Redis primary, one replica and three sentinels,
// without persistence, for failover tests: containers of the test image
// with the container provider (redis_node_docker.go), else local
// redis-server processes. The replica
// replicates through a relay in front of the primary, so a test can stall
// its replication (StallReplication) and make the replica miss writes the
// primary acknowledged: after KillMaster, the promoted replica lacks them,
// as after a real crash with asynchronous replication.
//
// The relays run in the test process (listening on the Docker network's
// gateway with containers). With the local provider and no redis-server
// binary, NewRedisSentinel returns an error wrapping ErrUnavailable.
type RedisSentinel struct {
	group     redisGroup
	nodes     [2]redisNode // nodes[0] starts as the master
	sentinels [3]redisNode
	relay     *relay   // in front of the master the replica follows
	relays    []*relay // every relay made, closed at the end
	killed    redisNode
}

// SentinelMaster is the master name the sentinels monitor.
const SentinelMaster = "freshread"

// RedisSentinelFor starts a RedisSentinel for t (stopped when t ends), or
// skips t (fails it when FRESHREAD_REQUIRE_INTEGRATION=1).
func RedisSentinelFor(t testing.TB) *RedisSentinel {
	t.Helper()
	ctx, cancel := startTimeout()
	defer cancel()
	s, err := NewRedisSentinel(ctx)
	need(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// NewRedisSentinel starts the servers and waits until the sentinels know
// the replica.
func NewRedisSentinel(ctx context.Context) (*RedisSentinel, error) {
	g, err := newRedisGroup(ctx, "Redis Sentinel")
	if err != nil {
		return nil, err
	}
	s := &RedisSentinel{group: g}
	if err := s.start(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *RedisSentinel) start(ctx context.Context) error {
	for i := range s.nodes {
		n, err := s.group.server(fmt.Sprintf("redis%d", i), false,
			"--repl-timeout", "5", "--repl-diskless-sync-delay", "0")
		if err != nil {
			return err
		}
		s.nodes[i] = n
	}
	if err := startNodes(ctx, s.nodes[:]...); err != nil {
		return err
	}
	if err := s.follow(ctx, s.nodes[1], s.nodes[0].addr()); err != nil {
		return err
	}
	for i := range s.sentinels {
		n, err := s.group.sentinel(fmt.Sprintf("sentinel%d", i), s.nodes[0])
		if err != nil {
			return err
		}
		s.sentinels[i] = n
	}
	if err := startNodes(ctx, s.sentinels[:]...); err != nil {
		return err
	}
	// Every sentinel knows the replica and the other sentinels.
	for _, n := range s.sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: n.addr()})
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

// follow makes n a replica of the server at master through a new relay
// (the one StallReplication controls) and waits until it has synced.
func (s *RedisSentinel) follow(ctx context.Context, n redisNode, master string) error {
	r, err := s.group.relay(master)
	if err != nil {
		return err
	}
	s.relay = r
	s.relays = append(s.relays, r)
	c := redis.NewClient(&redis.Options{Addr: n.addr()})
	defer c.Close()
	if err := c.ReplicaOf(ctx, s.group.host(), strconv.Itoa(r.Port())).Err(); err != nil {
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
	if err := n.start(ctx); err != nil {
		return err
	}
	s.killed = nil
	if err := s.follow(ctx, n, master); err != nil {
		return err
	}
	// Every sentinel sees it as a healthy replica of the master.
	if err := s.settled(ctx, master, n.addr()); err != nil {
		return fmt.Errorf("testcluster: the sentinels do not see the rejoined replica: %w", err)
	}
	return nil
}

// settled waits until every sentinel names master as the master and, when
// replica is set, lists it as a replica without a down flag.
func (s *RedisSentinel) settled(ctx context.Context, master, replica string) error {
	for _, n := range s.sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: n.addr()})
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
			return fmt.Errorf("sentinel %s: %s: %w", n.addr(), seen, err)
		}
	}
	return nil
}

// SentinelAddrs are the sentinels' addresses, for redis.FailoverOptions.
func (s *RedisSentinel) SentinelAddrs() []string {
	out := make([]string, len(s.sentinels))
	for i, n := range s.sentinels {
		out[i] = n.addr()
	}
	return out
}

// MasterAddr asks a sentinel for the current master's address.
func (s *RedisSentinel) MasterAddr(ctx context.Context) (string, error) {
	var lastErr error
	for _, n := range s.sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: n.addr()})
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

// KillMaster kills the current master (SIGKILL, or docker kill: no
// goodbye, no persistence) and waits until the sentinels have promoted the replica
// and it accepts writes. It returns the new master's address.
func (s *RedisSentinel) KillMaster(ctx context.Context) (string, error) {
	old, err := s.MasterAddr(ctx)
	if err != nil {
		return "", err
	}
	var victim redisNode
	for _, n := range s.nodes {
		if n.addr() == old {
			victim = n
		}
	}
	if victim == nil {
		return "", fmt.Errorf("testcluster: the master %s is none of the sentinel setup's servers", old)
	}
	if err := victim.kill(ctx); err != nil {
		return "", err
	}
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
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.sentinels[0].addr()})
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

// Close stops every server and relay and removes the files (or
// containers and network).
func (s *RedisSentinel) Close() error {
	errs := []error{closeNodes(s.sentinels[:]...)}
	for _, r := range s.relays {
		errs = append(errs, r.Close())
	}
	errs = append(errs, closeNodes(s.nodes[:]...), s.group.close())
	return errors.Join(errs...)
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
