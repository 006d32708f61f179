package plugin

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"time"
)

// A COMMIT whose outcome is unknown (docs/design/reliability.md, "A
// COMMIT the client gave up on"). The client may give up on a COMMIT
// (its context ended, the connection broke) while the server still has
// it: running it (deferred triggers waiting on a lock, a synchronous
// standby's confirmation) or not even received yet (a network that holds
// it). Such a transaction may commit later. Published at the next poll,
// as a write whose position could not be read is, its write could get a
// position before its commit, and the other processes would then read it
// stale from replicas past that position until they replay the commit.
//
// So a folded transaction (commit_fold.go), whose server process the
// plugin knows from its connection, has its write held as a transaction
// the plugin did not begin is (foreign_tx.go), with this process reading
// from the primary, until that server process no longer runs the
// transaction: then it committed or never will, and the position the
// poller reads after that, and publishes the write with, is at or past
// its commit. The transaction is named by the process's ID and, once the
// poller has seen it, its transaction ID (backend_xid), so that a process
// ID the server gives again later never holds the write. A transaction
// that waits idle for a COMMIT its client sent but that has not arrived
// (its client is gone and can send nothing else) is ended by the poller
// after abandonedIdleLimit (pg_terminate_backend): it can then never
// commit. A COMMIT the server is running is never cut: the write is held
// until it ends.
//
// The other processes are told at once, as of any unpublished write
// (tellUnpublished): a commit that took effect before that is past the
// position they then wait for.

// abandonedPrefix starts the id of an abandoned COMMIT's held write:
// "backend:<pid>", then "backend:<pid>:<xid>" once its transaction was
// seen.
const abandonedPrefix = "backend:"

// abandonedIdleLimit is how long a transaction whose COMMIT was abandoned
// may sit idle (the COMMIT not received) before the poller ends it.
const abandonedIdleLimit = 5 * time.Second

// abandonedCommit holds the write w of a folded transaction whose COMMIT,
// sent to server process backend, has an unknown outcome, and tells the
// other processes.
func (p *Plugin) abandonedCommit(ctx context.Context, w writeSet, backend uint32, at time.Time) {
	p.holdAbandoned(ctx, w, abandonedPrefix+strconv.FormatUint(uint64(backend), 10), at)
}

// holdAbandoned holds w under id until the poller finds its transaction
// ended (releaseEndedForeign), and tells the other processes.
func (p *Plugin) holdAbandoned(ctx context.Context, w writeSet, id string, at time.Time) {
	fw := &foreignWrite{w: w, since: at}
	fw.id.Store(&id)
	p.pending.hold(fw)
	p.tellUnpublished(ctx, w, at)
}

// abandonedEnded reports whether the transaction of an abandoned COMMIT's
// held write fw has ended (backend: its id after abandonedPrefix). The
// first time it is seen, its transaction ID is added to fw's id; a
// transaction idle in its transaction for abandonedIdleLimit is ended.
func (p *Plugin) abandonedEnded(ctx context.Context, fw *foreignWrite, backend string, now time.Time) (bool, error) {
	pidText, xid, seen := strings.Cut(backend, ":")
	pid, err := strconv.ParseInt(pidText, 10, 32)
	if err != nil {
		return true, nil // not an id abandonedCommit made
	}
	var state, x sql.NullString
	err = p.primaryDB.QueryRowContext(ctx, "SELECT state, backend_xid::text FROM pg_stat_activity WHERE pid = $1", pid).Scan(&state, &x)
	if errors.Is(err, sql.ErrNoRows) {
		return true, nil // the server process is gone
	}
	if err != nil {
		return false, err
	}
	if !x.Valid || (seen && x.String != xid) {
		return true, nil // it runs no transaction that wrote, or another one
	}
	if !seen {
		id := abandonedPrefix + pidText + ":" + x.String
		fw.id.Store(&id)
	}
	if strings.HasPrefix(state.String, "idle in transaction") && now.Sub(fw.since) >= abandonedIdleLimit {
		// The COMMIT never arrived, and its client is gone: end the
		// transaction, which may then never commit. The next check sees
		// the process gone.
		var ended sql.NullBool
		err := p.primaryDB.QueryRowContext(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1 AND backend_xid::text = $2 AND state LIKE 'idle in transaction%'", pid, x.String).Scan(&ended)
		if err == nil && ended.Bool {
			p.cfg.Logger.WarnContext(ctx, "freshread: ended a transaction whose COMMIT this process gave up on and that never received it (the network held it); it cannot commit now", "pid", pid, "idle_for", now.Sub(fw.since).Round(time.Millisecond))
		}
	}
	return false, nil
}
