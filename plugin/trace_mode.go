package plugin

import (
	"context"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// traceModeCallback names the callback that gives a statement its note of
// where it ran (Config.TraceResolverMode).
const traceModeCallback = "freshread:trace_resolver_mode"

// modeKey keys, in a statement's context, the *modeNote of where it ran.
type modeKey struct{}

// modeNote is where a statement ran: "source" until a routing decision
// says otherwise.
type modeNote struct{ where atomic.Pointer[string] }

var sourceMode = "source"

// noteMode wraps OnDecision so every decision also records, in the
// statement's modeNote, where the statement ran.
func noteMode(next func(context.Context, Decision)) func(context.Context, Decision) {
	return func(ctx context.Context, d Decision) {
		if n, ok := ctx.Value(modeKey{}).(*modeNote); ok {
			where := sourceMode
			if d.Target == ReplicaTarget {
				where = "replica " + d.Replica
			}
			n.where.Store(&where)
		}
		if next != nil {
			next(ctx, d)
		}
	}
}

// installTraceMode wraps db's logger so it prefixes each SQL line with
// where it ran, and registers, first on every chain, the callback that
// gives the statement its note.
func installTraceMode(db *gorm.DB) error {
	if _, ok := db.Config.Logger.(traceModeLogger); !ok {
		db.Config.Logger = traceModeLogger{Interface: db.Config.Logger}
	}
	return forEachChain(db, traceModeCallback, func(db *gorm.DB) {
		ctx := db.Statement.Context
		if ctx == nil {
			ctx = context.Background()
		}
		n, ok := ctx.Value(modeKey{}).(*modeNote)
		if !ok {
			n = &modeNote{}
			db.Statement.Context = context.WithValue(ctx, modeKey{}, n)
		}
		n.where.Store(&sourceMode) // a statement reusing a chain's context starts anew
	})
}

// forEachChain registers fn first on every chain of db under name.
func forEachChain(db *gorm.DB, name string, fn func(*gorm.DB)) error {
	cb := db.Callback()
	for _, err := range []error{
		cb.Create().Before("*").Register(name, fn),
		cb.Query().Before("*").Register(name, fn),
		cb.Update().Before("*").Register(name, fn),
		cb.Delete().Before("*").Register(name, fn),
		cb.Row().Before("*").Register(name, fn),
		cb.Raw().Before("*").Register(name, fn),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// traceModeLogger is GORM's logger with each SQL line prefixed by where
// the statement ran: "[source] " or "[replica r1] ".
type traceModeLogger struct{ logger.Interface }

func (l traceModeLogger) LogMode(level logger.LogLevel) logger.Interface {
	return traceModeLogger{Interface: l.Interface.LogMode(level)}
}

// ParamsFilter keeps the wrapped logger's filter (gorm.ParamsFilter).
func (l traceModeLogger) ParamsFilter(ctx context.Context, sql string, params ...any) (string, []any) {
	if f, ok := l.Interface.(gorm.ParamsFilter); ok {
		return f.ParamsFilter(ctx, sql, params...)
	}
	return sql, params
}

func (l traceModeLogger) Trace(ctx context.Context, begin time.Time, fc func() (string, int64), err error) {
	l.Interface.Trace(ctx, begin, func() (string, int64) {
		sql, rows := fc()
		if n, ok := ctx.Value(modeKey{}).(*modeNote); ok {
			sql = "[" + *n.where.Load() + "] " + sql
		}
		return sql, rows
	}, err)
}
