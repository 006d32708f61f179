package sharding

import (
	"context"
	"time"
)

// BucketMap is one version of the bucket-to-shard map: which shard owns
// each bucket, and the hot users. Every process follows the same stored
// map (Config.Map); Config.Algorithm and Config.HotUsers are the map when
// none is stored yet (version 0).
type BucketMap struct {
	// Version increases by one with every published change; 0 is the map
	// built from Config (nothing stored).
	Version int64 `json:"version"`
	// Owners[b] is the name of the shard that owns bucket b; len(Owners)
	// is the number of buckets, which never changes (IDs embed buckets).
	Owners []string `json:"owners"`
	// HotUsers maps a user ID to the shard that holds all its rows.
	HotUsers map[int64]string `json:"hot_users,omitempty"`
}

// MoveStatus is the shared state of one bucket move (package reshard
// writes it; the sharding plugin reads it for reads that accept a lag).
type MoveStatus struct {
	// ID names the move (reshard.Move.ID).
	ID string `json:"id"`
	// Buckets are the buckets that move.
	Buckets []int `json:"buckets"`
	// From is the name of the shard they leave.
	From string `json:"from"`
	// To is the name of the shard they move to.
	To string `json:"to"`
	// Phase is one of MovePlanned, MoveCopying, MoveCatchingUp,
	// MoveSwitching, MoveSwitched, MoveCleaning, MoveDone, MoveRolledBack.
	Phase string `json:"phase"`
	// CaughtUpAge is, when the status was loaded, how long ago the target
	// last held every change of the moving buckets committed on the source
	// (the bound on its lag); negative when it never has. Computed by the
	// store from its own clock.
	CaughtUpAge time.Duration `json:"-"`
}

// Move phases (MoveStatus.Phase).
const (
	MovePlanned    = "planned"
	MoveCopying    = "copying"
	MoveCatchingUp = "catching-up"
	MoveSwitching  = "switching"
	MoveSwitched   = "switched"
	MoveCleaning   = "cleaning"
	MoveDone       = "done"
	MoveRolledBack = "rolled-back"
)

// NotCaughtUp is SaveMove's caughtUp for a status that says nothing new
// about the target's lag (an earlier caught-up time is kept).
const NotCaughtUp time.Duration = -1

// MapClient is one process following the map, as it last reported itself.
type MapClient struct {
	// ID identifies the process (its Config.ClientID).
	ID      string
	Version int64 // the map version it routes with
	// Age is how long ago (by the store's clock) it last reported.
	Age time.Duration
	// Lease is the client's Config.MapLease: a client that has not
	// refreshed the map for Lease refuses sharded statements, so a client
	// with Age > Lease no longer routes with any version.
	Lease time.Duration
}

// MapStore holds the shared bucket map. NewSQLMapStore keeps it in a
// PostgreSQL database (the lookup database, say): durable and
// transactional, unlike a cache.
type MapStore interface {
	// Load returns the current map and the moves not yet done; found is
	// false when no map was ever published.
	Load(ctx context.Context) (m BucketMap, moves []MoveStatus, found bool, err error)
	// Publish stores m as version prev+1 if the current version is prev
	// (0: none stored) and returns the new version; ErrMapConflict when
	// another version was published in between.
	Publish(ctx context.Context, prev int64, m BucketMap) (int64, error)
	// SaveMove creates or updates a move's shared status. caughtUp, when
	// not NotCaughtUp (negative), records that the target holds every
	// change committed on the source up to caughtUp ago (measured by the
	// caller from when it read the source's position, so the store's
	// CaughtUpAge is never younger than the truth).
	SaveMove(ctx context.Context, st MoveStatus, caughtUp time.Duration) error
	// Ack records that client routes with version v and refuses to route
	// once it has not refreshed for lease.
	Ack(ctx context.Context, client string, v int64, lease time.Duration) error
	// Clients lists the clients that reported, with their age.
	Clients(ctx context.Context) ([]MapClient, error)
}

// GuardSQLState is the SQLSTATE the shard guard (package reshard) raises
// when a statement writes a bucket the shard does not own, or one whose
// move is switching: a *pgconn.PgError with this Code on PostgreSQL, a
// *mysql.MySQLError (go-sql-driver/mysql) with this SQLState and Number
// 1644 on MariaDB and MySQL. The sharding plugin turns it into
// ErrBucketMoved, refreshes the map and retries where it can.
const GuardSQLState = "FRB01"
