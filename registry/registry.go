package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread/lsnstore"
)

// Key is the Redis set of announced databases, under the prefix
// (lsnstore.DefaultPrefix by default): "freshread:database_names". Members
// are Entry values in JSON.
const Key = "database_names"

// Entry is one database in the registry: where it is and what its
// replicas are called, never how to log in. The tracker takes credentials
// from its own configuration (Config.DSN).
type Entry struct {
	// Host and Port of the primary. Required.
	Host string `json:"host"`
	// Port is the primary's port.
	Port int `json:"port"`
	// Database is the PostgreSQL database name. Required.
	Database string `json:"database"`
	// Store is the name the plugin's store uses for this database
	// (lsnstore.RedisOptions.Database). Default: Database.
	Store string `json:"store,omitempty"`
	// Prefix is the plugin's key prefix (lsnstore.RedisOptions.Prefix).
	// Default: the tracker's.
	Prefix string `json:"prefix,omitempty"`
	// Replicas are the streaming replicas, named as the plugin names them
	// (plugin.Replica.Name), so that the replay positions the tracker
	// publishes land on the keys the plugin reads.
	Replicas []ReplicaEntry `json:"replicas,omitempty"`
}

// ReplicaEntry is one replica of an Entry. With Host and Port the tracker
// connects to the replica and reads pg_last_wal_replay_lsn(); without, it
// reads the replica's replay_lsn from the primary's pg_stat_replication,
// matching application_name (ApplicationName, default Name).
type ReplicaEntry struct {
	// Name is the replica's name in the plugin (plugin.Replica.Name).
	Name string `json:"name"`
	// Host and Port reach the replica; empty: read its replay position
	// from the primary's pg_stat_replication.
	Host string `json:"host,omitempty"`
	// Port is the replica's port (with Host).
	Port int `json:"port,omitempty"`
	// ApplicationName is the replica's application_name in
	// pg_stat_replication. Default: Name.
	ApplicationName string `json:"application_name,omitempty"`
}

// StoreName returns Store, or Database when Store is empty.
func (e Entry) StoreName() string {
	if e.Store != "" {
		return e.Store
	}
	return e.Database
}

// ID identifies the entry's database: host:port/database.
func (e Entry) ID() string {
	return net.JoinHostPort(e.Host, strconv.Itoa(e.Port)) + "/" + e.Database
}

var errCredentials = errors.New("looks like it holds credentials; the registry must not")

// Validate checks the entry: required fields, and nothing that looks like
// a URL, a DSN or a password (the registry never holds credentials).
func (e Entry) Validate() error {
	var errs []error
	if e.Host == "" || e.Port <= 0 || e.Port > 65535 || e.Database == "" {
		errs = append(errs, fmt.Errorf("registry: entry %q: host, port and database are required", e.ID()))
	}
	check := func(field, v string) {
		l := strings.ToLower(v)
		if strings.ContainsAny(v, "@ ") || strings.Contains(l, "://") || strings.Contains(l, "password=") || strings.Contains(l, "=") {
			errs = append(errs, fmt.Errorf("registry: entry field %s %w", field, errCredentials))
		}
	}
	check("host", e.Host)
	check("database", e.Database)
	check("store", e.Store)
	check("prefix", e.Prefix)
	if err := (lsnstore.RedisOptions{Database: e.StoreName(), Prefix: e.Prefix}).Validate(); err != nil {
		errs = append(errs, err)
	}
	names := map[string]bool{}
	for i, r := range e.Replicas {
		if r.Name == "" || names[r.Name] || r.Name == "primary" {
			errs = append(errs, fmt.Errorf("registry: entry %q: replica %d: empty, duplicate or reserved (\"primary\") name", e.ID(), i))
		}
		names[r.Name] = true
		check("replica name", r.Name)
		check("replica host", r.Host)
		check("replica application_name", r.ApplicationName)
		if (r.Host == "") != (r.Port == 0) {
			errs = append(errs, fmt.Errorf("registry: entry %q: replica %q: give both host and port, or neither", e.ID(), r.Name))
		}
	}
	return errors.Join(errs...)
}

// Canonical returns the entry's JSON with replicas sorted, so that two
// announcements of the same database are one set member.
func (e Entry) Canonical() string {
	e.Replicas = slices.Clone(e.Replicas)
	slices.SortFunc(e.Replicas, func(a, b ReplicaEntry) int { return strings.Compare(a.Name, b.Name) })
	b, _ := json.Marshal(e)
	return string(b)
}

func registryKey(prefix string) string {
	if prefix == "" {
		prefix = lsnstore.DefaultPrefix
	}
	return prefix + Key
}

// Announce adds e to the registry under prefix ("" for
// lsnstore.DefaultPrefix): SADD <prefix>database_names <entry JSON>. The
// plugin calls it from Initialize when a tracker is in use. Announcing the
// same entry again is a no-op; the tracker rereads the set periodically.
func Announce(ctx context.Context, rdb redis.UniversalClient, prefix string, e Entry) error {
	if err := e.Validate(); err != nil {
		return err
	}
	if err := rdb.SAdd(ctx, registryKey(prefix), e.Canonical()).Err(); err != nil {
		return fmt.Errorf("registry: announce %s: %w", e.ID(), err)
	}
	return nil
}

// Withdraw removes e from the registry.
func Withdraw(ctx context.Context, rdb redis.UniversalClient, prefix string, e Entry) error {
	if err := rdb.SRem(ctx, registryKey(prefix), e.Canonical()).Err(); err != nil {
		return fmt.Errorf("registry: withdraw %s: %w", e.ID(), err)
	}
	return nil
}

// Entries reads the registry. Members that do not parse or validate are
// skipped and reported in bad (never with their content, which might hold
// a secret someone put there by hand).
func Entries(ctx context.Context, rdb redis.UniversalClient, prefix string) (entries []Entry, bad int, err error) {
	members, err := rdb.SMembers(ctx, registryKey(prefix)).Result()
	if err != nil {
		return nil, 0, fmt.Errorf("registry: read registry: %w", err)
	}
	seen := map[string]bool{}
	for _, m := range members {
		var e Entry
		if json.Unmarshal([]byte(m), &e) != nil || e.Validate() != nil {
			bad++
			continue
		}
		// Two members for one database (different replica lists): keep
		// the union of their replicas.
		if seen[e.ID()] {
			for i := range entries {
				if entries[i].ID() == e.ID() {
					for _, r := range e.Replicas {
						if !slices.ContainsFunc(entries[i].Replicas, func(x ReplicaEntry) bool { return x.Name == r.Name }) {
							entries[i].Replicas = append(entries[i].Replicas, r)
						}
					}
				}
			}
			continue
		}
		seen[e.ID()] = true
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b Entry) int { return strings.Compare(a.ID(), b.ID()) })
	return entries, bad, nil
}
