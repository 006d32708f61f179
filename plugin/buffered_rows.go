package plugin

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"reflect"
)

// A result read in full (row_write.go) is handed back as a *sql.Rows or
// *sql.Row, the types GORM and its callers expect, through a database
// whose driver serves it from memory: the same column names and types,
// and the values the real driver produced, so every Scan converts as it
// would have.

// bufferedResult is a query's result read in full: its columns, rows and
// the error it ended with (alone when the query failed at once).
type bufferedResult struct {
	cols  []string
	types []bufferedColumn
	rows  [][]any
	err   error
}

// bufferedColumn is what sql.ColumnType reported of a column.
type bufferedColumn struct {
	scanType            reflect.Type
	dbType              string
	nullable, nullKnown bool
	length              int64
	lengthKnown         bool
	precision, scale    int64
	decimalKnown        bool
}

func columnOf(ct *sql.ColumnType) bufferedColumn {
	c := bufferedColumn{scanType: ct.ScanType(), dbType: ct.DatabaseTypeName()}
	c.nullable, c.nullKnown = ct.Nullable()
	c.length, c.lengthKnown = ct.Length()
	c.precision, c.scale, c.decimalKnown = ct.DecimalSize()
	return c
}

// queryer runs a query: a gorm.ConnPool, a *sql.Conn.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// queryResult runs query on q and reads its result in full.
func queryResult(ctx context.Context, q queryer, query string, args []any) *bufferedResult {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return &bufferedResult{err: err}
	}
	return readResult(rows)
}

// readResult reads rows in full and closes them.
func readResult(rows *sql.Rows) *bufferedResult {
	defer rows.Close()
	res := &bufferedResult{}
	var err error
	if res.cols, err = rows.Columns(); err != nil {
		return &bufferedResult{err: err}
	}
	types, err := rows.ColumnTypes()
	if err != nil {
		return &bufferedResult{err: err}
	}
	res.types = make([]bufferedColumn, len(types))
	for i, ct := range types {
		res.types[i] = columnOf(ct)
	}
	ptrs := make([]any, len(res.cols))
	for rows.Next() {
		vals := make([]any, len(res.cols))
		for i := range vals {
			ptrs[i] = &vals[i] // a *any receives the driver's value (bytes copied)
		}
		if err := rows.Scan(ptrs...); err != nil {
			res.err = err
			return res
		}
		res.rows = append(res.rows, vals)
	}
	res.err = errors.Join(rows.Err(), rows.Close())
	return res
}

// rowsOf returns res as a *sql.Rows (or its error, when the query failed
// at once).
func (p *Plugin) rowsOf(ctx context.Context, res *bufferedResult) (*sql.Rows, error) {
	if res.cols == nil {
		return nil, res.err
	}
	return p.buffered().QueryContext(ctx, "", res)
}

// rowOf returns res as a *sql.Row.
func (p *Plugin) rowOf(ctx context.Context, res *bufferedResult) *sql.Row {
	return p.buffered().QueryRowContext(ctx, "", res)
}

// buffered is the plugin's database of buffered results, opened on first
// use and closed with the plugin.
func (p *Plugin) buffered() *sql.DB {
	p.bufferedOnce.Do(func() { p.bufferedDB = sql.OpenDB(bufferedConnector{}) })
	return p.bufferedDB
}

// bufferedConnector connects to nothing: its connections serve the
// *bufferedResult passed as a query's one argument.
type bufferedConnector struct{}

func (bufferedConnector) Connect(context.Context) (driver.Conn, error) { return bufferedConn{}, nil }
func (bufferedConnector) Driver() driver.Driver                        { return bufferedDriver{} }

type bufferedDriver struct{}

func (bufferedDriver) Open(string) (driver.Conn, error) { return bufferedConn{}, nil }

var errBufferedOnly = errors.New("freshread: a buffered result's connection only serves its result")

type bufferedConn struct{}

func (bufferedConn) Prepare(string) (driver.Stmt, error) { return nil, errBufferedOnly }
func (bufferedConn) Close() error                        { return nil }
func (bufferedConn) Begin() (driver.Tx, error)           { return nil, errBufferedOnly }

// CheckNamedValue lets the *bufferedResult through unconverted.
func (bufferedConn) CheckNamedValue(*driver.NamedValue) error { return nil }

func (bufferedConn) QueryContext(_ context.Context, _ string, args []driver.NamedValue) (driver.Rows, error) {
	if len(args) != 1 {
		return nil, errBufferedOnly
	}
	res, ok := args[0].Value.(*bufferedResult)
	if !ok {
		return nil, errBufferedOnly
	}
	if res.cols == nil {
		return nil, res.err
	}
	return &bufferedRows{res: res}, nil
}

// bufferedRows serves a bufferedResult's rows, then its error.
type bufferedRows struct {
	res  *bufferedResult
	next int
}

func (r *bufferedRows) Columns() []string { return r.res.cols }
func (r *bufferedRows) Close() error      { return nil }

func (r *bufferedRows) Next(dest []driver.Value) error {
	if r.next >= len(r.res.rows) {
		if r.res.err != nil {
			return r.res.err
		}
		return io.EOF
	}
	for i, v := range r.res.rows[r.next] {
		dest[i] = v
	}
	r.next++
	return nil
}

func (r *bufferedRows) ColumnTypeScanType(i int) reflect.Type {
	if t := r.res.types[i].scanType; t != nil {
		return t
	}
	return reflect.TypeFor[any]()
}

func (r *bufferedRows) ColumnTypeDatabaseTypeName(i int) string { return r.res.types[i].dbType }

func (r *bufferedRows) ColumnTypeNullable(i int) (nullable, ok bool) {
	return r.res.types[i].nullable, r.res.types[i].nullKnown
}

func (r *bufferedRows) ColumnTypeLength(i int) (int64, bool) {
	return r.res.types[i].length, r.res.types[i].lengthKnown
}

func (r *bufferedRows) ColumnTypePrecisionScale(i int) (precision, scale int64, ok bool) {
	c := r.res.types[i]
	return c.precision, c.scale, c.decimalKnown
}
