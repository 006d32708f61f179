package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/freshread/freshread/internal/engines"
	"github.com/freshread/freshread/lsnstore"
)

// The writer fence on MariaDB (writer_fence.go, writer_tag_mariadb.go): the
// connections holding a lapsed tag are those whose own ID names a held
// user lock "freshread:<ns>:<tag>:<id>", found in one statement over
// information_schema.PROCESSLIST and ended with KILL CONNECTION, one
// statement each. A connection being killed stays listed, and keeps its
// locks, until its thread has ended: a later poll finds it again and the
// floor waits. PROCESSLIST lists other users' connections only to a user
// with PROCESS (which following foreign transactions needs too): without
// it the fence sees this user's alone, said once at the first fence.

// errKillDenied marks a KILL the server refused for lack of a privilege.
var errKillDenied = errors.New("plugin: KILL CONNECTION refused")

// endLapsedMariaWriters ends the primary connections holding a tag the
// store lists as lapsed and returns how many it found: no query when none
// lapsed.
func (p *Plugin) endLapsedMariaWriters(ctx context.Context, tg lsnstore.LeaseTagger) (int, error) {
	lapsed, err := tg.LapsedLeaseTags(ctx)
	if err != nil || len(lapsed) == 0 {
		return 0, err
	}
	if p.foreignTxDenied != nil {
		p.fence.blind.Do(func() {
			p.cfg.Logger.WarnContext(ctx, "freshread: the writer fence sees only this user's connections to the primary (information_schema.PROCESSLIST lists the others' only with PROCESS): a COMMIT of another process under another user that outlives that process's lease may be read stale; grant PROCESS, or run every process of the store under one user", "missing", p.foreignTxDenied.Error())
		})
	}
	ns, _ := tg.LeaseTag()
	conds := make([]string, 0, len(lapsed))
	for _, t := range lapsed {
		conds = append(conds, fmt.Sprintf("IS_USED_LOCK(CONCAT('freshread:%d:%d:', ID)) = ID", ns, t))
	}
	q := "SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND (" + strings.Join(conds, " OR ") + ")"
	rows, err := p.primaryDB.QueryContext(ctx, q)
	if err != nil {
		return 0, fmt.Errorf("plugin: list the connections of lapsed writers: %w", err)
	}
	var ids []uint64
	for rows.Next() {
		var id uint64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, fmt.Errorf("plugin: list the connections of lapsed writers: %w", err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("plugin: list the connections of lapsed writers: %w", err)
	}
	for _, id := range ids {
		if _, err := p.killMariaThread(ctx, id); err != nil {
			return 0, fmt.Errorf("plugin: end connection %d of a lapsed writer: %w", id, err)
		}
	}
	return len(ids), nil
}

// killMariaThread ends the primary's server thread id (KILL CONNECTION);
// gone: it had ended already. A refusal for lack of a privilege wraps
// errKillDenied.
func (p *Plugin) killMariaThread(ctx context.Context, id uint64) (gone bool, err error) {
	_, err = p.primaryDB.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
	if n, ok := engines.MySQLErrorNumber(err); ok {
		switch n {
		case 1094: // unknown thread
			return true, nil
		case 1095: // not its owner
			return false, fmt.Errorf("%w: %w", errKillDenied, err)
		}
	}
	return false, err
}
