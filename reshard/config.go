package reshard

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/freshread/freshread/internal/engines"
	"github.com/freshread/freshread/sharding"
)

// Config is what every move of a deployment shares.
type Config struct {
	// Shards are the primaries of the shards, by the names the bucket map
	// uses. Every one gets the guard (Prepare), so list them all, not only
	// the source and target of a move. Required.
	Shards []Shard
	// Tables are the sharded tables (orders, order_items, ...), with the
	// column whose value mod the number of buckets is a row's bucket. Each
	// needs a primary key (read from the catalog) unique across shards.
	// Required.
	Tables []Table
	// Store holds the shared bucket map the moves publish to and the moves'
	// status (MapStore.SaveMove). Required.
	Store sharding.MapStore
	// InitialMap is the map when the store has none yet (Load reports
	// found false): for a migration, every bucket owned by the unsharded
	// database. Its Version is ignored (a first Publish is version 1).
	// Required only then.
	InitialMap *sharding.BucketMap
	// Schema is where the mover keeps its tables on every shard
	// (freshread_bucket_fence, freshread_reshard_state,
	// freshread_reshard_copy) and the guard's functions. Default "public"
	// on PostgreSQL; on MariaDB the database of each shard's connection
	// (a database name here puts them in that database on every shard).
	Schema string
	// ChunkRows is the number of rows per copy chunk (one transaction on
	// the target, one keyset read on the source) and per cleanup delete.
	// Default 1000.
	ChunkRows int
	// ApplyChanges is how many decoded changes one catch-up batch asks the
	// slot for (pg_logical_slot_peek_changes' upto_nchanges; a transaction
	// is never split, so a batch may hold more). Default 10000.
	ApplyChanges int
	// CatchUpLag ends CatchUp: once a round, from reading the source's
	// position to having applied every change up to it, takes less than
	// this, the target is caught up (and the move's status says so).
	// Default 500ms.
	CatchUpLag time.Duration
	// SwitchTimeout bounds each of the switch's two waits: from fencing
	// the source to publishing the map (transactions open on the source,
	// the last changes, the verification), and from publishing to every
	// client acknowledging the new map or going silent. Default 10s.
	SwitchTimeout time.Duration
	// PollInterval is how often the switch's waits look again (open
	// transactions, client acknowledgements, the flush position).
	// Default 5ms.
	PollInterval time.Duration
	// SkipSwitchVerify leaves the row counts and checksums out of the
	// switch. The verification reads every moved row on both sides while
	// the moving buckets' writes are held, so it makes the hold grow with
	// the moved data; without it the catch-up alone makes the target
	// equal. Default false: verify.
	SkipSwitchVerify bool
	// VerifyRetries is how many times a standalone Verify (writes still
	// flowing) catches up again and rechecks the buckets that differed
	// before it reports them. Default 3.
	VerifyRetries int
	// Progress, when set, is called after every copy chunk, catch-up
	// round and cleanup chunk (from the mover's goroutine: keep it quick).
	Progress func(Progress)
	// Logger receives one line per phase. Default slog.Default().
	Logger *slog.Logger

	// eng is the shards' engine (withDefaults).
	eng engine
}

