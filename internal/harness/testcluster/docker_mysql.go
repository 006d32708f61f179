// Like docker_mariadb.go, this container provider was written on a machine
// without a Docker engine and has never been run there (see docker.go).

package testcluster

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
)

const (
	// mysqlDefaultImage is what FRESHREAD_MYSQL_IMAGE=1 means.
	mysqlDefaultImage = "mysql:8.4"
	// mysqlPrimaryAlias is the primary's name on the pair's Docker network.
	mysqlPrimaryAlias = "mysql-primary"
	mysqlReplicaAlias = "mysql-replica"
)

// dockerMySQL is a mysql:8.4 primary and its GTID replica on a private
// Docker network, published on host ports.
type dockerMySQL struct {
	net              *testcontainers.DockerNetwork
	host             string
	primary, replica *dockerMySQLNode
}

type dockerMySQLNode struct {
	name string
	port int
	c    *testcontainers.DockerContainer
}

// mysqlServerArgs are the mysqld options of a node; the image's entrypoint
// passes arguments that start with "-" to mysqld. The server listens on the
// same port inside the container as on the host, so that SELECT @@port
// (how the tests tell primary from replica) reports the published port.
// gtid=false leaves gtid_mode OFF (a server the plugin must refuse).
func mysqlServerArgs(serverID, port int, gtid bool) []string {
	args := []string{
		"--server-id=" + strconv.Itoa(serverID),
		"--port=" + strconv.Itoa(port),
		"--log-bin=mysql-bin",
		"--skip-name-resolve",
		"--innodb-buffer-pool-size=32M",
		"--innodb-flush-log-at-trx-commit=2",
		"--sync-binlog=0",
	}
	if gtid {
		return append(args, "--gtid-mode=ON", "--enforce-gtid-consistency=ON")
	}
	return append(args, "--gtid-mode=OFF")
}

// runMySQLNode starts nd's container (on nw when not nil) with args and
// waits until it answers through its published port. The root user (empty
// password, any host) is made by the image's initialisation.
func runMySQLNode(ctx context.Context, host, bindIP string, nw *testcontainers.DockerNetwork, nd *dockerMySQLNode, args []string) error {
	opts := []testcontainers.ContainerCustomizer{
		testcontainers.WithEnv(map[string]string{
			"MYSQL_ALLOW_EMPTY_PASSWORD": "yes",
			"MYSQL_INITDB_SKIP_TZINFO":   "1",
		}),
		testcontainers.WithCmd(args...),
		withFixedPort(strconv.Itoa(nd.port)+"/tcp", bindIP, nd.port),
	}
	if nw != nil {
		opts = append(opts, network.WithNetwork([]string{nd.name}, nw))
	}
	c, err := runContainer(ctx, "MySQL "+nd.name, mysqlImage(), opts...)
	if err != nil {
		return err
	}
	nd.c = c
	return waitMySQLNode(ctx, host, nd)
}

