package plugin

import (
	"context"
	"log/slog"
	"time"

	"gorm.io/gorm"
	"gorm.io/plugin/dbresolver"

	"github.com/freshread/freshread/lsnstore"
)

// Replica is one streaming replica of the primary.
type Replica struct {
	// Name identifies the replica in decisions, logs, metrics and the
	// store. Required, unique.
	Name string
	// Dialector opens the replica, e.g. postgres.Open(dsn). Required. The
	// DSN must reach one server: a reader endpoint, load balancer, DNS
	// name or pooler that spreads connections over several servers is
	// refused at Initialize and by SetReplicas (ErrSeveralServers), since
	// the plugin polls the replay position on one connection and reads on
	// others.
	Dialector gorm.Dialector
	// Pool sizes this replica's connection pool; each field that is zero
	// takes Config.ReplicaPool's.
	Pool Pool
}

// Pool is a replica's connection pool settings, applied with database/sql's
// SetMaxOpenConns, SetMaxIdleConns, SetConnMaxLifetime and
// SetConnMaxIdleTime when the replica is opened. A zero field leaves
// database/sql's default (or the setting of a pool the Dialector brings,
// such as postgres.Config.Conn): no limit on open connections, 2 idle
// connections kept, no age limits. A negative field sets "none" where a
// shared default set a value: no limit on open connections or on age, no
// idle connection kept. The replay poll takes one connection of the pool
// per poll (docs/guide/configuration.md, "Sizing replica pools").
type Pool struct {
	// MaxOpenConns bounds the connections open to the replica at once
	// (reads and the poll); a read waits for a free one beyond it.
	// Default: 0 (no limit).
	MaxOpenConns int
	// MaxIdleConns is how many unused connections are kept open.
	// Default: database/sql's 2.
	MaxIdleConns int
	// ConnMaxLifetime closes a connection this long after it was opened
	// (when next released). It also bounds how long connections to a
	// server the DSN no longer reaches stay in the pool. Default: 0 (no
	// limit).
	ConnMaxLifetime time.Duration
	// ConnMaxIdleTime closes a connection unused for this long. Default:
	// 0 (no limit).
	ConnMaxIdleTime time.Duration
}

// Consistency says how fresh a read must be.
type Consistency int

const (
	// Table (the default) sends a read to a replica only when the replica
	// has replayed the last write to every table the read touches and the
	// caller's own session writes.
	Table Consistency = iota
	// Strong sends every read to the primary.
	Strong
	// Session only waits for the caller's own writes (read-your-writes):
	// other callers' writes may not be visible yet.
	Session
	// Eventual sends reads to any healthy replica, as dbresolver does:
	// reads may be stale.
	Eventual
)

func (c Consistency) String() string {
	switch c {
	case Table:
		return "table"
	case Strong:
		return "strong"
	case Session:
		return "session"
	case Eventual:
		return "eventual"
	}
	return "unknown"
}

