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
)

const (
	// mysqlDefaultImage is what FRESHREAD_MYSQL_IMAGE=1 means.
	mysqlDefaultImage = "mysql:8.4"
	// mysqlPrimaryAlias is the primary's name on the pair's private network.
	mysqlPrimaryAlias = "mysql-primary"
	mysqlReplicaAlias = "mysql-replica"
)

// dockerMySQL is a mysql:8.4 primary and its GTID replica in containers
// (serverNet says on which network), each on a fixed port.
type dockerMySQL struct {
	net              *serverNet
	primary, replica *dockerMySQLNode
}

type dockerMySQLNode struct {
	name string
	port int
	c    *dockerContainer
}

// mysqlServerArgs are the mysqld options of a node listening on listenIP;
// the image's entrypoint passes arguments that start with "-" to mysqld.
// The server listens on the same port inside the container as on the host,
// so that SELECT @@port (how the tests tell primary from replica) reports
// the published port. gtid=false leaves gtid_mode OFF (a server the plugin
// must refuse).
func mysqlServerArgs(serverID, port int, listenIP string, gtid bool) []string {
	args := []string{
		"--server-id=" + strconv.Itoa(serverID),
		"--bind-address=" + listenIP,
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

// runMySQLNode starts nd's container on sn with args and waits until it
// answers on its port. The root user (empty password, any host) is made by
// the image's initialisation.
func runMySQLNode(ctx context.Context, sn *serverNet, nd *dockerMySQLNode, args []string) error {
	c, err := runContainer(ctx, "MySQL "+nd.name, mysqlImage(),
		withEnv(map[string]string{
			"MYSQL_ALLOW_EMPTY_PASSWORD": "yes",
			"MYSQL_INITDB_SKIP_TZINFO":   "1",
		}),
		withCmd(args...),
		sn.attach(nd.name, nd.port),
	)
	if err != nil {
		return err
	}
	nd.c = c
	return waitMySQLNode(ctx, sn.host, nd)
}

func startDockerMySQL(ctx context.Context) (_ mysqlBackend, err error) {
	sn, err := newServerNet(ctx, true)
	if err != nil {
		return nil, err
	}
	m := &dockerMySQL{net: sn}
	defer func() {
		if err != nil {
			m.close()
		}
	}()
	if m.primary, err = newDockerMySQLNode(sn, mysqlPrimaryAlias); err != nil {
		return nil, err
	}
	if m.replica, err = newDockerMySQLNode(sn, mysqlReplicaAlias); err != nil {
		return nil, err
	}
	// Both servers start concurrently.
	start := func(nd *dockerMySQLNode, serverID int) func() error {
		return func() error {
			return runMySQLNode(ctx, sn, nd, mysqlServerArgs(serverID, nd.port, sn.listenIP(), true))
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
		fmt.Sprintf("CHANGE REPLICATION SOURCE TO SOURCE_HOST='%s', SOURCE_PORT=%d, SOURCE_USER='root', SOURCE_PASSWORD='', SOURCE_AUTO_POSITION=1, GET_SOURCE_PUBLIC_KEY=1, SOURCE_CONNECT_RETRY=1", sn.peer(mysqlPrimaryAlias), m.primary.port),
		"START REPLICA")
	if err := execMySQL(ctx, m.replicaDSN(""), stmts...); err != nil {
		return nil, err
	}
	return m, nil
}

func newDockerMySQLNode(sn *serverNet, name string) (*dockerMySQLNode, error) {
	port, err := sn.freePort()
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
	return dockerMySQLConfig(m.net.host, m.primary, db).FormatDSN()
}

func (m *dockerMySQL) replicaDSN(db string) string {
	return dockerMySQLConfig(m.net.host, m.replica, db).FormatDSN()
}

// close removes both containers (replica first) and the network.
func (m *dockerMySQL) close() error {
	var errs []error
	for _, nd := range []*dockerMySQLNode{m.replica, m.primary} {
		if nd != nil {
			errs = append(errs, terminate(nd.c))
		}
	}
	errs = append(errs, m.net.remove())
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
	sn, err := newServerNet(ctx, false)
	if err != nil {
		return nil, err
	}
	nd, err := newDockerMySQLNode(sn, "mysql-single")
	if err != nil {
		return nil, err
	}
	s := &dockerMySQLSingle{host: sn.host, node: nd}
	if err := runMySQLNode(ctx, sn, nd, mysqlServerArgs(1, nd.port, sn.listenIP(), gtid)); err != nil {
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
	if os.Getenv(EnvMySQLImage) == "" {
		return false
	}
	ok, _ := dockerAvailable(ctx)
	return ok
}
