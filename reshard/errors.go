package reshard

import "errors"

// Errors returned by the mover, wrapped with the table, bucket, key or
// shard they concern; test them with errors.Is.
var (
	// ErrConfig: the Config or the Move is invalid (unknown shard, bucket
	// out of range, overlapping moves in a Plan, a move ID reused for
	// other buckets...).
	ErrConfig = errors.New("reshard: invalid configuration")
	// ErrSchema: a sharded table cannot be moved as it is: missing on a
	// shard, without a primary key, partitioned, with a replica identity
	// other than the primary key or FULL, or with columns that differ
	// between the source and the target.
	ErrSchema = errors.New("reshard: unsupported table")
	// ErrNotOwner: a moving bucket is not owned by the move's source in
	// the current map (and the move was not published either), or a hot
	// user of a moving bucket lives on the source or the target.
	ErrNotOwner = errors.New("reshard: bucket not owned by the source")
	// ErrForeignRow: the target already holds, outside the moving
	// buckets, a row with the primary key of a row being moved. Primary
	// keys must be unique across shards; the row is never overwritten.
	ErrForeignRow = errors.New("reshard: primary key already used on the target outside the move")
	// ErrBusy: another mover holds this move (its advisory lock on the
	// target), or another move fences one of the buckets.
	ErrBusy = errors.New("reshard: move in progress elsewhere")
	// ErrPhase: the step cannot run in the move's current phase (Switch
	// before the copy finished, Cleanup before the switch, Rollback after
	// the map was published...).
	ErrPhase = errors.New("reshard: step not allowed in this phase")
	// ErrSlotLost: the replication slot recorded for the move is gone from
	// the source, so changes since the copy began may be lost: roll the
	// move back and start again.
	ErrSlotLost = errors.New("reshard: replication slot lost")
	// ErrDecode: a row of the slot's test_decoding output could not be
	// parsed, or a change lacks its primary key (an unchanged TOASTed key,
	// a replica identity without it).
	ErrDecode = errors.New("reshard: cannot decode change")
	// ErrVerify: the source and the target differ in a moving bucket
	// (VerifyReport.Mismatches lists where).
	ErrVerify = errors.New("reshard: source and target differ")
	// ErrSwitchTimeout: the switch did not finish within
	// Config.SwitchTimeout (transactions on the source still open, or
	// clients that neither acknowledged the new map nor went silent).
	// Before the publish the switch was rolled back; after it, the move
	// stays switching and Switch (or Run) finishes it.
	ErrSwitchTimeout = errors.New("reshard: switch timed out")
)
