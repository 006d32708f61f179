package engines

import (
	"context"
	"errors"
	"log/slog"
)

// MariaDBBinlogImport is the import that links the MariaDB binlog reader
// of package reshard.
const MariaDBBinlogImport = `import _ "github.com/freshread/freshread/reshard/mariadb"`

// BinlogConfig is where and from which position a binlog reader reads.
type BinlogConfig struct {
	// DSN is a go-sql-driver/mysql DSN over TCP of the source server.
	DSN string
	// ServerID is the replica server id the reader registers with.
	ServerID uint32
	// GTIDSet is the MariaDB GTID position to read after
	// (@@gtid_binlog_pos syntax).
	GTIDSet string
	// Logger receives the reader's warnings and errors.
	Logger *slog.Logger
}

// ErrBinlogDSN is wrapped by a BinlogReader's Open when its DSN is not one
// it can read from (unparsable, not TCP).
var ErrBinlogDSN = errors.New("binlog DSN")

// BinlogRowsKind is the kind of a rows event.
type BinlogRowsKind int

// The kinds of rows events.
const (
	BinlogRowsOther BinlogRowsKind = iota
	BinlogRowsInsert
	BinlogRowsUpdate // Rows holds old and new row, in pairs
	BinlogRowsDelete
)

// BinlogGTID is a MariaDB GTID event's transaction.
type BinlogGTID struct {
	Domain, Server uint32
	Seq            uint64
	// Standalone: DDL or a non-transactional statement, which ends with
	// its query.
	Standalone bool
}

// BinlogRows is a rows event.
type BinlogRows struct {
	Schema, Table []byte
	ColumnCount   uint64
	Kind          BinlogRowsKind
	Rows          [][]any
}

// BinlogQuery is a query event.
type BinlogQuery struct{ Schema, Query []byte }

// BinlogEvent is one binlog event, of which at most one field other than
// LogPos is set (none: an event the reader does not need).
type BinlogEvent struct {
	// LogPos is the position after the event in its binlog file.
	LogPos uint32
	// Rotate is the next binlog file's name (a rotate event).
	Rotate string
	GTID   *BinlogGTID
	Rows   *BinlogRows
	// XID: a transaction's commit.
	XID   bool
	Query *BinlogQuery
}

// BinlogStream is a binlog being read.
type BinlogStream interface {
	// Next returns the next event.
	Next(ctx context.Context) (BinlogEvent, error)
	// Close stops reading.
	Close()
}

// BinlogReader reads MariaDB binlogs (reshard's catch-up); package
// reshard/mariadb sets MariaDBBinlog to it.
type BinlogReader struct {
	// Open starts reading after cfg.GTIDSet.
	Open func(cfg BinlogConfig) (BinlogStream, error)
	// Purged reports whether err is the server's "the position is not in
	// any binlog" (1236).
	Purged func(err error) bool
}

// MariaDBBinlog is the binlog reader; nil until reshard/mariadb is linked.
var MariaDBBinlog *BinlogReader

// MariaDBBinlogNotLinked is the NotLinkedError of the MariaDB binlog
// reader for package pkg, a case of err (nil for none).
func MariaDBBinlogNotLinked(pkg string, err error) error {
	return &NotLinkedError{Pkg: pkg, What: "moving buckets between MariaDB shards", Import: MariaDBBinlogImport, Err: err}
}
