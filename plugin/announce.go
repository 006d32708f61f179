package plugin

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/registry"
)

// redisStore is the Redis store, or this plugin's reader of it
// (lsnstore.RedisReader).
type redisStore interface {
	Client() redis.UniversalClient
	Database() string
	Prefix() string
}

// announce registers the database and replicas in the tracker's registry.
func (p *Plugin) announce(ctx context.Context, db *gorm.DB, replicas []Replica) error {
	store, ok := p.cfg.Store.(redisStore)
	if !ok {
		return fmt.Errorf("%w: Announce needs the Redis store (the registry lives there)", ErrConfig)
	}
	if p.engine.dialectorName() != "postgres" {
		return fmt.Errorf("%w: Announce: the tracker supports PostgreSQL only", ErrConfig)
	}
	host, port, database, err := pgAddress(db.Dialector)
	if err != nil {
		return fmt.Errorf("%w: Announce: primary: %w", ErrConfig, err)
	}
	e := registry.Entry{Host: host, Port: port, Database: database, Store: store.Database(), Prefix: store.Prefix()}
	for _, r := range replicas {
		rh, rp, _, err := pgAddress(r.Dialector)
		if err != nil {
			return fmt.Errorf("%w: Announce: replica %q: %w", ErrConfig, r.Name, err)
		}
		e.Replicas = append(e.Replicas, registry.ReplicaEntry{Name: r.Name, Host: rh, Port: rp})
	}
	if err := registry.Announce(ctx, store.Client(), store.Prefix(), e); err != nil {
		return fmt.Errorf("plugin: %w", err)
	}
	return nil
}

// pgAddress reads host, port and database from a PostgreSQL dialector's
// DSN. Errors never repeat the DSN (it may hold a password).
func pgAddress(d gorm.Dialector) (string, int, string, error) {
	pd, ok := d.(*postgres.Dialector)
	if !ok || pd.Config == nil || pd.Config.DSN == "" {
		return "", 0, "", fmt.Errorf("not opened with postgres.Open(dsn)")
	}
	c, err := pgconn.ParseConfig(pd.Config.DSN)
	if err != nil {
		return "", 0, "", fmt.Errorf("malformed DSN")
	}
	return c.Host, int(c.Port), c.Database, nil
}
