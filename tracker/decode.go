package tracker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/freshread/freshread/lsnstore"
)

// ModeLogical: consume a logical replication slot with pgoutput and a
// publication FOR ALL TABLES. Every committed transaction's changed
// tables are raised to the end of its commit record (the position a
// replica must have replayed to show it); only then is the slot's
// confirmed position moved past it. A tracker that dies between the raise
// and the confirmation raises the transaction again on restart (raises are
// idempotent); one that dies before the raise resumes before the
// transaction: no committed write is missed.

// SlotName returns the slot name the tracker uses for database db.
func SlotName(prefix, db string) string {
	var b strings.Builder
	b.WriteString(prefix)
	for i := 0; i < len(db); i++ {
		c := db[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '_':
			b.WriteByte(c)
		case 'A' <= c && c <= 'Z':
			b.WriteByte(c + 'a' - 'A')
		default:
			b.WriteByte('_')
		}
	}
	s := b.String()
	if len(s) > 63 {
		s = s[:63]
	}
	return s
}

func (w *worker) slotName() string { return SlotName(w.t.cfg.SlotPrefix, w.entry.Database) }

func (w *worker) decodeLoop(ctx context.Context) {
	var b backoff
	failing := false
	for {
		start := time.Now()
		err := w.decode(ctx)
		w.streaming.Store(false)
		if ctx.Err() != nil {
			return
		}
		msg := w.t.secrets.redact(fmt.Sprint(err))
		w.decodeErr.Store(&msg)
		w.t.metrics.errors.WithLabelValues(w.id, "decoding").Inc()
		if time.Since(start) > time.Minute {
			b.reset()
		}
		d := b.next()
		if !failing || d >= 10*time.Second {
			w.log.Warn("logical decoding stopped; resuming from the slot", "err", w.t.secrets.err(err), "retry_in", d.String())
		}
		failing = true
		if !sleep(ctx, d) {
			return
		}
	}
}

// ensureSlot creates the publication and the slot when missing. It returns
// created = true when it made the slot.
func (w *worker) ensureSlot(ctx context.Context, repl *pgconn.PgConn) (created bool, err error) {
	p, err := w.pool("primary")
	if err != nil {
		return false, err
	}
	pub := w.t.cfg.Publication
	var exists bool
	if err := p.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", pub).Scan(&exists); err != nil {
		return false, fmt.Errorf("read pg_publication: %w", err)
	}
	if !exists {
		if _, err := p.Exec(ctx, "CREATE PUBLICATION "+pub+" FOR ALL TABLES"); err != nil {
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "42710" { // duplicate_object: another tracker made it
				return false, fmt.Errorf("create publication %s: %w", pub, err)
			}
		}
		w.log.Info("publication created", "publication", pub)
	}
	slot := w.slotName()
	var db string
	err = p.QueryRow(ctx, "SELECT coalesce(database::text, '') FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&db)
	switch {
	case err == nil && db != w.entry.Database:
		return false, fmt.Errorf("replication slot %s belongs to database %q, not %q: choose another slot prefix", slot, db, w.entry.Database)
	case err == nil:
		return false, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return false, fmt.Errorf("read pg_replication_slots: %w", err)
	}
	if _, err := pglogrepl.CreateReplicationSlot(ctx, repl, slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "NOEXPORT_SNAPSHOT"}); err != nil {
		return false, fmt.Errorf("create replication slot %s: %w", slot, err)
	}
	w.log.Info("replication slot created", "slot", slot)
	return true, nil
}

