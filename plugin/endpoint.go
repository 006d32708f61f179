package plugin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"weak"
)

// ErrSeveralServers is returned by Initialize when a replica's DSN reaches
// more than one server (a reader endpoint, a load balancer, a round-robin
// DNS name, a pooler over several hosts): connections opened at once
// reported different server identities. The plugin reads a replica's
// replay position on one connection and sends reads on others, so every
// connection of a replica's pool must reach the server that was polled
// (docs/design/topology.md). The remedy is one Replica per server, each
// with a DSN that reaches only that server.
var ErrSeveralServers = errors.New("plugin: a replica DSN reaches several servers")

// endpointProbes is how many connections Initialize holds open at once on
// each replica to compare the servers they reach (fewer when the replica's
// MaxOpenConns is lower: with one connection, reads and polls share it).
const endpointProbes = 3

// endpointRecheck is the least time between two verifications of a
// replica whose poll saw another server than the one verified.
const endpointRecheck = time.Second

// Server identities: what tells apart two servers replicating from one
// primary, read in one expression so that the poll can add it to its
// replay-position query (docs/design/topology.md says why these).
const (
	// pgIdentity: the postmaster's start time in microseconds and the
	// port it listens on. Physical replicas share the primary's
	// system_identifier; their start times differ.
	pgIdentity = "'started ' || (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint::text || ' port ' || current_setting('port')"
	// mariadbIdentity: server_id (unique among the servers of one
	// replication topology, which MariaDB requires) with the host name and
	// port. MariaDB has no server_uuid.
	mariadbIdentity = "CONCAT('server_id ', @@GLOBAL.server_id, ' on ', @@hostname, ':', @@port)"
	// mysqlIdentity: server_uuid (unique per data directory) with
	// server_id, host name and port.
	mysqlIdentity = "CONCAT(@@GLOBAL.server_uuid, ' server_id ', @@GLOBAL.server_id, ' on ', @@hostname, ':', @@port)"
)

// rowQuerier is what an identity is read through: a *sql.DB or a *sql.Conn.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// serverIdentifier is an engine that can read the identity of the server
// a connection reaches: identityExpr is the SQL expression of it, which
// the engine's replay-position query reads too.
type serverIdentifier interface {
	identityExpr() string
}

func (pgEngine) identityExpr() string     { return pgIdentity }
func (*mariaEngine) identityExpr() string { return mariadbIdentity }
func (*mysqlEngine) identityExpr() string { return mysqlIdentity }

// serverIdentity reads the identity expression expr on q.
func serverIdentity(expr string) func(context.Context, rowQuerier) (string, error) {
	return func(ctx context.Context, q rowQuerier) (string, error) {
		var id string
		if err := q.QueryRowContext(ctx, "SELECT "+expr).Scan(&id); err != nil {
			return "", fmt.Errorf("plugin: read the server identity: %w", err)
		}
		return id, nil
	}
}

// identifierOf returns the engine that reads server identities: e, or the
// base engine of heartbeat positions.
func identifierOf(e engine) (serverIdentifier, bool) {
	if h, ok := e.(*heartbeatEngine); ok {
		e = h.engine
	}
	si, ok := e.(serverIdentifier)
	return si, ok
}

// endpoint is what is known of the server a replica's DSN reaches: the
// identity verified (all connections opened at once agreed), compared
// with the one each poll reads.
type endpoint struct {
	name string
	read func(context.Context, rowQuerier) (string, error)
	log  *slog.Logger

	mu sync.Mutex
	// id is the identity last verified ("" until a verification
	// succeeds); trusted: no poll has seen another server since.
	id      string
	trusted bool
	// idle is the pool's MaxIdleConns as configured (Pool: 0 for
	// database/sql's default, negative for none), restored after idle
	// connections are closed.
	idle int
	// triedAt is when the last verification ran, and err its failure.
	triedAt time.Time
	err     error
	// logged says what a failed check logged since the last success
	// (logChanged...: each said once per spell); secrets are what the log
	// must not show (replica.secrets).
	logged  int
	secrets []string
}

// endpoints maps a replica's pool to its endpoint, for the engines' poll
// queries. Keys are weak: an entry goes when its pool is collected.
var endpoints sync.Map // weak.Pointer[sql.DB] → *endpoint

// watchEndpoint registers e as db's endpoint: from now on each poll of db
// compares the identity it reads (checkEndpoint).
func watchEndpoint(db *sql.DB, e *endpoint) {
	k := weak.Make(db)
	endpoints.Store(k, e)
	runtime.AddCleanup(db, func(k weak.Pointer[sql.DB]) { endpoints.Delete(k) }, k)
}

// checkEndpoint is called by a poll that read identity seen with the
// replay position of db: nil when seen is the verified server. Otherwise
// (the DSN reaches another server now, or it was never verified) it
// verifies the endpoint again, at most once per endpointRecheck, and
// returns an error until the connections agree: the poll then counts as
// failed, so the replica is down (and logged once) until verified.
func checkEndpoint(ctx context.Context, db *sql.DB, seen string) error {
	v, ok := endpoints.Load(weak.Make(db))
	if !ok {
		return nil // not a watched replica
	}
	return v.(*endpoint).check(ctx, db, seen, time.Now())
}

