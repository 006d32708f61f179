package plugin

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"time"
	"weak"
)

// A COMMIT whose outcome is unknown on MariaDB (abandoned_commit.go for
// PostgreSQL; docs/design/reliability.md, "A COMMIT the client gave up
// on"). The plugin's MariaDB transactions run on a connection pinned for
// them (beginMaria), whose server thread's ID (CONNECTION_ID()) the plugin
// learns once per driver connection, at the first transaction it begins
// there. When the client gives up on that COMMIT (its
// context ended, the connection broke), the write is held, as a
// transaction the plugin did not begin is, until that thread no longer
// exists in information_schema.PROCESSLIST: then its COMMIT committed or
// never will, and the position the poller reads after that is past it.
// Thread IDs only grow, so a later connection never holds the write. A
// thread idle (Sleep) for abandonedIdleLimit, its COMMIT not received, is
// ended (KILL CONNECTION): it can then never commit. A thread running the
// COMMIT is never cut.

// abandonedThreadPrefix starts the id of an abandoned MariaDB COMMIT's
// held write: "thread:<id>".
const abandonedThreadPrefix = "thread:"

// mariaThreadID is the server thread ID of the driver connection key names,
// asked through query (its connection, or a transaction on it) the first
// time; 0 when it cannot be known.
func (p *Plugin) mariaThreadID(ctx context.Context, key weak.Pointer[byte], query func(ctx context.Context, q string, args ...any) *sql.Row) uint64 {
	if id := p.mthreads.held(key); id != 0 {
		return id
	}
	if key.Value() == nil {
		return 0
	}
	var id uint64
	if err := query(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		return 0
	}
	p.mthreads.remember(key, id)
	return id
}

// abandonedThreadEnded reports whether the server thread of an abandoned
// MariaDB COMMIT's held write fw (thread: its ID) has ended, and ends it
// once it sat idle for abandonedIdleLimit.
func (p *Plugin) abandonedThreadEnded(ctx context.Context, fw *foreignWrite, thread string, now time.Time) (bool, error) {
	id, err := strconv.ParseUint(thread, 10, 64)
	if err != nil {
		return true, nil // not an id holdAbandoned made
	}
	var command string
	err = p.primaryDB.QueryRowContext(ctx, "SELECT COMMAND FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&command)
	if errors.Is(err, sql.ErrNoRows) {
		return true, nil // the thread is gone
	}
	if err != nil {
		return false, err
	}
	if command == "Sleep" && now.Sub(fw.since) >= abandonedIdleLimit {
		// Idle: the COMMIT never arrived, and its client is gone. Ended,
		// the transaction can never commit; the next check sees the
		// thread gone.
		gone, err := p.killMariaThread(ctx, id)
		if gone {
			return true, nil // gone meanwhile
		}
		if err == nil {
			p.cfg.Logger.WarnContext(ctx, "freshread: ended a transaction whose COMMIT this process gave up on and that never received it (the network held it); it cannot commit now", "thread", id, "idle_for", now.Sub(fw.since).Round(time.Millisecond))
		}
	}
	return false, nil
}
