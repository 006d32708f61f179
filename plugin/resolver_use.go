package plugin

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"

	"gorm.io/gorm"
)

// ErrUnknownResolver is returned by a statement whose
// dbresolver.Use("name") clause names no resolver (see Register), or that
// uses one inside a transaction begun elsewhere: it is refused before it
// is sent, never routed elsewhere in silence.
var ErrUnknownResolver = errors.New("plugin: unknown resolver")

// IsUnknownResolver reports whether err is a statement refused for its
// dbresolver.Use clause.
func IsUnknownResolver(err error) bool { return errors.Is(err, ErrUnknownResolver) }

// usingClause is the clause name dbresolver.Use stores in Statement.Clauses.
const usingClause = "gorm:db_resolver:using"

// usedName is the name in a statement's dbresolver.Use clause; false
// without one (or with an empty name, which dbresolver ignores too).
func usedName(stmt *gorm.Statement) (string, bool) {
	c, ok := stmt.Clauses[usingClause]
	if !ok || c.Expression == nil {
		return "", false
	}
	v := reflect.ValueOf(c.Expression)
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return "", false
	}
	f := v.FieldByName("Use")
	if !f.IsValid() || f.Kind() != reflect.String || f.String() == "" {
		return "", false
	}
	return f.String(), true
}

// rawSQLTable is the first table of raw SQL as dbresolver finds it (its
// expression), so that raw SQL goes to the resolver it went to there.
var rawTableRe = regexp.MustCompile("(?i)(?:FROM|UPDATE|MERGE INTO|INSERT [a-z ]*INTO) ['`\"]?([a-zA-Z0-9_]+)([ '`\",)]|$)")

func rawSQLTable(sql string) string {
	if m := rawTableRe.FindStringSubmatch(sql); m != nil {
		return m[1]
	}
	return ""
}

// refuseUse fails a statement with a dbresolver.Use clause on a *gorm.DB
// where the Plugin was installed with New, which has no resolvers: the
// clause would otherwise be ignored in silence.
func refuseUse(db *gorm.DB) {
	if db.Error != nil {
		return
	}
	if name, ok := usedName(db.Statement); ok {
		db.AddError(fmt.Errorf("%w: dbresolver.Use(%q): this *gorm.DB has no resolvers; install plugin.Register(cfg).Register(cfg2, models...) instead of plugin.New to send models and tables to resolvers", ErrUnknownResolver, name))
	}
}

// resolverUseCheck names refuseUse's callback.
const resolverUseCheck = "freshread:refuse_unknown_use"

// registerResolverHooks registers, first on every chain, the refusal of
// dbresolver.Use (a Resolver's own routing runs before it) and, with
// Config.TraceResolverMode, the note of where each statement ran.
func (p *Plugin) registerResolverHooks(db *gorm.DB) error {
	if err := forEachChain(db, resolverUseCheck, refuseUse); err != nil {
		return fmt.Errorf("plugin: register %s: %w", resolverUseCheck, err)
	}
	if p.cfg.TraceResolverMode {
		if err := installTraceMode(db); err != nil {
			return fmt.Errorf("plugin: register %s: %w", traceModeCallback, err)
		}
	}
	return nil
}
