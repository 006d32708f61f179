package tracker

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// Schema changes made outside the plugin (psql, migration tools, other
// services). Logical decoding does not decode the catalog, so a DDL
// transaction is invisible to pgoutput. ModeLogical therefore installs an
// event trigger that emits a transactional logical message
// (pg_logical_emit_message) at the end of every DDL command: the message
// is decoded inside the DDL's transaction, and its commit raises the
// unknown-tables position, which every read (and so every catalog read)
// includes. Coarse on purpose: a rename or a DROP ... CASCADE names
// objects an event trigger cannot all report, and DDL is rare.

// ddlMessagePrefix is the prefix of the logical messages the event
// trigger emits.
const ddlMessagePrefix = "freshread.ddl"

// ddlTriggerName is the event trigger's name, and its function's.
const ddlTriggerName = "freshread_ddl"

const ddlFunctionSQL = `CREATE OR REPLACE FUNCTION public.` + ddlTriggerName + `() RETURNS event_trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_logical_emit_message(true, '` + ddlMessagePrefix + `', tg_tag);
END
$$`

const ddlTriggerSQL = `CREATE EVENT TRIGGER ` + ddlTriggerName + ` ON ddl_command_end
EXECUTE FUNCTION public.` + ddlTriggerName + `()`

// ensureDDLTrigger installs the event trigger when missing. It needs a
// superuser: without one it returns an error naming the privilege, and
// the caller warns that DDL made outside the plugin is not tracked.
func (w *worker) ensureDDLTrigger(ctx context.Context) error {
	p, err := w.pool("primary")
	if err != nil {
		return err
	}
	var exists bool
	if err := p.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = $1)", ddlTriggerName).Scan(&exists); err != nil {
		return fmt.Errorf("read pg_event_trigger: %w", err)
	}
	if exists {
		return nil
	}
	if _, err := p.Exec(ctx, ddlFunctionSQL); err != nil {
		return fmt.Errorf("create function public.%s: %w", ddlTriggerName, err)
	}
	if _, err := p.Exec(ctx, ddlTriggerSQL); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42710" { // duplicate_object: another tracker made it
			return nil
		}
		return fmt.Errorf("create event trigger %s: %w", ddlTriggerName, err)
	}
	w.log.Info("event trigger created: schema changes made outside the plugin are tracked", "event_trigger", ddlTriggerName)
	return nil
}
