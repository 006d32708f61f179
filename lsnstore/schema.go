package lsnstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Schema changes and the dependency graph's generation.
//
// A process raises, with a write, the tables its dependency graph says
// the write also changes (triggers, cascades, views...). A schema change
// made by another process adds edges that this process's graph lacks
// until it relearns it. The store therefore keeps the position of the
// latest schema change that can add an edge (the schema position), and
// the schema changes under way (marks), and every checked raise
// (SchemaChanges.RaiseChecked) compares them with the position at which
// the raiser's graph was learned: when a change is under way, or the
// schema position is not strictly below the graph's, the raise also
// raises the unknown-tables position (which every read waits for) and
// tells the caller, which relearns its graph. No extra round trip: the
// check runs in the raise's own script.
//
// A graph's position is the primary's position read just before the
// catalog was read. The schema position of a change is a position read
// after the change became visible (after its COMMIT returned, or after a
// snapshot showed its transaction finished): positions only grow, so a
// graph whose position is strictly past it was read after the change was
// visible, and saw it. A graph that did not see it has a position at or
// below it, and is caught.

// SchemaTTL is the least time the schema position and a mark live. Every
// process relearns its graph every 30 seconds, so once a change's schema
// position has lived this long no process holds a graph older than the
// change; a mark whose process died lives this long.
const SchemaTTL = 10 * time.Minute

// SchemaCheck is what a checked raise checks and records.
type SchemaCheck struct {
	// Graph is the position at which the caller's dependency graph was
	// learned; Check says whether the raise compares it with the schema
	// position (a caller without a position does not: zero with Check
	// set is older than any schema change).
	Graph Position
	Check bool
	// Changed: the raise publishes a schema change that can add an edge,
	// committed at the raise's position: the schema position is raised to
	// it first.
	Changed bool
	// Done are the marks (BeginSchemaChange) of the schema changes this
	// raise publishes: they are dropped.
	Done []string
}

// SchemaVerdict is what a checked raise found.
type SchemaVerdict struct {
	// Stale: the schema position is not strictly below the caller's graph
	// position; the caller should relearn its graph.
	Stale bool
	// Pending: a schema change is under way (a mark lives).
	Pending bool
}

// Raised reports whether the raise raised the unknown-tables position
// because of the check.
func (v SchemaVerdict) Raised() bool { return v.Stale || v.Pending }

// SchemaChanges is implemented by Memory and Redis.
type SchemaChanges interface {
	// RaiseChecked is Raise (one round trip for Redis) that also applies
	// c: it drops c.Done's marks, raises the schema position to pos when
	// c.Changed, and when a mark lives or (c.Check) the schema position
	// is not strictly below c.Graph (not covered by it, or equal to it)
	// raises the unknown-tables position to pos and says so.
	RaiseChecked(ctx context.Context, tables []string, pos Position, c SchemaCheck) (SchemaVerdict, error)
	// BeginSchemaChange records a mark, before a schema change that can
	// add an edge runs: until a raise drops it (SchemaCheck.Done), or
	// EndSchemaChanges, or SchemaTTL (or the store's TTL, if longer)
	// passes, every checked raise raises the unknown-tables position.
	BeginSchemaChange(ctx context.Context) (mark string, err error)
	// EndSchemaChanges drops marks of changes that did not commit.
	EndSchemaChanges(ctx context.Context, marks []string) error
	// RaiseSchema raises the schema position to pos: a schema change that
	// can add an edge was visible when pos was read.
	RaiseSchema(ctx context.Context, pos Position) error
	// SchemaPosition returns the schema position (zero: none).
	SchemaPosition(ctx context.Context) (Position, error)
}

var (
	_ SchemaChanges = (*Memory)(nil)
	_ SchemaChanges = (*Redis)(nil)
)

// schemaStale reports whether a graph learned at graph predates a schema
// change at schema: graph is not strictly past it.
func schemaStale(schema, graph Position) bool {
	if schema.IsZero() {
		return false
	}
	return !graph.Covers(schema) || schema.Covers(graph)
}

// newMark returns a random mark.
func newMark() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// memorySchema is Memory's schema position and marks.
type memorySchema struct {
	mu       sync.Mutex
	position Position
	marks    map[string]time.Time // mark -> when it lapses
}

// RaiseChecked implements SchemaChanges.
func (m *Memory) RaiseChecked(ctx context.Context, tables []string, pos Position, c SchemaCheck) (SchemaVerdict, error) {
	if pos.IsZero() {
		return SchemaVerdict{}, nil
	}
	_ = m.Raise(ctx, tables, pos)
	s := &m.schema
	s.mu.Lock()
	now := time.Now()
	for _, k := range c.Done {
		delete(s.marks, k)
	}
	var v SchemaVerdict
	for k, until := range s.marks {
		if now.After(until) {
			delete(s.marks, k)
		} else {
			v.Pending = true
		}
	}
	if c.Changed {
		s.position = s.position.Merge(pos)
	}
	v.Stale = c.Check && schemaStale(s.position, c.Graph)
	s.mu.Unlock()
	if v.Raised() {
		m.unknown.raise(pos)
	}
	return v, nil
}