func (e *endpoint) check(ctx context.Context, db *sql.DB, seen string, now time.Time) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.trusted && seen == e.id {
		return nil
	}
	// Another server, or not verified since one was seen: no poll passes
	// until a verification succeeds, even one that reaches the server
	// verified before (other connections of the pool may not).
	err := e.recheck(ctx, db, seen, now)
	if err == nil {
		e.logged = 0
		return nil
	}
	kind, msg := logChanged, "freshread: a poll of the replica reached another server than the one verified; the replica is down until its connections all reach one server (give each server its own Replica and DSN)"
	switch {
	case errors.Is(err, ErrSeveralServers):
		kind, msg = logSeveral, "freshread: the replica's connections reach several servers; the replica is down until they all reach one (give each server its own Replica and DSN)"
	case errors.Is(err, errUnverified):
		kind, msg = logUnverified, "freshread: the server the replica's DSN reaches could not be verified; the replica is down until it is"
	}
	if e.logged&kind == 0 {
		e.logged |= kind
		e.log.WarnContext(ctx, msg, "replica", e.name, "err", redact(err, e.secrets))
	}
	return err
}

// What a failed check logged since the last success (endpoint.logged):
// each once.
const (
	logChanged = 1 << iota
	logSeveral
	logUnverified
)

// errUnverified marks a verification that could not read every
// connection's identity.
var errUnverified = errors.New("verify the server its DSN reaches")

// recheck verifies e again (at most once per endpointRecheck) after a poll
// saw seen: nil when every connection, the poll's included, reaches one
// server, which becomes the verified one.
func (e *endpoint) recheck(ctx context.Context, db *sql.DB, seen string, now time.Time) error {
	if e.trusted && seen != e.id {
		e.trusted = false
		e.err = fmt.Errorf("plugin: replica %q: its poll reached server %q, not the verified %q; no reads go to it until its connections agree again", e.name, seen, e.id)
	}
	if !e.triedAt.IsZero() && now.Sub(e.triedAt) < endpointRecheck && e.err != nil {
		return e.err
	}
	e.triedAt = now
	ids, err := probeIdentities(ctx, db, e.read)
	if err != nil {
		e.err = fmt.Errorf("plugin: replica %q: %w: %w", e.name, errUnverified, err)
		return e.err
	}
	id, err := sameServer(e.name, append(ids, seen))
	if err != nil {
		// Connections to a server the DSN no longer reaches may be idle
		// in the pool: close them, so the next verification opens new
		// ones.
		e.flushIdle(db)
		e.err = err
		return err
	}
	if e.id != "" && id != e.id {
		e.log.InfoContext(ctx, "freshread: the replica's DSN reaches another server than at start (restarted or replaced); verified, reads may go to it once it is fresh",
			"replica", e.name, "was", e.id, "now", id)
	}
	e.id, e.trusted, e.err = id, true, nil
	return nil
}

// flushIdle closes db's idle connections and keeps e.idle of those
// released later.
func (e *endpoint) flushIdle(db *sql.DB) {
	db.SetMaxIdleConns(-1)
	switch {
	case e.idle == 0:
		db.SetMaxIdleConns(2) // database/sql's default
	case e.idle > 0:
		db.SetMaxIdleConns(e.idle)
	}
}

// verify reads the identity on every connection opened at once and
// records it when they agree.
func (e *endpoint) verify(ctx context.Context, db *sql.DB) error {
	ids, err := probeIdentities(ctx, db, e.read)
	if err != nil {
		return fmt.Errorf("plugin: replica %q: %w: %w", e.name, errUnverified, err)
	}
	id, err := sameServer(e.name, ids)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.triedAt, e.err = time.Now(), err
	if err == nil {
		e.id, e.trusted = id, true
	}
	return err
}

// probeIdentities holds endpointProbes connections of db open at once (so
// the pool cannot hand the same one twice; fewer when MaxOpenConns is
// lower) and reads the server identity on each.
func probeIdentities(ctx context.Context, db *sql.DB, read func(context.Context, rowQuerier) (string, error)) ([]string, error) {
	n := endpointProbes
	if limit := db.Stats().MaxOpenConnections; limit > 0 {
		n = min(n, limit)
	}
	conns := make([]*sql.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
	}
	ids := make([]string, 0, n)
	for _, c := range conns {
		id, err := read(ctx, c)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// sameServer returns the identity every one of ids shows, or an error
// wrapping ErrSeveralServers that names replica, the servers and the
// remedy.
func sameServer(replica string, ids []string) (string, error) {
	distinct := slices.Compact(slices.Sorted(slices.Values(ids)))
	if len(distinct) == 1 {
		return distinct[0], nil
	}
	return "", fmt.Errorf("%w: replica %q: %d connections held at once reached %d servers (%s): the plugin polls a replica's replay position on one connection and reads on others, so give each server its own Replica with a DSN that reaches only it, not a reader endpoint, load balancer, round-robin DNS name or pooler over several hosts",
		ErrSeveralServers, replica, len(ids), len(distinct), strings.Join(distinct, "; "))
}