// decode runs one replication session until an error or ctx ends.
func (w *worker) decode(ctx context.Context) error {
	dsn, err := w.t.dsn(Target{Host: w.entry.Host, Port: w.entry.Port, Database: w.entry.Database, Role: "primary"})
	if err != nil {
		return err
	}
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return w.t.secrets.err(err)
	}
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["application_name"] = "freshread-tracker-decoder"
	cfg.ConnectTimeout = 5 * time.Second
	repl, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("replication connection: %w", err)
	}
	defer repl.Close(context.Background())

	created, err := w.ensureSlot(ctx, repl)
	if err != nil {
		return err
	}
	if created {
		// Writes committed before the slot existed are not decoded: raise
		// the unknown-tables position past them.
		p, err := w.pool("primary")
		if err != nil {
			return err
		}
		var s string
		if err := p.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
			return err
		}
		pos, _ := lsnstore.ParseLSN(s)
		if err := w.writes.Raise(ctx, nil, lsnstore.PositionOf(pos)); err != nil {
			return err
		}
	}
	if !w.t.cfg.NoDDLTrigger && !w.ddlTrigger {
		// Tried again at each new stream; logged once.
		if err := w.ensureDDLTrigger(ctx); err != nil {
			if !w.ddlWarned {
				w.ddlWarned = true
				w.log.Warn("schema changes made outside the plugin are not tracked", "err", w.t.secrets.err(err))
			}
		} else {
			w.ddlTrigger = true
		}
	}
	slot := w.slotName()
	err = pglogrepl.StartReplication(ctx, repl, slot, 0, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication,
		// messages: the event trigger's DDL messages (ddl.go).
		PluginArgs: []string{"proto_version '1'", "publication_names '" + w.t.cfg.Publication + "'", "messages 'true'"},
	})
	if err != nil {
		return fmt.Errorf("start replication on slot %s: %w", slot, err)
	}
	w.streaming.Store(true)
	w.decodeErr.Store(nil)
	w.log.Info("logical decoding streaming", "slot", slot)

	d := &decoder{w: w, rels: map[uint32]string{}}
	nextStatus := time.Now().Add(w.t.cfg.StatusInterval)
	for {
		if time.Now().After(nextStatus) {
			if err := d.sendStatus(ctx, repl); err != nil {
				return err
			}
			nextStatus = time.Now().Add(w.t.cfg.StatusInterval)
		}
		rctx, cancel := context.WithDeadline(ctx, nextStatus)
		raw, err := repl.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				d.sendStatus(context.Background(), repl) // best effort: confirm what was published
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				continue
			}
			return fmt.Errorf("receive: %w", err)
		}
		switch msg := raw.(type) {
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("replication error: %s (%s)", msg.Message, msg.Code)
		case *pgproto3.CopyData:
			if len(msg.Data) == 0 {
				continue
			}
			switch msg.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				k, err := pglogrepl.ParsePrimaryKeepaliveMessage(msg.Data[1:])
				if err != nil {
					return err
				}
				// Between transactions everything sent so far is published:
				// the slot may move to the server's end.
				if !d.inTx && lsnstore.LSN(k.ServerWALEnd) > d.confirmed {
					d.confirmed = lsnstore.LSN(k.ServerWALEnd)
				}
				if k.ReplyRequested {
					nextStatus = time.Time{}
				}
			case pglogrepl.XLogDataByteID:
				x, err := pglogrepl.ParseXLogData(msg.Data[1:])
				if err != nil {
					return err
				}
				if err := d.handle(ctx, x.WALData); err != nil {
					return err
				}
			}
		}
	}
}

// decoder accumulates one transaction's tables.
type decoder struct {
	w         *worker
	rels      map[uint32]string
	inTx      bool
	tables    map[string]struct{}
	confirmed lsnstore.LSN // every commit up to here is published
	sent      lsnstore.LSN
	// xid is the transaction being decoded; schema: it holds a schema
	// change (the event trigger's message).
	xid    uint32
	schema bool
}