// Shard is one shard's primary.
type Shard struct {
	// Name is the shard's name in the bucket map.
	Name string
	// DB is a pool of the shard's primary, opened with the pgx driver
	// (database/sql driver "pgx", github.com/jackc/pgx/v5/stdlib) as a
	// role that owns the sharded tables, may create in Config.Schema, has
	// REPLICATION (the slot) and pg_read_all_stats (the switch's drain),
	// and, best, may set session_replication_role (a superuser, or GRANT
	// SET ON PARAMETER): the mover's transactions are then replication
	// sessions, which fire no trigger and check no foreign key for the
	// copied rows (docs/design/sharding-and-moves.md, "Privileges").
	// For a MariaDB shard (10.11), a pool opened with go-sql-driver/mysql
	// (database/sql driver "mysql") with a database in its DSN, as a user
	// with the privileges docs/design/sharding-and-moves.md lists
	// ("MariaDB (in progress)", "The server"); the server writes a row-based binlog with
	// GTIDs. Every shard of a Config is of one kind: the driver of the
	// first decides.
	DB *sql.DB
	// RecordWrite, when set, is called with the tables written after every
	// transaction the mover commits on this shard (copy chunks, catch-up
	// batches): the rows it copies are written outside the application, so
	// the shard's freshread plugin does not know their positions, and a
	// read of a moved row could go to a replica that has not replayed it.
	// Pass the shard's plugin's (*plugin.Plugin).RecordWrite; with the
	// sharding plugin, that plugin is (*sharding.Sharding).Freshness(name).
	// With the tracker daemon in logical mode the positions are
	// published from the WAL anyway (a little later). An error after a
	// copy chunk or a catch-up batch is logged, not fatal (before the
	// switch no read of the moving buckets goes to the target's replicas).
	// The switch calls it once more with every table, during its hold and
	// before it publishes the map, and fails (rolls back to catching up)
	// if that call fails: its position covers every earlier write of the
	// move, whichever of their calls failed or never happened (a mover
	// that died between a commit and its call).
	RecordWrite func(ctx context.Context, tables ...string) error
	// BinlogDSN is, for a MariaDB shard, a go-sql-driver/mysql DSN of the
	// shard's primary over TCP for the catch-up's binlog reader, as a user
	// with REPLICATION SLAVE and BINLOG MONITOR. Required on MariaDB
	// (ErrConfig when a move reads a source without it); unused on
	// PostgreSQL.
	BinlogDSN string
}

// Table is a sharded table.
type Table struct {
	// Name is the table, optionally schema-qualified ("orders",
	// "shop.orders"), resolved by each shard's search_path.
	Name string
	// Key is the shard key column (user_id): a row's bucket is
	// Key mod the number of buckets.
	Key string
}

// Move moves Buckets from shard From to shard To.
type Move struct {
	// ID names the move in the state tables and the store. Default:
	// "<from>-<to>-<buckets>" (e.g. "s0-s4-512-767").
	ID string
	// Buckets are the buckets that move.
	Buckets []int
	// From is the name of the shard the buckets leave.
	From string
	// To is the name of the shard they move to.
	To string
}

// Progress is one report to Config.Progress.
type Progress struct {
	// Move is the move's ID (Move.ID).
	Move  string
	Phase string // sharding.MoveCopying, MoveCatchingUp or MoveCleaning
	// Table is the table being copied or cleaned.
	Table string
	// Rows is the number of rows copied (or deleted) so far in this
	// phase, over every table.
	Rows int64
	// RowsPerSecond is their rate since the phase started in this run.
	RowsPerSecond float64
	// LagBytes and Lag are the catch-up's distance behind the source: WAL
	// bytes from the last position the target is known to hold every
	// change up to, to the source's current position; and how long ago the
	// source was at that position.
	LagBytes int64
	// Lag: see LagBytes.
	Lag time.Duration
	// Changes is the number of decoded changes applied so far.
	Changes int64
}

