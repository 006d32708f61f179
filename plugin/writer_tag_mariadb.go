package plugin

import (
	"database/sql"
	"fmt"

	"github.com/freshread/freshread/internal/lib/sqlerr"
)

// Writer tags on MariaDB (writer_tag.go). MariaDB has no shared advisory
// lock that another session can list, so a connection's tag is a user
// lock (GET_LOCK) whose name holds the namespace, the member's tag and
// the connection's own ID: "freshread:<ns>:<tag>:<connection id>". No two
// connections contend for one, and another process finds the holders of
// a lapsed tag by asking, for each connection of the server
// (information_schema.PROCESSLIST), whether it holds the lock of its own
// ID (IS_USED_LOCK), then ends them (KILL CONNECTION: writer_fence.go).
//
// A connection takes the tag before a write's fence, in a round trip
// (the write's transaction, before its COMMIT; an autocommit write,
// before the statement, on a connection pinned for it) and keeps it: a
// connection that holds it already takes nothing again, and taking the
// next member's tag releases the previous one's in the same statement.
// An idle connection holding a lapsed tag is ended too: its pool opens
// another.

// mariaTagName is the SQL expression of the tag lock's name on the
// connection that runs it.
func mariaTagName(ns, tag uint32) string {
	return fmt.Sprintf("CONCAT('freshread:%d:%d:', CONNECTION_ID())", ns, tag)
}

// mariaTagQuery takes tag unless the connection holds it, and releases the
// previous member's (prev, 0: none) if the connection holds that; it
// returns one row of two columns, the first 1 when the connection holds
// tag.
func mariaTagQuery(ns, tag, prev uint32) string {
	n := mariaTagName(ns, tag)
	q := fmt.Sprintf("SELECT IF(IS_USED_LOCK(%s) = CONNECTION_ID(), 1, GET_LOCK(%s, 0))", n, n)
	if prev == 0 || prev == tag {
		return q + ", 0"
	}
	o := mariaTagName(ns, prev)
	return q + fmt.Sprintf(", IF(IS_USED_LOCK(%s) = CONNECTION_ID(), RELEASE_LOCK(%s), 0)", o, o)
}

// mariaTake checks the row of mariaTagQuery.
func mariaTake(row *sql.Row) error {
	var got, released sql.NullInt64
	if err := row.Scan(&got, &released); err != nil {
		return fmt.Errorf("plugin: tag the primary connection with this process's lease: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		return fmt.Errorf("plugin: tag the primary connection with this process's lease: GET_LOCK returned %v", got)
	}
	return nil
}

// endedByOther reports whether err says that another session ended the
// connection (sqlerr.EndedByOther).
func endedByOther(err error) bool { return sqlerr.EndedByOther(err) }