// Config configures the plugin. The zero value of every optional field
// means its documented default.
type Config struct {
	// Replicas are the streaming replicas reads may go to. With none, every
	// statement goes to the primary. Plugin.SetReplicas changes them while
	// the plugin runs.
	Replicas []Replica

	// Discovery, when set, finds replicas in DNS (A or SRV records)
	// every Discovery.Interval and adds them to Replicas, which stay; the
	// replicas then change only with the DNS answers (SetReplicas returns
	// ErrConfig). See DNSDiscovery. Default: nil (Replicas only, changed
	// with SetReplicas).
	Discovery *DNSDiscovery

	// Sources are the primaries of a resolver registered with Register
	// for some models or tables (dbresolver's Sources): their statements
	// run there instead of on the *gorm.DB's own database, writes spread
	// over the Sources by Policy. Every source must reach the same primary
	// server (checked at db.Use: freshread keeps one primary's positions
	// per resolver); reads go to Replicas, which replicate from it. Empty:
	// the *gorm.DB's own database. Ignored by New; refused on Register's
	// default resolver. Default: none.
	Sources []gorm.Dialector

	// TraceResolverMode prefixes each SQL line GORM's logger prints with
	// where it ran, "[source]" (the primary) or "[replica <name>]", as
	// dbresolver's TraceResolverMode does. Default: false.
	TraceResolverMode bool

	// ReplicaPool is the pool settings of every replica; a replica's own
	// Pool fields override it field by field. Default: database/sql's
	// (see Pool).
	ReplicaPool Pool

	// Store keeps the write position of each table (and the replicas'
	// replay positions). Default: lsnstore.NewMemory(), correct only when
	// one process writes to the database; use lsnstore.NewRedis for several.
	Store lsnstore.Store

	// SequentialLookup makes a read wait for the store's answer before it
	// starts. By default a read that needs the store's write positions
	// starts at once on a replica that covers what is known locally (the
	// session's position) while the store is asked, and keeps the rows
	// only if that replica's replay position, as known before the query
	// was sent, covers the required position once the store has answered;
	// otherwise it discards them and runs where the rule sends it
	// (docs/measurements/benchmarks.md, "Overlapped reads"). The guarantee is the same;
	// the latency of a replica read is max(query, store) instead of their
	// sum, at the price of a discarded replica query for reads that turn
	// out to need a fresher server. With the in-memory store reads are
	// always sequential (its answer costs nanoseconds). Default: false.
	SequentialLookup bool

	// Policy picks one replica among those fresh enough. Default:
	// dbresolver.RandomPolicy{}.
	Policy dbresolver.Policy

	// Consistency is the default level; WithConsistency overrides it per
	// context. Default: Table.
	Consistency Consistency

	// Dependents maps a table to the tables that writing it also writes
	// (triggers, cascading foreign keys, views over it): writing "orders"
	// with {"orders": {"order_totals"}} raises both. Transitive entries are
	// followed; "*" means any table. The graph the tracker publishes in the
	// store (lsnstore.DependentsStore) is merged in at start and whenever
	// its version changes (checked every second). The plugin also learns
	// the database's own graph (triggers, cascading foreign keys, views;
	// rules on PostgreSQL) from the catalog: at start, after a CREATE,
	// ALTER or RENAME run through GORM that can add a dependency, and
	// every 30 seconds. On PostgreSQL it runs depgraph.AnalyzePostgres
	// on a pgx connection of the primary pool (with another driver it
	// logs that it cannot); on MariaDB and MySQL it reads
	// information_schema (docs/design/mariadb.md). Default: none.
	Dependents map[string][]string

	// ReplayFromStore takes the replicas' replay positions from the store,
	// where the tracker publishes them with a short TTL, instead of
	// querying every replica from every process; a replica whose position
	// is missing there (the tracker is dead and its keys expired, or it
	// cannot reach the replica) is polled directly. The primary is still
	// polled (one query per PollInterval). Default: false.
	ReplayFromStore bool

	// DirectWrites says a tracker in logical mode (`freshread tracker
	// --mode logical`) publishes the writes made outside the application.
	// The plugin then also watches how far decoding has got (the tracker's
	// decoded position in the store): when it is missing (no tracker, or a
	// dead one whose key expired) or more than MaxDecodeLag bytes of WAL
	// behind the primary, a read (Consistency Table) may only use a replica
	// that has replayed everything the primary had written at the last
	// poll. MariaDB and MySQL have no decoding tracker: there DirectWrites
	// always applies that rule, a safe mode for databases that other
	// programs write too. Default: false.
	DirectWrites bool

	// TablePositions turns positions by key off: every read of a table
	// waits for every write of it. By default (false) the plugin keeps
	// positions per key value besides the table's
	// (docs/design/keyed-positions.md): a write that proves which rows it
	// touched (integer keys: the rows a GORM Create inserted, a WHERE
	// pinning the key, on the GORM path and on raw SQL) raises those keys
	// only, and a read pinned to key values (`id = ?`, `id IN ?`, First by
	// key, raw `WHERE id = $1`) waits for those keys and for the table's
	// writes that proved nothing, instead of every write of the table. The
	// keys are the model's single integer primary key and KeyColumns.
	// Processes sharing the store must all run a version that raises
	// unkeyed positions (every version with this field does, whatever its
	// value); processes keying a table by other columns are told apart by
	// the store (key signatures). Default: false.
	TablePositions bool

	// KeyColumns lists, per table, integer columns besides the primary key
	// that reads are pinned by and so get positions per value (for example {"orders": {"user_id"}} for a service
	// that lists a user's orders). A write raises the values it proves
	// for each (a Create's rows, a WHERE pinning the column, an UPDATE
	// setting it to a known value) and otherwise the column's unkeyed
	// position, which reads by the column wait for: an update by primary
	// key makes reads by user_id wait for it, not reads by id. Table
	// names as GORM names them; columns by their database names. A
	// process whose columns for a table are not those of the process that
	// keyed it first reads and writes that table by table position until
	// they agree (docs/guide/operations.md). Default: none.
	KeyColumns map[string][]string

	// MaxDecodeLag is the decoding lag, in bytes of WAL, up to which
	// DirectWrites trusts the tracker; direct writes in that window may be
	// read stale until decoded. Default: 1 MiB.
	MaxDecodeLag uint64

	// MaxDecodeDelay is how far behind in time DirectWrites trusts the
	// tracker: its decoded position must cover what the primary had
	// MaxDecodeDelay ago. A tracker that dies stops being trusted that long
	// after its last progress, so a direct write made after its death is
	// read stale for at most MaxDecodeDelay plus two polls (not until its
	// key expires). The tracker publishes its decoded position every
	// status interval (`--status-interval`, 1 s by default): keep
	// MaxDecodeDelay above it, or reads wait for replicas to replay the
	// primary's position at every poll. Default: 2 s.
	MaxDecodeDelay time.Duration

	// Announce registers the database and its replicas in the tracker's
	// registry at Initialize (no credentials: host, port, database, the
	// store's name and prefix, replica names and addresses), so a running
	// `freshread tracker` starts publishing for it. Needs the Redis store
	// and PostgreSQL dialectors opened from a DSN. Default: false.
	Announce bool

	// ReadOnlyFunctions lists user-defined SQL functions that only read, so
	// raw SQL calling them may go to a replica. Unknown functions are taken
	// to write. Functions whose every overload is IMMUTABLE or STABLE are
	// learned from pg_proc at Initialize and need not be listed (functions
	// created later are learned at the next start). Default: none.
	ReadOnlyFunctions []string

	// Positions selects where positions come from: Native (WAL LSNs,
	// MariaDB GTIDs) or Heartbeat (a counter table, for servers without
	// GTIDs; one extra write per write transaction). Default: Native.
	Positions PositionSource

	// HeartbeatTable is the counter table of Heartbeat positions, created
	// on the primary at Initialize when missing. Default:
	// "freshread_heartbeat".
	HeartbeatTable string

	// PollInterval is how often each replica's pg_last_wal_replay_lsn() is
	// read. Default: 20ms.
	PollInterval time.Duration

	// PollerLease is how long one process holds the poller's lease in a
	// store other processes share (Redis): while it holds it, it alone
	// polls the primary and the replicas and publishes what it found,
	// and the others read that from the store instead of polling the
	// servers, so the servers' polling load does not grow with the number
	// of processes. When the holder stops (closed, idle, cut off, dead),
	// another process takes the lease over at its next poll once the
	// published positions are gone, which is at most PollerLease later.
	// Negative: every process polls the servers itself. Ignored with
	// ReplayFromStore and with a store that is not shared. Default: 1s.
	PollerLease time.Duration

	// IdleAfter is how long a process goes without a read or a write
	// before its poller rests: it stops polling (and gives up its writer
	// lease and the poller's lease, when it holds them) until the next
	// read or write, which wakes it; the first read after a rest waits at
	// most one poll (100ms at the most) for fresh replica positions, and
	// goes to the primary if there are none by then. An idle process
	// then costs the servers and the store nothing. Negative: the poller
	// never rests. Default: 5s.
	IdleAfter time.Duration

	// MaxLag is the longest a replica may go without its replay position
	// being confirmed by a poll; past it the replica is not used. It must
	// be shorter than the Redis store's TTL (an expired write position is
	// only safe once every usable replica is past it). Default: 1 minute.
	MaxLag time.Duration

	// MaxWait, when positive, lets a read that no replica can serve yet wait
	// up to this long for one to catch up before going to the primary.
	// Default: 0 (go to the primary at once).
	MaxWait time.Duration

	// MaxFallbackRate, when positive, bounds the reads a second this
	// process sends to the primary for want of a fresh replica (every
	// replica behind, none up, the store failing: decision reasons
	// lagging, no-replica and store-error); a read beyond it fails with
	// ErrFallbackLimited instead of loading the primary. With MaxWait
	// such a read first waits that long for a replica to catch up. Reads
	// that need the primary (writes, transactions, locks, hints, sticky
	// sessions, raw SQL not shown to be a read), the retry of a read whose
	// replica failed, and reads through Row (QueryRowContext) are never
	// refused. Default: 0 (no limit: every such read goes to the primary).
	MaxFallbackRate float64

	// FallbackBurst is how many fallback reads may go to the primary at
	// once beyond MaxFallbackRate's pace. Default: MaxFallbackRate's
	// reads of one second (at least 1).
	FallbackBurst int

	// StallTimeout bounds how long a read waits on a replica that has
	// stopped answering (its connections open, nothing coming back). A
	// read whose first answer is later than the replica's usual (an
	// estimate of its recent first answers, at least 50ms, at most
	// StallTimeout) checks that the replica answered something since (other
	// reads, the poll), else pings it on another connection: a replica
	// that answers is slow, not stalled, and the read goes on; one
	// that does not answer within StallTimeout is marked down until a poll
	// answers, and the read is cancelled and run again on the primary (or,
	// for an overlapped read, a fresh replica). Only the wait for the
	// first answer is bounded: rows already streaming are never cut.
	// Negative: reads wait on a replica as long as their context allows,
	// and run in it (the watch costs a read a cancellable context, which
	// database/sql watches with a goroutine when the caller's cannot end:
	// docs/design/reliability.md). Default: 1s.
	StallTimeout time.Duration

	// WriterLease is the lease this process holds in a store other
	// processes share (Redis), renewed by its poll. It is how the others
	// learn of a write this process committed but could neither publish
	// nor tell them of, because the store is unreachable from here while
	// they reach it: the store's anchor, which every read checks, expires
	// with the earliest lease, and their next poll then takes the
	// primary's position as their floor. So such a write is acknowledged
	// once this lease has surely ended (how long that can take:
	// PublishTimeout), and a process whose lease has ended, or is about to
	// (less than a fifth left), refuses to commit a write
	// (ErrStoreUnreachable: nothing was committed, a retry is safe) until
	// it reaches the store again. A process that stops without Close
	// makes the others' reads go to the primary for a poll once its lease
	// ends. Negative: no lease (writes are never refused or delayed for
	// the store, and another process may read stale a write this process
	// could not publish: docs/design/reliability.md). Default: 5s.
	WriterLease time.Duration

	// PublishTimeout bounds, after a commit, reading the primary's
	// position and publishing it to the store (and, when that fails,
	// telling the other processes: lsnstore.Invalidator). A write that
	// could not be published within it waits for its lease to end
	// (WriterLease) before its commit returns, trying to publish again
	// meanwhile. So while Redis does not answer, a write waits at most
	// 3 × PublishTimeout + 3 × RedisOptions.MaxTimeout + WriterLease +
	// WriterLease/100 + 5ms: 9.6s with the defaults (derived in
	// docs/design/reliability.md, "How long a write waits for Redis").
	// Default: 1s.
	PublishTimeout time.Duration

	// BreakerFailures is the number of consecutive store failures after
	// which reads stop consulting the store (and go to the primary) until a
	// probe succeeds; probes back off from 100ms to 5s. Default: 3.
	BreakerFailures int

	// StickyWindow, when positive, sends every read of a session (see
	// WithSession and Middleware) to the primary for this long after the
	// session's last write: the common "primary for N seconds after a
	// write" rule, for deployments without a shared store. It is weaker
	// than positions (a write by another process is not seen, and a
	// replica lagging longer than the window serves stale data) and slower
	// (the whole window goes to the primary). The position rule still
	// applies outside the window; with Consistency Eventual, the window is
	// the only rule (the classic setup). Default: 0 (off).
	StickyWindow time.Duration

	// OnDecision, when set, is called with every routing decision.
	OnDecision func(context.Context, Decision)

	// Tracer records the routing decisions and writes on the trace of
	// each statement's context: freshreadotel.Tracer() for OpenTelemetry
	// (docs/guide/tracing.md). Default: nil, nothing recorded (unless
	// freshreadotel is imported for its side effect, the older way).
	Tracer Tracer

	// Logger receives a debug line per decision and warnings. Default:
	// slog.Default().
	Logger *slog.Logger
}

