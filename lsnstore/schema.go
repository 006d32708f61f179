package lsnstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
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
// until it relearns it. The store therefore keeps a schema generation, a
// counter that every schema change that can add an edge advances once it
// is visible, and the schema changes under way (marks). A process reads
// the generation just before it reads the catalog, and every checked
// raise (SchemaChanges.RaiseChecked) compares the generation its graph
// was learned at with the store's: when a change is under way, or the
// generation moved, the raise also raises the unknown-tables position
// (which every read waits for) and tells the caller, which relearns its
// graph. No extra round trip: the check runs in the raise's own script.
//
// Why a counter and not a database position: a change advances the
// generation after it became visible, so a graph whose generation was
// read after that advance was read from a catalog that has the change;
// a graph read before it carries an older generation and is caught. A
// database position cannot say the same when the database is idle: a
// graph read after a change and one read just before its commit became
// visible can carry the same position.
//
// A generation is "<epoch>.<n>": the epoch is drawn when the store has
// none (a new store, or one that lost its data), so a generation read
// before a loss never equals one read after it.

// SchemaTTL is how long a mark lives when its change never ends it (its
// process died): every process relearns its graph every 30 seconds, so a
// change has reached every graph long before.
const SchemaTTL = 10 * time.Minute

// SchemaCheck is what a checked raise checks and records.
type SchemaCheck struct {
	// Graph is the schema generation read just before the caller's
	// dependency graph was learned ("" when the store had none); Check
	// says whether the raise compares it with the store's (a caller
	// without a learned graph does not).
	Graph string
	// Check: compare Graph with the store's generation.
	Check bool
	// Changed: the raise publishes a schema change that can add an edge,
	// committed before the raise: the raise advances the generation.
	Changed bool
	// Before: the check compares Graph with the generation before this
	// raise's own change advances it. Only for a raise whose writes are
	// the change alone (one schema statement, no row written through the
	// edges it adds); any other raise with Changed counts its own change
	// against the graph, which predates it.
	Before bool
	// Done are the marks (BeginSchemaChange) of the schema changes this
	// raise publishes: they are dropped.
	Done []string
}

// SchemaVerdict is what a checked raise found.
type SchemaVerdict struct {
	// Stale: the store's generation is not the caller's graph's; the
	// caller should relearn its graph.
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
	// c: it drops c.Done's marks, advances the generation when c.Changed,
	// and when a mark lives or (c.Check) the generation is not c.Graph
	// raises the unknown-tables position to pos and says so.
	RaiseChecked(ctx context.Context, tables []string, pos Position, c SchemaCheck) (SchemaVerdict, error)
	// BeginSchemaChange records a mark, before a schema change that can
	// add an edge runs: until a raise drops it (SchemaCheck.Done), or
	// EndSchemaChanges, or SchemaTTL (or the store's TTL, if longer)
	// passes, every checked raise raises the unknown-tables position.
	BeginSchemaChange(ctx context.Context) (mark string, err error)
	// EndSchemaChanges drops marks of changes that did not commit.
	EndSchemaChanges(ctx context.Context, marks []string) error
	// AdvanceSchema advances the generation: a schema change that can add
	// an edge is visible (the tracker, for changes made outside the
	// plugin).
	AdvanceSchema(ctx context.Context) error
	// SchemaGeneration returns the generation ("" when there is none
	// yet). A graph is learned from a catalog read after it.
	SchemaGeneration(ctx context.Context) (string, error)
}

var (
	_ SchemaChanges = (*Memory)(nil)
	_ SchemaChanges = (*Redis)(nil)
)

// newMark returns a random mark (also an epoch).
func newMark() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// memorySchema is Memory's generation and marks.
type memorySchema struct {
	mu         sync.Mutex
	generation string
	n          int
	marks      map[string]time.Time // mark -> when it lapses
}

// advance advances the generation (s.mu held).
func (s *memorySchema) advance() {
	s.n++
	s.generation = "m." + strconv.Itoa(s.n)
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
	if c.Changed && !c.Before {
		s.advance()
	}
	v.Stale = c.Check && c.Graph != s.generation
	if c.Changed && c.Before {
		s.advance()
	}
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

// AdvanceSchema implements SchemaChanges.
func (m *Memory) AdvanceSchema(context.Context) error {
	m.schema.mu.Lock()
	m.schema.advance()
	m.schema.mu.Unlock()
	return nil
}

// SchemaGeneration implements SchemaChanges.
func (m *Memory) SchemaGeneration(context.Context) (string, error) {
	m.schema.mu.Lock()
	defer m.schema.mu.Unlock()
	return m.schema.generation, nil
}

// Redis keys (see the package documentation):
//
//	P{D}-ddl_gen       the schema generation ("<epoch>.<n>", no TTL)
//	P{D}-ddl_pending   sorted set of marks, scored with the server time (ms) when each lapses
func (r *Redis) schemaKey() string  { return r.base + "ddl_gen" }
func (r *Redis) pendingKey() string { return r.base + "ddl_pending" }

// schemaTTL is how long a mark lives: SchemaTTL, or the store's TTL when
// longer.
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

// luaAdvance advances the generation in key k (absent: a new epoch,
// drawn by the caller, e) and returns it.
const luaAdvance = `
local function advance(k, e)
  local cur = redis.call("GET", k)
  local v = e .. ".1"
  if cur then
    local ep, n = string.match(cur, "^(.*)%.(%d+)$")
    if ep then v = ep .. "." .. (tonumber(n) + 1) end
  end
  redis.call("SET", k, v)
  return v
end
`

// advanceScript advances the generation KEYS[1]; ARGV[1] is the epoch
// when it has none.
var advanceScript = redis.NewScript(luaAdvance + `
advance(KEYS[1], ARGV[1])
return 0
`)

// AdvanceSchema implements SchemaChanges with one script call.
func (r *Redis) AdvanceSchema(ctx context.Context) error {
	if r.err != nil {
		return r.err
	}
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	if err := advanceScript.Run(ctx, r.rdb, []string{r.schemaKey()}, newMark()).Err(); err != nil {
		return fmt.Errorf("lsnstore: redis advance the schema generation: %w", err)
	}
	r.alive.Answered()
	return nil
}

// SchemaGeneration implements SchemaChanges with one GET.
func (r *Redis) SchemaGeneration(ctx context.Context) (string, error) {
	if r.err != nil {
		return "", r.err
	}
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	g, err := r.rdb.Get(ctx, r.schemaKey()).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("lsnstore: redis GET the schema generation: %w", err)
	}
	r.alive.Answered()
	return g, nil
}
