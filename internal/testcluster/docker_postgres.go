package testcluster

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
)

// pgPrimaryAlias is the primary's name on the cluster's Docker network.
const pgPrimaryAlias = "primary"

// pgServerArgs are the postgres command-line settings of every node, the
// container counterpart of pgConf. Replicas need the same values (a hot
// standby refuses to start with fewer connections or senders than the
// primary), and command-line settings are not copied by pg_basebackup.
var pgServerArgs = []string{
	"-c", "wal_level=logical",
	"-c", "max_wal_senders=10",
	"-c", "max_replication_slots=10",
	"-c", "hot_standby=on",
	"-c", "hot_standby_feedback=on",
	"-c", "wal_receiver_status_interval=1s",
	"-c", "fsync=off",
	"-c", "full_page_writes=off",
	"-c", "max_connections=200",
	"-c", "shared_buffers=32MB",
	"-c", "log_min_messages=warning",
	"-c", "wal_keep_size=256MB",
}

// pgPrimaryScript is the primary container's entrypoint, run as root: on
// first start it makes a cluster (trust authentication from anywhere,
// replication included: the servers are published on loopback only); then
// it runs postgres as the postgres user, as PID 1 so it gets the stop
// signal (SIGINT, fast shutdown). A restarted container keeps its data
// directory.
func pgPrimaryScript(port int) string {
	return fmt.Sprintf(`set -e
mkdir -p "$PGDATA" /run/postgresql
chown postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
	gosu postgres initdb -D "$PGDATA" -U postgres --auth=trust --no-sync >/dev/null
	echo "host all all all trust" >> "$PGDATA/pg_hba.conf"
	echo "host replication all all trust" >> "$PGDATA/pg_hba.conf"
fi
exec gosu postgres postgres -c listen_addresses='*' -c port=%d %s
`, port, strings.Join(pgServerArgs, " "))
}

// withStopSignal sets the signal that stops the container (postgres:
// SIGINT, a fast shutdown; SIGTERM would wait for clients to leave).
func withStopSignal(sig string) testcontainers.CustomizeRequestOption {
	return testcontainers.WithConfigModifier(func(c *container.Config) { c.StopSignal = sig })
}

// dockerPostgres is a PostgreSQL 15 primary and its streaming replicas on a
// private Docker network, each published on a fixed host port so that stop
// and start keep the URLs.
type dockerPostgres struct {
	net   *testcontainers.DockerNetwork
	host  string
	nodes []*dockerPGNode // nodes[0] is the primary
}

type dockerPGNode struct {
	name string
	port int
	c    *testcontainers.DockerContainer
}