// BeginSchemaChange implements SchemaChanges.
func (m *Memory) BeginSchemaChange(context.Context) (string, error) {
	k := newMark()
	m.schema.mu.Lock()
	if m.schema.marks == nil {
		m.schema.marks = map[string]time.Time{}
	}
	m.schema.marks[k] = time.Now().Add(SchemaTTL)
	m.schema.mu.Unlock()
	return k, nil
}

// EndSchemaChanges implements SchemaChanges.
func (m *Memory) EndSchemaChanges(_ context.Context, marks []string) error {
	m.schema.mu.Lock()
	for _, k := range marks {
		delete(m.schema.marks, k)
	}
	m.schema.mu.Unlock()
	return nil
}

// RaiseSchema implements SchemaChanges.
func (m *Memory) RaiseSchema(_ context.Context, pos Position) error {
	m.schema.mu.Lock()
	m.schema.position = m.schema.position.Merge(pos)
	m.schema.mu.Unlock()
	return nil
}

// SchemaPosition implements SchemaChanges.
func (m *Memory) SchemaPosition(context.Context) (Position, error) {
	m.schema.mu.Lock()
	defer m.schema.mu.Unlock()
	return m.schema.position, nil
}

// Redis keys (see the package documentation):
//
//	P{D}-ddl_lsn       the schema position (a position, TTL schemaTTL)
//	P{D}-ddl_pending   sorted set of marks, scored with the server time (ms) when each lapses
func (r *Redis) schemaKey() string  { return r.base + "ddl_lsn" }
func (r *Redis) pendingKey() string { return r.base + "ddl_pending" }

// schemaTTL is how long the schema position and a mark live: SchemaTTL,
// or the store's TTL when longer.
func (r *Redis) schemaTTL() string {
	return strconv.FormatInt(max(SchemaTTL, r.opts.TTL, r.opts.KeyTTL).Milliseconds(), 10)
}

// RaiseChecked implements SchemaChanges, in the raise's script (one
// round trip).
func (r *Redis) RaiseChecked(ctx context.Context, tables []string, pos Position, c SchemaCheck) (SchemaVerdict, error) {
	if r.err != nil {
		return SchemaVerdict{}, r.err
	}
	return r.raise(ctx, tables, pos, &c)
}

// beginScript records the mark ARGV[1] in the sorted set KEYS[1] until
// the server time plus ARGV[2] ms, and keeps the set as long as its
// latest mark.
var beginScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
return 1
`)

// BeginSchemaChange implements SchemaChanges with one script call.
func (r *Redis) BeginSchemaChange(ctx context.Context) (string, error) {
	if r.err != nil {
		return "", r.err
	}
	k := newMark()
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	if err := beginScript.Run(ctx, r.rdb, []string{r.pendingKey()}, k, r.schemaTTL()).Err(); err != nil {
		return "", fmt.Errorf("lsnstore: redis mark a schema change: %w", err)
	}
	r.alive.Answered()
	return k, nil
}

// EndSchemaChanges implements SchemaChanges with one ZREM.
func (r *Redis) EndSchemaChanges(ctx context.Context, marks []string) error {
	if r.err != nil {
		return r.err
	}
	if len(marks) == 0 {
		return nil
	}
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	members := make([]any, len(marks))
	for i, k := range marks {
		members[i] = k
	}
	if err := r.rdb.ZRem(ctx, r.pendingKey(), members...).Err(); err != nil {
		return fmt.Errorf("lsnstore: redis ZREM: %w", err)
	}
	return nil
}

// schemaScript raises KEYS[1] to ARGV[1] with TTL ARGV[2] (ms).
var schemaScript = redis.NewScript(luaPrelude + `
raise(KEYS[1], ARGV[1], ARGV[2])
return 0
`)

// RaiseSchema implements SchemaChanges with one script call.
func (r *Redis) RaiseSchema(ctx context.Context, pos Position) error {
	if r.err != nil {
		return r.err
	}
	if pos.IsZero() {
		return nil
	}
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	if err := schemaScript.Run(ctx, r.rdb, []string{r.schemaKey()}, pos.String(), r.schemaTTL()).Err(); err != nil {
		return fmt.Errorf("lsnstore: redis raise the schema position: %w", err)
	}
	return nil
}

// SchemaPosition implements SchemaChanges with one GET.
func (r *Redis) SchemaPosition(ctx context.Context) (Position, error) {
	return r.getPosition(ctx, r.schemaKey())
}
