package mariadb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/go-sql-driver/mysql"

	"github.com/freshread/freshread/internal/engines"
	_ "github.com/freshread/freshread/mysqlfamily" // the MySQL driver's support
)

func init() {
	engines.MariaDBBinlog = &engines.BinlogReader{Open: open, Purged: purged}
}

// binlogLogger passes go-mysql's warnings and errors to the mover's
// logger (its information lines are one per rotation and start).
type binlogLogger struct{ slog.Handler }

func (h binlogLogger) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && h.Handler.Enabled(ctx, l)
}

// open starts reading the binlog of cfg.DSN's server after cfg.GTIDSet.
func open(cfg engines.BinlogConfig) (engines.BinlogStream, error) {
	c, err := mysql.ParseDSN(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", engines.ErrBinlogDSN, err)
	}
	if c.Net != "tcp" {
		return nil, fmt.Errorf("%w: it must reach the server over TCP, not %s", engines.ErrBinlogDSN, c.Net)
	}
	host, portText, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return nil, fmt.Errorf("%w: address %q: %v", engines.ErrBinlogDSN, c.Addr, err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("%w: port %q", engines.ErrBinlogDSN, portText)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID:                cfg.ServerID,
		Flavor:                  gomysql.MariaDBFlavor,
		Host:                    host,
		Port:                    uint16(port),
		User:                    c.User,
		Password:                c.Passwd,
		TLSConfig:               c.TLS,
		UseDecimal:              true,
		VerifyChecksum:          true,
		TimestampStringLocation: time.UTC,
		DisableRetrySync:        true,
		HeartbeatPeriod:         time.Second,
		ReadTimeout:             30 * time.Second,
		Logger:                  slog.New(binlogLogger{logger.Handler()}),
	})
	set, err := gomysql.ParseMariadbGTIDSet(cfg.GTIDSet)
	if err != nil {
		syncer.Close()
		return nil, fmt.Errorf("GTID position %s: %w", cfg.GTIDSet, err)
	}
	s, err := syncer.StartSyncGTID(set)
	if err != nil {
		syncer.Close()
		return nil, err
	}
	return &stream{syncer: syncer, s: s}, nil
}

// purged reports whether err is ER_MASTER_FATAL_ERROR_READING_BINLOG
// (1236): the position is not in any binlog.
func purged(err error) bool {
	var me *gomysql.MyError
	return errors.As(err, &me) && me.Code == 1236
}

// stream is a binlog being read, its events converted.
type stream struct {
	syncer *replication.BinlogSyncer
	s      *replication.BinlogStreamer
}

func (s *stream) Close() { s.syncer.Close() }

func (s *stream) Next(ctx context.Context) (engines.BinlogEvent, error) {
	ev, err := s.s.GetEvent(ctx)
	if err != nil {
		return engines.BinlogEvent{}, err
	}
	out := engines.BinlogEvent{LogPos: ev.Header.LogPos}
	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		out.Rotate = string(e.NextLogName)
	case *replication.MariadbGTIDEvent:
		out.GTID = &engines.BinlogGTID{Domain: e.GTID.DomainID, Server: e.GTID.ServerID, Seq: e.GTID.SequenceNumber, Standalone: e.IsStandalone()}
	case *replication.RowsEvent:
		r := &engines.BinlogRows{Schema: e.Table.Schema, Table: e.Table.Table, ColumnCount: e.ColumnCount, Rows: e.Rows}
		switch e.Type() {
		case replication.EnumRowsEventTypeInsert:
			r.Kind = engines.BinlogRowsInsert
		case replication.EnumRowsEventTypeUpdate:
			r.Kind = engines.BinlogRowsUpdate
		case replication.EnumRowsEventTypeDelete:
			r.Kind = engines.BinlogRowsDelete
		}
		out.Rows = r
	case *replication.XIDEvent:
		out.XID = true
	case *replication.QueryEvent:
		out.Query = &engines.BinlogQuery{Schema: e.Schema, Query: e.Query}
	}
	return out, nil
}