func startDockerPostgres(ctx context.Context, n int) (_ pgBackend, err error) {
	host, bindIP, nw, err := dockerNetwork(ctx)
	if err != nil {
		return nil, err
	}
	p := &dockerPostgres{net: nw, host: host}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	names := []string{pgPrimaryAlias}
	for i := 0; i < n; i++ {
		names = append(names, fmt.Sprintf("replica%d", i))
	}
	for _, name := range names {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		p.nodes = append(p.nodes, &dockerPGNode{name: name, port: port})
	}

	primary := p.nodes[0]
	// The server listens inside the container on its host port too, so
	// inet_server_port() reports the port the tests know it by.
	primary.c, err = runContainer(ctx, "PostgreSQL primary", "",
		testcontainers.WithEntrypoint("sh", "-c", pgPrimaryScript(primary.port)),
		withStopSignal("SIGINT"),
		network.WithNetwork([]string{primary.name}, nw),
		withFixedPort(strconv.Itoa(primary.port)+"/tcp", bindIP, primary.port),
	)
	if err != nil {
		return nil, err
	}
	if err := p.waitNode(ctx, primary); err != nil {
		return nil, err
	}

	// Replicas: each container takes its own base backup, concurrently.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, r := range p.nodes[1:] {
		wg.Add(1)
		go func(i int, r *dockerPGNode) {
			defer wg.Done()
			c, err := runContainer(ctx, "PostgreSQL "+r.name, "",
				testcontainers.WithEntrypoint("sh", "-c", pgReplicaScript(r.name, primary.port, r.port)),
				withStopSignal("SIGINT"),
				network.WithNetwork([]string{r.name}, nw),
				withFixedPort(strconv.Itoa(r.port)+"/tcp", bindIP, r.port),
			)
			if err != nil {
				errs[i] = err
				return
			}
			r.c = c
			errs[i] = p.waitNode(ctx, r)
		}(i, r)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

// pgReplicaScript is the replica containers' entrypoint, run as root like
// the image's own: on first start it clones the primary with pg_basebackup
// (retrying while the primary is not reachable yet); then it runs postgres
// as the postgres user, as PID 1 so it gets the image's stop signal
// (SIGINT, fast shutdown). A restarted container keeps its data directory
// and skips the clone.
func pgReplicaScript(name string, primaryPort, port int) string {
	conninfo := fmt.Sprintf("host=%s port=%d user=postgres application_name=%s", pgPrimaryAlias, primaryPort, name)
	return fmt.Sprintf(`set -e
mkdir -p "$PGDATA" /run/postgresql
chown postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
	tries=0
	until gosu postgres pg_basebackup -h %[1]s -p %[4]d -U postgres -D "$PGDATA" -R -X stream --checkpoint=fast --no-sync; do
		tries=$((tries + 1))
		if [ "$tries" -ge 60 ]; then
			echo "pg_basebackup from %[1]s failed" >&2
			exit 1
		fi
		rm -rf "$PGDATA"/*
		sleep 1
	done
	echo "primary_conninfo = '%[2]s'" >> "$PGDATA/postgresql.auto.conf"
	chown postgres:postgres "$PGDATA/postgresql.auto.conf"
fi
exec gosu postgres postgres -c listen_addresses='*' -c port=%[5]d %[3]s
`, pgPrimaryAlias, conninfo, strings.Join(pgServerArgs, " "), primaryPort, port)
}

// waitNode waits until nd accepts queries through its published port (a
// standby does once it is consistent). The image's first-start
// initialisation runs a server without TCP, so a TCP answer is the real one.
func (p *dockerPostgres) waitNode(ctx context.Context, nd *dockerPGNode) error {
	dsn := p.url(nd, "postgres")
	return waitContainer(ctx, nd.c, "PostgreSQL "+nd.name, func(ctx context.Context) error {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		var one int
		return db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
	})
}

func (p *dockerPostgres) url(nd *dockerPGNode, db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", hostPort(p.host, nd.port), db)
}

func (p *dockerPostgres) primaryURL(db string) string        { return p.url(p.nodes[0], db) }
func (p *dockerPostgres) replicaURL(i int, db string) string { return p.url(p.nodes[i+1], db) }
func (p *dockerPostgres) replicas() int                      { return len(p.nodes) - 1 }

func (p *dockerPostgres) stopReplica(ctx context.Context, i int) error {
	return stopContainer(ctx, p.nodes[i+1].c, 30*time.Second)
}

func (p *dockerPostgres) startReplica(ctx context.Context, i int) error {
	return p.startNode(ctx, p.nodes[i+1])
}

func (p *dockerPostgres) restartPrimary(ctx context.Context) error {
	if err := stopContainer(ctx, p.nodes[0].c, 30*time.Second); err != nil {
		return err
	}
	return p.startNode(ctx, p.nodes[0])
}

func (p *dockerPostgres) startNode(ctx context.Context, nd *dockerPGNode) error {
	if err := nd.c.Start(ctx); err != nil {
		return fmt.Errorf("testcluster: start PostgreSQL %s container: %w", nd.name, err)
	}
	return p.waitNode(ctx, nd)
}

// close removes every container (replicas first, so they do not spin
// reconnecting to a dead primary) and the network.
func (p *dockerPostgres) close() error {
	var errs []error
	for i := len(p.nodes) - 1; i >= 0; i-- {
		errs = append(errs, terminate(p.nodes[i].c))
	}
	errs = append(errs, removeNetwork(p.net))
	return errors.Join(errs...)
}