func (d *decoder) handle(ctx context.Context, data []byte) error {
	m, err := pglogrepl.Parse(data)
	if err != nil {
		return fmt.Errorf("parse pgoutput message: %w", err)
	}
	switch m := m.(type) {
	case *pglogrepl.RelationMessage:
		d.rels[m.RelationID] = lsnstore.TableKey(m.RelationName)
	case *pglogrepl.BeginMessage:
		d.inTx = true
		d.tables = map[string]struct{}{}
		d.xid, d.schema = m.Xid, false
	case *pglogrepl.InsertMessage:
		d.touch(m.RelationID)
	case *pglogrepl.UpdateMessage:
		d.touch(m.RelationID)
	case *pglogrepl.DeleteMessage:
		d.touch(m.RelationID)
	case *pglogrepl.TruncateMessage:
		for _, id := range m.RelationIDs {
			d.touch(id)
		}
	case *pglogrepl.LogicalDecodingMessage:
		if m.Transactional && m.Prefix == ddlMessagePrefix {
			// A schema change (ddl.go): its tables are not named.
			if d.tables == nil {
				d.tables = map[string]struct{}{}
			}
			d.tables["\x00unknown"] = struct{}{}
			d.schema = true
		}
	case *pglogrepl.CommitMessage:
		d.inTx = false
		end := lsnstore.LSN(m.TransactionEndLSN)
		if d.schema {
			// Before the commit's raise: a plugin that sees it (a read,
			// a test) finds the schema generation advanced too (schema.go).
			if err := d.markSchema(ctx, d.xid); err != nil {
				return err
			}
		}
		if len(d.tables) > 0 {
			tables := make([]string, 0, len(d.tables))
			for t := range d.tables {
				tables = append(tables, t)
			}
			if err := d.raise(ctx, tables, end); err != nil {
				return err
			}
			d.w.t.metrics.decodedTx.WithLabelValues(d.w.id).Inc()
		}
		if end > d.confirmed {
			d.confirmed = end
		}
	}
	return nil
}

// touch records a change to relation id; an unknown relation (no
// Relation message seen: should not happen) makes the transaction's
// tables unknown.
func (d *decoder) touch(id uint32) {
	if d.tables == nil {
		d.tables = map[string]struct{}{}
	}
	if name, ok := d.rels[id]; ok {
		d.tables[name] = struct{}{}
	} else {
		d.tables["\x00unknown"] = struct{}{}
	}
}

// raise publishes a commit, retrying while Redis is down (the stream
// waits; the server's wal_sender_timeout may end it, and the next
// session resumes from the slot before this commit).
func (d *decoder) raise(ctx context.Context, tables []string, end lsnstore.LSN) error {
	unknown := false
	for i := 0; i < len(tables); i++ {
		if tables[i] == "\x00unknown" {
			unknown = true
			tables = append(tables[:i], tables[i+1:]...)
			i--
		}
	}
	var b backoff
	for {
		err := d.w.writes.Raise(ctx, tables, lsnstore.PositionOf(end))
		if err == nil && unknown {
			err = d.w.writes.Raise(ctx, nil, lsnstore.PositionOf(end))
		}
		if err == nil {
			return nil
		}
		d.w.t.metrics.redisUp.Set(0)
		delay := b.next()
		if delay >= 5*time.Second {
			return fmt.Errorf("publish commit %s: %w", end, err)
		}
		if !sleep(ctx, delay) {
			return ctx.Err()
		}
	}
}

// sendStatus confirms d.confirmed to the server.
func (d *decoder) sendStatus(ctx context.Context, repl *pgconn.PgConn) error {
	err := pglogrepl.SendStandbyStatusUpdate(ctx, repl, pglogrepl.StandbyStatusUpdate{WALWritePosition: pglogrepl.LSN(d.confirmed)})
	if err != nil {
		return fmt.Errorf("send standby status: %w", err)
	}
	d.sent = d.confirmed
	// Tell plugins how far direct writes are published. Best effort: a
	// missing or expired key (ReplayTTL) makes plugins conservative.
	_ = d.w.replay.PublishDecoded(ctx, d.confirmed)
	return nil
}
