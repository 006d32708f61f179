package testcluster

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

const (
	// mariaPrimaryAlias is the primary's name on the pair's private network.
	mariaPrimaryAlias = "mariadb-primary"
	mariaReplicaAlias = "mariadb-replica"
)

// dockerMariaDB is a MariaDB 10.11 primary and its GTID replica in
// containers (serverNet says on which network), each on a fixed port.
type dockerMariaDB struct {
	net              *serverNet
	primary, replica *dockerServer
}

func startDockerMariaDB(ctx context.Context) (_ mariaBackend, err error) {
	sn, err := newServerNet(ctx, true)
	if err != nil {
		return nil, err
	}
	m := &dockerMariaDB{net: sn}
	defer func() {
		if err != nil {
			m.close()
		}
	}()
	if m.primary, err = m.newNode(mariaPrimaryAlias); err != nil {
		return nil, err
	}
	if m.replica, err = m.newNode(mariaReplicaAlias); err != nil {
		return nil, err
	}
	// Both servers start concurrently.
	start := func(nd *dockerServer, serverID int) func() error {
		return func() error {
			c, err := runContainer(ctx, "MariaDB "+nd.name, "",
				// A later --bind-address overrides the entrypoint's.
				withEntrypoint(append([]string{"freshread-mariadb", strconv.Itoa(nd.port), "--bind-address=" + sn.listenIP()}, mariaReplicationArgs(serverID)...)...),
				sn.attach(nd.name, nd.port),
				withDataDir(nd.dir, "/var/lib/mysql"),
			)
			if err != nil {
				return err
			}
			nd.c = c
			return m.waitNode(ctx, nd)
		}
	}
	if err := startBoth(start(m.primary, 1), start(m.replica, 2)); err != nil {
		return nil, err
	}

	// Both data directories went through the same initialisation, so the
	// replica starts replicating from the primary's current position
	// (empty unless the initialisation wrote the binlog, which it does not).
	mdb := &MariaDB{backend: m}
	pos, err := mdb.PrimaryGTID(ctx)
	if err != nil {
		return nil, err
	}
	if strings.ContainsAny(pos, `'\`) {
		return nil, fmt.Errorf("testcluster: unexpected MariaDB gtid_binlog_pos %q", pos)
	}
	if err := execMySQL(ctx, m.replicaDSN(""),
		"RESET MASTER",
		fmt.Sprintf("SET GLOBAL gtid_slave_pos = '%s'", pos),
		fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=%d, MASTER_USER='root', MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1", sn.peer(mariaPrimaryAlias), m.primary.port),
		"START SLAVE"); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *dockerMariaDB) newNode(name string) (*dockerServer, error) {
	port, err := m.net.freePort()
	if err != nil {
		return nil, err
	}
	dir, err := newDataDir(m.net.host)
	if err != nil {
		return nil, err
	}
	return &dockerServer{name: name, port: port, dir: dir}, nil
}

// waitNode waits until nd answers a query through its published port. The
// image's first-start initialisation runs a server with networking off, so
// a TCP answer is the real server. The driver's logger is silenced for the
// polling: connections refused or reset during start are expected.
func (m *dockerMariaDB) waitNode(ctx context.Context, nd *dockerServer) error {
	cfg := m.config(nd, "")
	cfg.Logger = mysqlNopLogger{}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	return waitContainer(ctx, nd.c, "MariaDB "+nd.name, func(ctx context.Context) error {
		db := sql.OpenDB(connector)
		defer db.Close()
		var one int
		return db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
	})
}

type mysqlNopLogger struct{}

func (mysqlNopLogger) Print(...any) {}

func (m *dockerMariaDB) config(nd *dockerServer, db string) *mysql.Config {
	c := mysql.NewConfig()
	c.User = "root"
	c.Net = "tcp"
	c.Addr = hostPort(m.net.host, nd.port)
	c.DBName = db
	c.ParseTime = true
	return c
}

func (m *dockerMariaDB) primaryDSN(db string) string { return m.config(m.primary, db).FormatDSN() }
func (m *dockerMariaDB) replicaDSN(db string) string { return m.config(m.replica, db).FormatDSN() }

// close removes both containers and data directories, then the network.
func (m *dockerMariaDB) close() error {
	return errors.Join(discardServers(m.replica, m.primary), m.net.remove())
}

// restartPrimary stops the primary's container (mariadbd shuts down on
// SIGTERM) and starts it again; the replica reconnects by itself.
func (m *dockerMariaDB) restartPrimary(ctx context.Context) error {
	if err := stopContainer(ctx, m.primary.c, 60*time.Second); err != nil {
		return err
	}
	if err := m.primary.c.Start(ctx); err != nil {
		return fmt.Errorf("testcluster: start MariaDB %s container: %w", m.primary.name, err)
	}
	return m.waitNode(ctx, m.primary)
}
