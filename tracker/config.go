package tracker

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread/registry"
)

// Mode says how the tracker learns of writes made outside the plugin.
type Mode string

const (
	// ModeNone: no direct-write tracking (replay positions and the
	// dependency graph only).
	ModeNone Mode = "none"
	// ModeStats polls pg_stat_user_tables write counters: cheap, needs no
	// wal_level=logical, and catches a direct write about a second late
	// (see docs/design/tracker.md).
	ModeStats Mode = "stats"
	// ModeLogical decodes the WAL through a logical replication slot
	// (pgoutput, a publication FOR ALL TABLES): exact, needs
	// wal_level=logical and a replication-capable role.
	ModeLogical Mode = "logical"
)

// ParseMode parses "none", "stats" or "logical".
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(s)); m {
	case ModeNone, ModeStats, ModeLogical:
		return m, nil
	}
	return "", fmt.Errorf("tracker: unknown mode %q (want none, stats or logical)", s)
}

// Target is a server the tracker connects to.
type Target struct {
	// Host is the server's host.
	Host string
	// Port is the server's port.
	Port int
	// Database is the database connected to.
	Database string
	// Role is "primary" or the replica's name.
	Role string
}

// Config configures a Tracker.
type Config struct {
	// Redis is where positions, the graph and the registry live. Required.
	// Build it with ContextTimeoutEnabled.
	Redis redis.UniversalClient
	// Prefix of every key, as lsnstore.RedisOptions.Prefix. Default
	// lsnstore.DefaultPrefix.
	Prefix string
	// DSN returns the connection string for a target: the tracker's own
	// credentials. Required. DSNTemplate builds one from a template.
	DSN func(Target) (string, error)
	// Databases are tracked in addition to the registry's.
	Databases []registry.Entry
	// NoRegistry: track Databases only, never read the registry.
	NoRegistry bool
	// Mode of direct-write tracking. Default ModeNone.
	Mode Mode

	// RegistryInterval: how often the registry is reread. Default 5s.
	RegistryInterval time.Duration
	// ReplayInterval: how often replay positions are read and published.
	// Default 100ms.
	ReplayInterval time.Duration
	// ReplayTTL: the TTL of published replay positions, so that a dead
	// tracker is noticed. Default 20 x ReplayInterval, at least 2s.
	ReplayTTL time.Duration
	// DependencyInterval: how often the dependency graph is rebuilt and
	// published. Default 30s.
	DependencyInterval time.Duration
	// StatsInterval: how often ModeStats polls the counters. Default 250ms.
	StatsInterval time.Duration
	// StatusInterval: how often ModeLogical confirms its position to the
	// server (the slot then releases WAL). Default 1s; a commit is
	// confirmed at the next status update after it is published.
	StatusInterval time.Duration
	// WriteTTL: the TTL of write positions it raises. Default
	// lsnstore.DefaultTTL.
	WriteTTL time.Duration
	// RedisTimeout bounds every Redis call. Default 2s.
	RedisTimeout time.Duration

	// SlotPrefix: the replication slot of database d is SlotPrefix + d
	// (sanitised). Slots are per cluster: two trackers of one database
	// share the slot, and only one streams at a time. Default "freshread_".
	SlotPrefix string
	// Publication: created FOR ALL TABLES when missing. Default
	// "freshread_tracker".
	Publication string
	// NoDDLTrigger: ModeLogical does not install the event trigger
	// freshread_ddl (and its function public.freshread_ddl) that makes
	// schema changes run by other programs visible to the decoding
	// (docs/design/tracker.md). Default false: installed when missing, which needs
	// a superuser; without one the tracker warns once and goes on.
	NoDDLTrigger bool

	// Logger receives the tracker's logs; secrets are redacted from them.
	// Default slog.Default().
	Logger *slog.Logger
	// Registerer receives the metrics, freshreadprom.Denied's among
	// them (left as it is when already registered there). Default: a new
	// registry, served by Handler's /metrics.
	Registerer prometheus.Registerer
	// Gatherer serves /metrics when Registerer is set (usually the same
	// *prometheus.Registry).
	Gatherer prometheus.Gatherer
}

func (c Config) withDefaults() Config {
	if c.Mode == "" {
		c.Mode = ModeNone
	}
	if c.RegistryInterval <= 0 {
		c.RegistryInterval = 5 * time.Second
	}
	if c.ReplayInterval <= 0 {
		c.ReplayInterval = 100 * time.Millisecond
	}
	if c.ReplayTTL <= 0 {
		c.ReplayTTL = max(20*c.ReplayInterval, 2*time.Second)
	}
	if c.DependencyInterval <= 0 {
		c.DependencyInterval = 30 * time.Second
	}
	if c.StatsInterval <= 0 {
		c.StatsInterval = 250 * time.Millisecond
	}
	if c.StatusInterval <= 0 {
		c.StatusInterval = time.Second
	}
	if c.RedisTimeout <= 0 {
		c.RedisTimeout = 2 * time.Second
	}
	if c.SlotPrefix == "" {
		c.SlotPrefix = "freshread_"
	}
	if c.Publication == "" {
		c.Publication = "freshread_tracker"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.Redis == nil {
		errs = append(errs, errors.New("tracker: Config.Redis is nil"))
	}
	if c.DSN == nil {
		errs = append(errs, errors.New("tracker: Config.DSN is nil"))
	}
	if _, err := ParseMode(string(c.Mode)); err != nil {
		errs = append(errs, err)
	}
	if !validIdent(c.SlotPrefix) || !validIdent(c.Publication) {
		errs = append(errs, fmt.Errorf("tracker: slot prefix %q and publication %q must be lower-case letters, digits and _", c.SlotPrefix, c.Publication))
	}
	for _, e := range c.Databases {
		if err := e.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func validIdent(s string) bool {
	if s == "" || len(s) > 40 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// DSNTemplate returns a Config.DSN that fills {host}, {port}, {database}
// and {role} in tmpl, a PostgreSQL URL or key=value string holding the
// tracker's credentials, e.g.
//
//	postgres://tracker:s3cret@{host}:{port}/{database}?sslmode=require
//
// Values are escaped for a URL when tmpl is one. The template is checked
// once with example values.
func DSNTemplate(tmpl string) (func(Target) (string, error), error) {
	isURL := strings.HasPrefix(tmpl, "postgres://") || strings.HasPrefix(tmpl, "postgresql://")
	f := func(t Target) (string, error) {
		host, db, role := t.Host, t.Database, t.Role
		if isURL {
			db, role = url.PathEscape(db), url.QueryEscape(role)
			if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
				host = "[" + host + "]"
			}
		}
		return strings.NewReplacer("{host}", host, "{port}", strconv.Itoa(t.Port),
			"{database}", db, "{role}", role).Replace(tmpl), nil
	}
	probe, _ := f(Target{Host: "localhost", Port: 5432, Database: "postgres", Role: "primary"})
	if _, err := pgconn.ParseConfig(probe); err != nil {
		return nil, fmt.Errorf("tracker: DSN template does not parse (%v)", redactErr(err, passwordOf(probe)))
	}
	return f, nil
}

// passwordOf returns the password in dsn, "" when none.
func passwordOf(dsn string) string {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		// Best effort on a URL.
		if u, uerr := url.Parse(dsn); uerr == nil && u.User != nil {
			p, _ := u.User.Password()
			return p
		}
		return ""
	}
	return cfg.Password
}
