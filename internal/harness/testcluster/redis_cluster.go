package testcluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCluster is a Redis Cluster of three masters, each with one replica,
// without persistence: containers of the test image with the
// container provider (redis_node_docker.go), else local redis-server
// processes. The masters hold the slot ranges 0-5460, 5461-10922 and
// 10923-16383.
//
// With the local provider and no redis-server binary, NewRedisCluster
// returns an error wrapping ErrUnavailable.
type RedisCluster struct {
	group redisGroup
	nodes [6]redisNode // 0-2 start as masters, 3-5 as their replicas
}

// RedisClusterFor starts a RedisCluster for t (stopped when t ends), or
// skips t (fails it when FRESHREAD_REQUIRE_INTEGRATION=1).
func RedisClusterFor(t testing.TB) *RedisCluster {
	t.Helper()
	ctx, cancel := startTimeout()
	defer cancel()
	c, err := NewRedisCluster(ctx)
	need(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// NewRedisCluster starts the nodes, assigns the slots, attaches the
// replicas and waits until every node reports the cluster ok.
func NewRedisCluster(ctx context.Context) (*RedisCluster, error) {
	g, err := newRedisGroup(ctx, "Redis Cluster")
	if err != nil {
		return nil, err
	}
	c := &RedisCluster{group: g}
	if err := c.start(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// clusterSlots are the masters' slot ranges.
var clusterSlots = [3][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}

func (c *RedisCluster) start(ctx context.Context) error {
	for i := range c.nodes {
		n, err := c.group.server(fmt.Sprintf("node%d", i), true,
			"--cluster-node-timeout", "2000", "--repl-diskless-sync-delay", "0")
		if err != nil {
			return err
		}
		c.nodes[i] = n
	}
	if err := startNodes(ctx, c.nodes[:]...); err != nil {
		return err
	}
	ids := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		id, err := c.do(ctx, i, "CLUSTER", "MYID").Text()
		if err != nil {
			return fmt.Errorf("testcluster: cluster node %d (%s): %w", i, n.addr(), err)
		}
		ids[i] = id
		if i > 0 {
			if err := c.do(ctx, i, "CLUSTER", "MEET", c.group.host(), c.nodes[0].port(), c.nodes[0].busPort()).Err(); err != nil {
				return fmt.Errorf("testcluster: cluster meet: %w", err)
			}
		}
	}
	for i, r := range clusterSlots {
		if err := c.do(ctx, i, "CLUSTER", "ADDSLOTSRANGE", r[0], r[1]).Err(); err != nil {
			return fmt.Errorf("testcluster: cluster addslotsrange: %w", err)
		}
	}
	// Every node knows every other before a replica can name its master.
	// A MEET whose handshake does not finish within the node timeout (a
	// loaded machine) is dropped by Redis and never retried, so a node
	// that still misses some is introduced to every other again.
	remeet := time.Now().Add(3 * time.Second)
	if err := waitFor(ctx, func() bool {
		met := true
		for i := range c.nodes {
			out, err := c.do(ctx, i, "CLUSTER", "NODES").Text()
			if err == nil && strings.Count(strings.TrimSpace(out), "\n")+1 == len(c.nodes) {
				continue
			}
			met = false
			if time.Now().Before(remeet) {
				return false
			}
			for j := range c.nodes {
				if j != i {
					_ = c.do(ctx, i, "CLUSTER", "MEET", c.group.host(), c.nodes[j].port(), c.nodes[j].busPort()).Err()
				}
			}
		}
		if !met {
			remeet = time.Now().Add(3 * time.Second)
		}
		return met
	}); err != nil {
		return fmt.Errorf("testcluster: the cluster nodes do not meet: %w", err)
	}
	for i := 3; i < len(c.nodes); i++ {
		if err := c.do(ctx, i, "CLUSTER", "REPLICATE", ids[i-3]).Err(); err != nil {
			return fmt.Errorf("testcluster: cluster replicate: %w", err)
		}
	}
	return c.settled(ctx)
}

// settled waits until every node reports cluster_state:ok and every
// replica's link to its master is up.
func (c *RedisCluster) settled(ctx context.Context) error {
	err := waitFor(ctx, func() bool {
		for i := range c.nodes {
			if c.nodes[i] == nil || c.nodes[i].down() {
				continue
			}
			info, err := c.do(ctx, i, "CLUSTER", "INFO").Text()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
			repl, err := c.do(ctx, i, "INFO", "replication").Text()
			if err != nil || strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
				return false
			}
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("testcluster: the cluster does not settle: %w", err)
	}
	return nil
}

// do runs one command on node i.
func (c *RedisCluster) do(ctx context.Context, i int, args ...any) *redis.Cmd {
	rdb := redis.NewClient(&redis.Options{Addr: c.nodes[i].addr()})
	defer rdb.Close()
	return rdb.Do(ctx, args...)
}

// Addrs are the nodes' addresses, for redis.ClusterOptions.
func (c *RedisCluster) Addrs() []string {
	out := make([]string, 0, len(c.nodes))
	for _, n := range c.nodes {
		if n != nil {
			out = append(out, n.addr())
		}
	}
	return out
}

// Client returns a ClusterClient on the cluster, closed when t ends.
func (c *RedisCluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// Failover promotes the replica of the master holding key's slot with
// CLUSTER FAILOVER (a coordinated failover: no write is lost) and waits
// until the cluster has settled with it as master. It returns the new
// master's address.
func (c *RedisCluster) Failover(ctx context.Context, key string) (string, error) {
	_, replica, err := c.pair(ctx, key)
	if err != nil {
		return "", err
	}
	return c.promoted(ctx, replica, 0, "FAILOVER")
}

// CutReplication prepares a crash failover that loses writes: it freezes
// (SIGSTOP, or docker pause) the replica of the master holding key's slot and closes the
// master's replication link to it, so that writes the master acknowledges
// from now on reach no replica. The returned crash kills the master
// (SIGKILL, or docker kill), lets the replica go on, and waits until the cluster has
// elected it master (after the node timeout, 2 s): the writes made between
// CutReplication and crash are lost. Call crash soon: a replica stopped
// for longer than the node timeout is flagged as failing too.
func (c *RedisCluster) CutReplication(ctx context.Context, key string) (crash func(context.Context) (string, error), err error) {
	master, replica, err := c.pair(ctx, key)
	if err != nil {
		return nil, err
	}
	if err := c.nodes[replica].pause(ctx); err != nil {
		return nil, err
	}
	if err := c.do(ctx, master, "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		_ = c.nodes[replica].resume(ctx)
		return nil, fmt.Errorf("testcluster: client kill type replica: %w", err)
	}
	return func(ctx context.Context) (string, error) {
		if err := c.nodes[master].kill(ctx); err != nil {
			_ = c.nodes[replica].resume(ctx)
			return "", err
		}
		if err := c.nodes[replica].resume(ctx); err != nil {
			return "", err
		}
		// The cluster elects the replica by itself after the node
		// timeout; a loaded machine can miss an election round, so it
		// is nudged (FORCE: the master is gone) when it takes longer,
		// and then told to take over without a vote (TAKEOVER), which
		// the masters on a loaded machine cannot refuse: the master is
		// dead, so no write the test depends on is decided by the vote.
		return c.promoted(ctx, replica, 8*time.Second, "FAILOVER", "FORCE")
	}, nil
}

// pair finds the master holding key's slot and its replica.
func (c *RedisCluster) pair(ctx context.Context, key string) (master, replica int, err error) {
	slot, err := c.do(ctx, 0, "CLUSTER", "KEYSLOT", key).Int()
	if err != nil {
		return 0, 0, fmt.Errorf("testcluster: cluster keyslot: %w", err)
	}
	master = -1
	for i := range c.nodes {
		if c.nodes[i].down() {
			continue
		}
		role, err := c.do(ctx, i, "ROLE").Slice()
		if err != nil || len(role) == 0 || role[0] != "master" {
			continue
		}
		out, err := c.do(ctx, i, "CLUSTER", "NODES").Text()
		if err == nil && ownsSlot(out, slot) {
			master = i
			break
		}
	}
	if master < 0 {
		return 0, 0, fmt.Errorf("testcluster: no master holds slot %d", slot)
	}
	for i := range c.nodes {
		if i == master || c.nodes[i].down() {
			continue
		}
		repl, err := c.do(ctx, i, "INFO", "replication").Text()
		if err == nil && strings.Contains(repl, "master_port:"+strconv.Itoa(c.nodes[master].port())+"\r\n") {
			return master, i, nil
		}
	}
	return 0, 0, fmt.Errorf("testcluster: the master of slot %d has no replica", slot)
}

// promoted waits until node i is a master and the cluster has settled,
// and returns its address. It sends CLUSTER <failover...> to node i after
// wait, and again every 10 s while it is not promoted: a manual failover
// that the replica cannot complete in time (its offset behind the
// master's on a loaded machine) is dropped by Redis without an error.
// A FORCE failover that has not completed 10 s after it was asked for
// is followed by CLUSTER FAILOVER TAKEOVER, which needs no vote: FORCE
// still needs a majority of the masters, which a loaded machine's
// election can miss round after round.
func (c *RedisCluster) promoted(ctx context.Context, i int, wait time.Duration, failover ...any) (string, error) {
	next := time.Now().Add(wait)
	var nudgeErr error
	var nudges int
	last := failover
	if err := waitFor(ctx, func() bool {
		role, err := c.do(ctx, i, "ROLE").Slice()
		if err == nil && len(role) > 0 && role[0] == "master" {
			return true
		}
		if time.Now().After(next) {
			next = time.Now().Add(10 * time.Second)
			args := failover
			if nudges > 0 && len(failover) == 2 && failover[1] == "FORCE" {
				args = []any{"FAILOVER", "TAKEOVER"}
			}
			nudges++
			last = args
			nudgeErr = c.do(ctx, i, append([]any{"CLUSTER"}, args...)...).Err()
		}
		return false
	}); err != nil {
		nodes, _ := c.do(context.Background(), i, "CLUSTER", "NODES").Text()
		return "", fmt.Errorf("testcluster: the replica was not promoted after %d requests (last CLUSTER %v: %v; its CLUSTER NODES:\n%s): %w", nudges, last, nudgeErr, nodes, err)
	}
	return c.nodes[i].addr(), c.settled(ctx)
}

// MoveSlot migrates the slot holding key from its master to another
// master as Redis Cluster resharding does (SETSLOT IMPORTING/MIGRATING,
// MIGRATE of the slot's keys one at a time with pause between them, SETSLOT
// NODE on every master), so a client sees ASK and then MOVED redirections
// while it runs. It returns the new owner's address.
func (c *RedisCluster) MoveSlot(ctx context.Context, key string, pause time.Duration) (string, error) {
	slot, err := c.do(ctx, 0, "CLUSTER", "KEYSLOT", key).Int()
	if err != nil {
		return "", fmt.Errorf("testcluster: cluster keyslot: %w", err)
	}
	src, dst := -1, -1
	var masters []int
	for i := range c.nodes {
		role, err := c.do(ctx, i, "ROLE").Slice()
		if err != nil || len(role) == 0 || role[0] != "master" {
			continue
		}
		masters = append(masters, i)
		out, err := c.do(ctx, i, "CLUSTER", "NODES").Text()
		if err == nil && ownsSlot(out, slot) {
			src = i
		} else if dst < 0 {
			dst = i
		}
	}
	if src < 0 || dst < 0 {
		return "", fmt.Errorf("testcluster: no source or destination master for slot %d", slot)
	}
	id := func(i int) (string, error) { return c.do(ctx, i, "CLUSTER", "MYID").Text() }
	srcID, err := id(src)
	if err != nil {
		return "", err
	}
	dstID, err := id(dst)
	if err != nil {
		return "", err
	}
	if err := c.do(ctx, dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err(); err != nil {
		return "", fmt.Errorf("testcluster: setslot importing: %w", err)
	}
	if err := c.do(ctx, src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err(); err != nil {
		return "", fmt.Errorf("testcluster: setslot migrating: %w", err)
	}
	for {
		keys, err := c.do(ctx, src, "CLUSTER", "GETKEYSINSLOT", slot, 1).StringSlice()
		if err != nil {
			return "", fmt.Errorf("testcluster: getkeysinslot: %w", err)
		}
		if len(keys) == 0 {
			break
		}
		if err := c.do(ctx, src, "MIGRATE", c.group.host(), c.nodes[dst].port(), keys[0], 0, 5000).Err(); err != nil {
			return "", fmt.Errorf("testcluster: migrate %s: %w", keys[0], err)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(pause):
		}
	}
	for _, i := range append([]int{dst, src}, masters...) {
		if err := c.do(ctx, i, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err(); err != nil {
			return "", fmt.Errorf("testcluster: setslot node: %w", err)
		}
	}
	return c.nodes[dst].addr(), c.settled(ctx)
}

// ownsSlot reports whether the "myself" line of CLUSTER NODES output lists
// slot among its ranges.
func ownsSlot(nodes string, slot int) bool {
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.Contains(f[2], "myself") {
			continue
		}
		for _, r := range f[8:] {
			lo, hi, found := strings.Cut(r, "-")
			a, err := strconv.Atoi(lo)
			if err != nil {
				continue
			}
			b := a
			if found {
				if b, err = strconv.Atoi(hi); err != nil {
					continue
				}
			}
			if a <= slot && slot <= b {
				return true
			}
		}
	}
	return false
}

// Close stops every node and removes the files (or containers and
// network).
func (c *RedisCluster) Close() error {
	return errors.Join(closeNodes(c.nodes[:]...), c.group.close())
}
