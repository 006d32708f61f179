package plugin

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"reflect"
	"testing"
	"time"
)

// sourceRows is a driver's result with typed columns, ending with err.
type sourceRows struct {
	rows [][]driver.Value
	err  error
	next int
}

func (r *sourceRows) Columns() []string { return []string{"id", "name", "at", "price"} }
func (r *sourceRows) Close() error      { return nil }
func (r *sourceRows) Next(dest []driver.Value) error {
	if r.next == len(r.rows) {
		if r.err != nil {
			return r.err
		}
		return io.EOF
	}
	copy(dest, r.rows[r.next])
	r.next++
	return nil
}
func (r *sourceRows) ColumnTypeScanType(i int) reflect.Type {
	return []reflect.Type{reflect.TypeFor[int64](), reflect.TypeFor[sql.NullString](), reflect.TypeFor[time.Time](), reflect.TypeFor[[]byte]()}[i]
}
func (r *sourceRows) ColumnTypeDatabaseTypeName(i int) string {
	return []string{"INT8", "TEXT", "TIMESTAMPTZ", "NUMERIC"}[i]
}
func (r *sourceRows) ColumnTypeNullable(i int) (bool, bool) { return i == 1, true }
func (r *sourceRows) ColumnTypeLength(i int) (int64, bool)  { return 255, i == 1 }
func (r *sourceRows) ColumnTypePrecisionScale(i int) (int64, int64, bool) {
	return 10, 2, i == 3
}

type sourceConn struct{ rows func() *sourceRows }

func (c sourceConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("no") }
func (c sourceConn) Close() error                        { return nil }
func (c sourceConn) Begin() (driver.Tx, error)           { return nil, errors.New("no") }
func (c sourceConn) QueryContext(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
	return c.rows(), nil
}

type sourceConnector struct{ rows func() *sourceRows }

func (c sourceConnector) Connect(context.Context) (driver.Conn, error) { return sourceConn(c), nil }
func (c sourceConnector) Driver() driver.Driver                        { return nil }

var sourceData = [][]driver.Value{
	{int64(1), "a", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), []byte("1.50")},
	{int64(2), nil, time.Date(2026, 1, 3, 0, 0, 0, 0, time.UTC), []byte("2.00")},
}

// TestBufferedRowsAsTheDriversRows: a result read in full and served from
// memory gives the same columns, column types, values and final error as
// the driver's rows.
func TestBufferedRowsAsTheDriversRows(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("connection lost after two rows")
	src := sql.OpenDB(sourceConnector{func() *sourceRows { return &sourceRows{rows: sourceData, err: boom} }})
	defer src.Close()
	p := &Plugin{}
	defer p.buffered().Close()

	direct, err := src.QueryContext(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	buffered, err := p.rowsOf(ctx, queryResult(ctx, src, "q", nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, rows := range []*sql.Rows{direct, buffered} {
		defer rows.Close()
	}
	dc, _ := direct.Columns()
	bc, _ := buffered.Columns()
	if !reflect.DeepEqual(dc, bc) {
		t.Fatalf("columns %v, want %v", bc, dc)
	}
	dt, _ := direct.ColumnTypes()
	bt, _ := buffered.ColumnTypes()
	for i := range dt {
		d, b := dt[i], bt[i]
		dn, dok := d.Nullable()
		bn, bok := b.Nullable()
		dl, dlok := d.Length()
		bl, blok := b.Length()
		dp, ds, ddok := d.DecimalSize()
		bp, bs, bdok := b.DecimalSize()
		if d.ScanType() != b.ScanType() || d.DatabaseTypeName() != b.DatabaseTypeName() ||
			dn != bn || dok != bok || dl != bl || dlok != blok || dp != bp || ds != bs || ddok != bdok {
			t.Fatalf("column %d: buffered type differs from the driver's", i)
		}
	}
	for n := 0; ; n++ {
		dnext, bnext := direct.Next(), buffered.Next()
		if dnext != bnext {
			t.Fatalf("row %d: Next %v, want %v", n, bnext, dnext)
		}
		if !dnext {
			break
		}
		var dv, bv [4]any
		var id int
		var name sql.NullString
		var at time.Time
		var price string
		if err := direct.Scan(&dv[0], &dv[1], &dv[2], &dv[3]); err != nil {
			t.Fatal(err)
		}
		if err := buffered.Scan(&id, &name, &at, &price); err != nil {
			t.Fatal(err)
		}
		bv = [4]any{int64(id), nil, at, []byte(price)}
		if name.Valid {
			bv[1] = name.String
		}
		if !reflect.DeepEqual(dv, bv) {
			t.Fatalf("row %d: %v, want %v", n, bv, dv)
		}
	}
	if !errors.Is(direct.Err(), boom) || !errors.Is(buffered.Err(), boom) {
		t.Fatalf("errors %v and %v, want both %v", direct.Err(), buffered.Err(), boom)
	}
}

// TestBufferedRowOfAFailedQuery: a query that failed at once gives its
// error from Rows and from Row's Scan.
func TestBufferedRowOfAFailedQuery(t *testing.T) {
	ctx := context.Background()
	p := &Plugin{}
	defer p.buffered().Close()
	boom := errors.New("duplicate key")
	if _, err := p.rowsOf(ctx, &bufferedResult{err: boom}); !errors.Is(err, boom) {
		t.Fatalf("rows: %v, want %v", err, boom)
	}
	var id int
	if err := p.rowOf(ctx, &bufferedResult{err: boom}).Scan(&id); !errors.Is(err, boom) {
		t.Fatalf("row: %v, want %v", err, boom)
	}
	row := p.rowOf(ctx, &bufferedResult{cols: []string{"id"}, types: make([]bufferedColumn, 1)})
	if err := row.Scan(&id); !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("empty result: %v, want sql.ErrNoRows", err)
	}
}
