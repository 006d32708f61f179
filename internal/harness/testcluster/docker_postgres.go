package testcluster

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
)

// pgPrimaryAlias is the primary's name on the cluster's Docker network.
const pgPrimaryAlias = "primary"

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
		port, err := freePortOn(bindIP)
		if err != nil {
			return nil, err
		}
		p.nodes = append(p.nodes, &dockerPGNode{name: name, port: port})
	}

	primary := p.nodes[0]
	// The server listens inside the container on its host port too, so
	// inet_server_port() reports the port the tests know it by.
	primary.c, err = runContainer(ctx, "PostgreSQL primary", "",
		testcontainers.WithEntrypoint("freshread-postgres", "primary", strconv.Itoa(primary.port)),
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
				testcontainers.WithEntrypoint("freshread-postgres", "replica", strconv.Itoa(r.port), pgPrimaryAlias, strconv.Itoa(primary.port), r.name),
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
