package testcluster

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// pgPrimaryAlias is the primary's name on the cluster's private network.
const pgPrimaryAlias = "primary"

// withStopSignal sets the signal that stops the container (postgres:
// SIGINT, a fast shutdown; SIGTERM would wait for clients to leave).
func withStopSignal(sig string) runOption {
	return func(s *runSpec) error { s.StopSignal = sig; return nil }
}

// dockerPostgres is a PostgreSQL 15 primary and its streaming replicas in
// containers (serverNet says on which network), each on a fixed port so
// that stop and start keep the URLs.
type dockerPostgres struct {
	net   *serverNet
	nodes []*dockerServer // nodes[0] is the primary
}

func startDockerPostgres(ctx context.Context, n int, settings []string) (_ pgBackend, err error) {
	sn, err := newServerNet(ctx, true)
	if err != nil {
		return nil, err
	}
	p := &dockerPostgres{net: sn}
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
		port, err := sn.freePort()
		if err != nil {
			return nil, err
		}
		p.nodes = append(p.nodes, &dockerServer{name: name, port: port})
	}

	// Every node starts from the image's initialised cluster, the
	// replicas too (image/freshread-postgres), so all start at once: a
	// replica streams from the primary as soon as the primary answers.
	primary := p.nodes[0]
	errs := make([]error, len(p.nodes))
	var wg sync.WaitGroup
	for i, nd := range p.nodes {
		if nd.dir, err = newDataDir(sn.host); err != nil {
			return nil, err
		}
		// The server listens inside the container on its host port too,
		// so inet_server_port() reports the port the tests know it by.
		entrypoint := []string{"freshread-postgres", "primary", strconv.Itoa(nd.port)}
		if nd != primary {
			entrypoint = []string{"freshread-postgres", "replica", strconv.Itoa(nd.port), sn.peer(primary.name), strconv.Itoa(primary.port), nd.name}
		}
		entrypoint = append(entrypoint, "-c", "listen_addresses="+sn.listenIP(), "-c", "max_prepared_transactions=64")
		for _, s := range settings {
			entrypoint = append(entrypoint, "-c", s) // the last of a name wins
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := runContainer(ctx, "PostgreSQL "+nd.name, "",
				withEntrypoint(entrypoint...),
				withStopSignal("SIGINT"),
				sn.attach(nd.name, nd.port),
				withDataDir(nd.dir, "/var/lib/postgresql/data"),
			)
			if err != nil {
				errs[i] = err
				return
			}
			nd.c = c
			errs[i] = p.waitNode(ctx, nd)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

// waitNode waits until nd accepts queries through its published port and,
// for a replica, streams from the primary (as a replica made by
// pg_basebackup does when it starts), so that a test's first write reaches
// it without a retry interval's wait.
func (p *dockerPostgres) waitNode(ctx context.Context, nd *dockerServer) error {
	dsn := p.url(nd, "postgres")
	check := "SELECT 1"
	if nd != p.nodes[0] {
		check = "SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming'"
	}
	return waitContainer(ctx, nd.c, "PostgreSQL "+nd.name, func(ctx context.Context) error {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		var one int
		return db.QueryRowContext(ctx, check).Scan(&one)
	})
}

func (p *dockerPostgres) url(nd *dockerServer, db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", hostPort(p.net.host, nd.port), db)
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

func (p *dockerPostgres) startNode(ctx context.Context, nd *dockerServer) error {
	if err := nd.c.Start(ctx); err != nil {
		return fmt.Errorf("testcluster: start PostgreSQL %s container: %w", nd.name, err)
	}
	return p.waitNode(ctx, nd)
}

// close removes every container and data directory, then the network.
func (p *dockerPostgres) close() error {
	return errors.Join(discardServers(p.nodes...), p.net.remove())
}