// keyed reports whether positions are kept by key (TablePositions off).
func (c Config) keyed() bool { return !c.TablePositions }

func (c Config) withDefaults() Config {
	if len(c.KeyColumns) > 0 {
		cols := make(map[string][]string, len(c.KeyColumns))
		for t, cs := range c.KeyColumns {
			t = lsnstore.TableKey(t)
			cols[t] = append(cols[t], cs...)
		}
		c.KeyColumns = cols
	}
	if c.Store == nil {
		c.Store = lsnstore.NewMemory()
	}
	if c.Policy == nil {
		c.Policy = dbresolver.RandomPolicy{}
	}
	if c.HeartbeatTable == "" {
		c.HeartbeatTable = "freshread_heartbeat"
	}
	if c.MaxDecodeLag == 0 {
		c.MaxDecodeLag = 1 << 20
	}
	if c.MaxDecodeDelay <= 0 {
		c.MaxDecodeDelay = 2 * time.Second
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 20 * time.Millisecond
	}
	if c.MaxLag <= 0 {
		c.MaxLag = time.Minute
	}
	if c.PollerLease == 0 {
		c.PollerLease = time.Second
	}
	if c.IdleAfter == 0 {
		c.IdleAfter = 5 * time.Second
	}
	if c.WriterLease == 0 {
		c.WriterLease = 5 * time.Second
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = time.Second
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = time.Second
	}
	if c.BreakerFailures <= 0 {
		c.BreakerFailures = 3
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Discovery = c.Discovery.withDefaults()
	if c.TraceResolverMode {
		c.OnDecision = noteMode(c.OnDecision) // trace_mode.go
	}
	return c
}