func (c Config) withDefaults() Config {
	if c.eng == nil {
		c.eng = pgEngine{}
		if len(c.Shards) > 0 {
			c.eng = engineOf(c.Shards[0].DB)
		}
	}
	if c.Schema == "" {
		c.Schema = c.eng.defaultSchema()
	}
	if c.ChunkRows <= 0 {
		c.ChunkRows = 1000
	}
	if c.ApplyChanges <= 0 {
		c.ApplyChanges = 10000
	}
	if c.CatchUpLag <= 0 {
		c.CatchUpLag = 500 * time.Millisecond
	}
	if c.SwitchTimeout <= 0 {
		c.SwitchTimeout = 10 * time.Second
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 5 * time.Millisecond
	}
	if c.VerifyRetries <= 0 {
		c.VerifyRetries = 3
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]*$`)

func (c Config) validate() error {
	if c.Store == nil {
		return fmt.Errorf("%w: no Store", ErrConfig)
	}
	if len(c.Shards) == 0 {
		return fmt.Errorf("%w: no Shards", ErrConfig)
	}
	if _, maria := c.eng.(mariaEngine); maria && engines.MariaDBBinlog == nil {
		return engines.MariaDBBinlogNotLinked("reshard", ErrConfig)
	}
	seen := map[string]bool{}
	for i, s := range c.Shards {
		switch {
		case s.Name == "":
			return fmt.Errorf("%w: shard %d has no Name", ErrConfig, i)
		case seen[s.Name]:
			return fmt.Errorf("%w: shard %q listed twice", ErrConfig, s.Name)
		case s.DB == nil:
			return fmt.Errorf("%w: shard %q has no DB", ErrConfig, s.Name)
		}
		seen[s.Name] = true
		if e := engineOf(s.DB); e.name() != c.eng.name() {
			return fmt.Errorf("%w: shard %q is %s, shard %q %s: every shard must be of one kind", ErrConfig, s.Name, e.name(), c.Shards[0].Name, c.eng.name())
		}
	}
	if len(c.Tables) == 0 {
		return fmt.Errorf("%w: no Tables", ErrConfig)
	}
	for _, t := range c.Tables {
		if t.Name == "" || t.Key == "" {
			return fmt.Errorf("%w: table %q needs a Name and a Key", ErrConfig, t.Name)
		}
	}
	if c.Schema != "" && !identRE.MatchString(c.Schema) {
		return fmt.Errorf("%w: Schema %q is not a plain identifier", ErrConfig, c.Schema)
	}
	return nil
}

func (c Config) shard(name string) (Shard, bool) {
	for _, s := range c.Shards {
		if s.Name == name {
			return s, true
		}
	}
	return Shard{}, false
}

// normalize checks mv against the shards and a number of buckets (0:
// unknown yet) and fills its ID.
func (mv Move) normalize(c Config) (Move, error) {
	if mv.From == "" || mv.To == "" || mv.From == mv.To {
		return mv, fmt.Errorf("%w: move from %q to %q", ErrConfig, mv.From, mv.To)
	}
	for _, n := range []string{mv.From, mv.To} {
		if _, ok := c.shard(n); !ok {
			return mv, fmt.Errorf("%w: move names shard %q, not in Shards", ErrConfig, n)
		}
	}
	if len(mv.Buckets) == 0 {
		return mv, fmt.Errorf("%w: move %s -> %s has no buckets", ErrConfig, mv.From, mv.To)
	}
	bs := slices.Clone(mv.Buckets)
	slices.Sort(bs)
	bs = slices.Compact(bs)
	if bs[0] < 0 || bs[len(bs)-1] >= sharding.MaxBuckets {
		return mv, fmt.Errorf("%w: bucket out of range 0..%d", ErrConfig, sharding.MaxBuckets-1)
	}
	mv.Buckets = bs
	if mv.ID == "" {
		mv.ID = mv.From + "-" + mv.To + "-" + bucketRanges(bs)
	}
	return mv, nil
}

// bucketRanges renders sorted buckets as "0-3,8".
func bucketRanges(bs []int) string {
	var parts []string
	for i := 0; i < len(bs); {
		j := i
		for j+1 < len(bs) && bs[j+1] == bs[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(bs[i]))
		} else {
			parts = append(parts, strconv.Itoa(bs[i])+"-"+strconv.Itoa(bs[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// slotName is the move's replication slot on the source: lower case
// letters, digits and underscores, at most 63 bytes.
func slotName(moveID string) string {
	h := sha256.Sum256([]byte(moveID))
	return "freshread_reshard_" + hex.EncodeToString(h[:10])
}