func startDockerMySQL(ctx context.Context) (_ mysqlBackend, err error) {
	host, bindIP, nw, err := dockerNetwork(ctx)
	if err != nil {
		return nil, err
	}
	m := &dockerMySQL{net: nw, host: host}
	defer func() {
		if err != nil {
			m.close()
		}
	}()
	if m.primary, err = newDockerMySQLNode(mysqlPrimaryAlias); err != nil {
		return nil, err
	}
	if m.replica, err = newDockerMySQLNode(mysqlReplicaAlias); err != nil {
		return nil, err
	}
	// Both servers start concurrently.
	start := func(nd *dockerMySQLNode, serverID int) func() error {
		return func() error {
			return runMySQLNode(ctx, host, bindIP, nw, nd, mysqlServerArgs(serverID, nd.port, true))
		}
	}
	if err := startBoth(start(m.primary, 1), start(m.replica, 2)); err != nil {
		return nil, err
	}

	// Both data directories went through the same initialisation, and
	// whatever it wrote with GTIDs (each under its own server_uuid) must
	// neither be replayed nor be in the way: the replica forgets its own
	// GTIDs and declares the primary's current ones as already applied, so
	// auto-positioning starts at the primary's next transaction.
	mdb := &MySQL{backend: m}
	set, err := mdb.PrimaryGTIDExecuted(ctx)
	if err != nil {
		return nil, err
	}
	if strings.ContainsAny(set, `'\`) {
		return nil, fmt.Errorf("testcluster: unexpected MySQL gtid_executed %q", set)
	}
	stmts := []string{"RESET BINARY LOGS AND GTIDS"}
	if set != "" {
		stmts = append(stmts, fmt.Sprintf("SET GLOBAL gtid_purged = '%s'", set))
	}
	stmts = append(stmts,
		fmt.Sprintf("CHANGE REPLICATION SOURCE TO SOURCE_HOST='%s', SOURCE_PORT=%d, SOURCE_USER='root', SOURCE_PASSWORD='', SOURCE_AUTO_POSITION=1, GET_SOURCE_PUBLIC_KEY=1, SOURCE_CONNECT_RETRY=1", mysqlPrimaryAlias, m.primary.port),
		"START REPLICA")
	if err := execMySQL(ctx, m.replicaDSN(""), stmts...); err != nil {
		return nil, err
	}
	return m, nil
}

func newDockerMySQLNode(name string) (*dockerMySQLNode, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	return &dockerMySQLNode{name: name, port: port}, nil
}

// waitMySQLNode waits until nd answers a query through its published port.
// The image's first-start initialisation runs a server with networking
// off, so a TCP answer is the real server. The driver's logger is silenced
// for the polling: connections refused or reset during start are expected.
func waitMySQLNode(ctx context.Context, host string, nd *dockerMySQLNode) error {
	cfg := dockerMySQLConfig(host, nd, "")
	cfg.Logger = mysqlNopLogger{}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	return waitContainer(ctx, nd.c, "MySQL "+nd.name, func(ctx context.Context) error {
		db := sql.OpenDB(connector)
		defer db.Close()
		var one int
		return db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
	})
}

func dockerMySQLConfig(host string, nd *dockerMySQLNode, db string) *mysql.Config {
	c := mysql.NewConfig()
	c.User = "root"
	c.Net = "tcp"
	c.Addr = hostPort(host, nd.port)
	c.DBName = db
	c.ParseTime = true
	return c
}

func (m *dockerMySQL) primaryDSN(db string) string {
	return dockerMySQLConfig(m.host, m.primary, db).FormatDSN()
}

func (m *dockerMySQL) replicaDSN(db string) string {
	return dockerMySQLConfig(m.host, m.replica, db).FormatDSN()
}

// close removes both containers (replica first) and the network.
func (m *dockerMySQL) close() error {
	var errs []error
	for _, nd := range []*dockerMySQLNode{m.replica, m.primary} {
		if nd != nil {
			errs = append(errs, terminate(nd.c))
		}
	}
	errs = append(errs, removeNetwork(m.net))
	return errors.Join(errs...)
}

// dockerMySQLSingle is one mysql:8.4 server without a replica, for tests of
// what the plugin refuses (gtid_mode=OFF).
type dockerMySQLSingle struct {
	host string
	node *dockerMySQLNode
}

// startDockerMySQLSingle starts a standalone mysql:8.4 with gtid_mode OFF
// (gtid=false) or ON.
func startDockerMySQLSingle(ctx context.Context, gtid bool) (_ *dockerMySQLSingle, err error) {
	host, bindIP, err := dockerPublish(ctx)
	if err != nil {
		return nil, err
	}
	nd, err := newDockerMySQLNode("mysql-single")
	if err != nil {
		return nil, err
	}
	s := &dockerMySQLSingle{host: host, node: nd}
	if err := runMySQLNode(ctx, host, bindIP, nil, nd, mysqlServerArgs(1, nd.port, gtid)); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *dockerMySQLSingle) dsn(db string) string {
	return dockerMySQLConfig(s.host, s.node, db).FormatDSN()
}

func (s *dockerMySQLSingle) close() error { return terminate(s.node.c) }

// mysqlImage is the MySQL image FRESHREAD_MYSQL_IMAGE names ("1":
// mysql:8.4). MySQL containers are opt-in: Debian has no MySQL server
// package, so the test image cannot hold one, and an engine without a
// registry cannot pull one.
func mysqlImage() string {
	if v := os.Getenv(EnvMySQLImage); v != "" && v != "1" {
		return v
	}
	return mysqlDefaultImage
}

// mysqlContainers reports whether MySQL may run in containers.
func mysqlContainers(ctx context.Context) bool {
	return os.Getenv(EnvMySQLImage) != "" && dockerAvailable(ctx)
}
