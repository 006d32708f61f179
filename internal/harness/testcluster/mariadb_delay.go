package testcluster

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"net"
	"strconv"
	"time"
)

// SetApplyDelay delays the replica's apply of every transaction by d; 0
// removes the delay. d must not be negative.
//
// With the local provider (the mariadbd binary on this machine) d may be
// any duration, to the millisecond and beyond. For d > 0 the replica
// replicates through a TCP relay in this process (relay.go, on
// 127.0.0.1): STOP SLAVE; CHANGE MASTER TO MASTER_HOST='127.0.0.1',
// MASTER_PORT=<relay>, MASTER_USE_GTID=slave_pos, MASTER_DELAY=0; START
// SLAVE. The relay holds every chunk of the primary's binlog stream for d
// before passing it on, in order, so each transaction reaches the replica
// d after the primary sent it and is applied then (plus the usual apply
// time); the replica→primary direction is not delayed. With GTID
// replication the replica resumes from its own position (slave_pos), so
// nothing is skipped or replayed. While delayed, a new d > 0 only changes
// the relay's delay (no reconnection); d = 0 points the replica at the
// primary again and closes the relay. Close closes the relay too. When
// SetApplyDelay returns nil, the replica's IO thread is connected (through
// the relay or directly) and waiting for events, so the delay applies to
// the transactions committed from then on. (The first transaction after a
// switch has been seen to reach the replica about 0.1 s later than the
// next ones, with or without the relay; TestMariaDBApplyDelay logs it.)
// Switching costs the dozen or so round trips of the replica's connection
// set-up, each delayed by d: about 4 s at 300ms.
//
// The relay is used for whole seconds too, rather than MariaDB's
// CHANGE MASTER TO MASTER_DELAY = n: MASTER_DELAY takes whole seconds and
// compares the event's timestamp, in whole seconds, with the replica's
// clock, also in seconds, so a transaction committed late in a second, or
// queued behind a delayed one, is applied up to about a second sooner than
// d after its commit (between about 0 and d). The relay delays every
// transaction by d.
//
// The container provider's relay listens where the replica's container
// reaches this process: loopback when the containers share the host's
// network, else the gateway of the pair's Docker network. The environment-variable
// provider runs the replica where this process may not be reachable, so
// it keeps MASTER_DELAY: d must be a whole number of seconds, with the
// imprecision above; any other d returns an error wrapping ErrUnsupported
// and leaves the replica untouched.
func (m *MariaDB) SetApplyDelay(ctx context.Context, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("testcluster: MariaDB apply delay %v is negative", d)
	}
	m.delayMu.Lock()
	defer m.delayMu.Unlock()
	rb, ok := m.backend.(relayBackend)
	if !ok {
		return m.setMasterDelay(ctx, d)
	}
	host, port := rb.primaryReplicationAddr()
	listen, target, err := rb.relayAddrs(ctx)
	if err != nil {
		return err
	}
	switch {
	case d == 0 && m.relay == nil:
		return nil // already direct, and MASTER_DELAY is never set here
	case d == 0:
		if err := m.pointReplica(ctx, host, port); err != nil {
			return err
		}
		return m.closeRelayLocked()
	case m.relay != nil:
		m.relay.SetDelay(d)
		return nil
	}
	r, err := newRelayOn(listen, target, d)
	if err != nil {
		return err
	}
	if err := m.pointReplica(ctx, listen, r.Port()); err != nil {
		// Best effort: leave the replica replicating directly.
		restore, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = m.pointReplica(restore, host, port)
		r.Close()
		return err
	}
	m.relay = r
	return nil
}

// relayBackend is a backend whose replica can reach this process, so that
// it can replicate through a relay in this process.
type relayBackend interface {
	// primaryReplicationAddr is the primary's address as the replica
	// reaches it directly (its CHANGE MASTER TO MASTER_HOST and
	// MASTER_PORT).
	primaryReplicationAddr() (host string, port int)
	// relayAddrs are the address a relay listens on, one the replica
	// reaches, and the primary's address as this process reaches it.
	relayAddrs(ctx context.Context) (listenHost, target string, err error)
}

func (m *localMariaDB) primaryReplicationAddr() (string, int) { return "127.0.0.1", m.primary.port }

func (m *localMariaDB) relayAddrs(context.Context) (string, string, error) {
	return "127.0.0.1", net.JoinHostPort("127.0.0.1", strconv.Itoa(m.primary.port)), nil
}

// A container replica replicates from the primary as their network names
// it (loopback on the host's network, the primary's alias on a private
// one); it reaches this process at serverNet.processHost, and this process
// reaches the primary at its port there or where it is published.
func (m *dockerMariaDB) primaryReplicationAddr() (string, int) {
	return m.net.peer(mariaPrimaryAlias), m.primary.port
}

func (m *dockerMariaDB) relayAddrs(ctx context.Context) (string, string, error) {
	gw, err := m.net.processHost(ctx)
	if err != nil {
		return "", "", err
	}
	return gw, hostPort(m.net.host, m.primary.port), nil
}

// setMasterDelay is SetApplyDelay for the providers without a relay.
func (m *MariaDB) setMasterDelay(ctx context.Context, d time.Duration) error {
	if d%time.Second != 0 {
		return fmt.Errorf("%w: MariaDB apply delay %v: this provider's replica cannot reach an in-process relay, and MASTER_DELAY takes a whole number of seconds (0s, 1s, 2s, …)", ErrUnsupported, d)
	}
	n := int64(d / time.Second)
	if n > math.MaxInt32 {
		return fmt.Errorf("testcluster: MariaDB apply delay %v: MASTER_DELAY is at most %d seconds", d, math.MaxInt32)
	}
	return execMySQL(ctx, m.ReplicaDSN(""),
		"STOP SLAVE",
		fmt.Sprintf("CHANGE MASTER TO MASTER_DELAY = %d", n),
		"START SLAVE")
}

// pointReplica makes the replica replicate from host:port, undelayed by
// MariaDB itself, and waits until its IO thread is connected there and
// waiting for events.
func (m *MariaDB) pointReplica(ctx context.Context, host string, port int) error {
	if err := execMySQL(ctx, m.ReplicaDSN(""),
		"STOP SLAVE",
		fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=%d, MASTER_USE_GTID=slave_pos, MASTER_DELAY=0", host, port),
		"START SLAVE"); err != nil {
		return err
	}
	return m.waitReplicaStreaming(ctx, port)
}

// waitReplicaStreaming polls SHOW SLAVE STATUS until the IO thread is
// connected to port and waiting for the primary's events, for at most 30 s
// (or ctx).
func (m *MariaDB) waitReplicaStreaming(ctx context.Context, port int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return withMySQLDB(m.ReplicaDSN(""), func(db *sql.DB) error {
		var last map[string]string
		for {
			st, err := showSlaveStatus(ctx, db)
			if err == nil {
				last = st
				switch {
				case st["Master_Port"] == strconv.Itoa(port) && st["Slave_IO_Running"] == "Yes" &&
					st["Slave_IO_State"] == "Waiting for master to send event":
					return nil
				case st["Slave_IO_Running"] == "No":
					return fmt.Errorf("testcluster: MariaDB replica IO thread stopped: %s", st["Last_IO_Error"])
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("testcluster: MariaDB replica not streaming from port %d (IO thread %q, state %q, last error %q): %w",
					port, last["Slave_IO_Running"], last["Slave_IO_State"], last["Last_IO_Error"], ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
}

// showSlaveStatus returns SHOW SLAVE STATUS as column → value (no row: an
// empty map).
func showSlaveStatus(ctx context.Context, db *sql.DB) (map[string]string, error) {
	rows, err := db.QueryContext(ctx, "SHOW SLAVE STATUS")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	st := map[string]string{}
	if rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		for i, c := range cols {
			st[c] = vals[i].String
		}
	}
	return st, rows.Err()
}

// closeRelay closes the apply-delay relay, if any.
func (m *MariaDB) closeRelay() error {
	m.delayMu.Lock()
	defer m.delayMu.Unlock()
	return m.closeRelayLocked()
}

func (m *MariaDB) closeRelayLocked() error {
	if m.relay == nil {
		return nil
	}
	err := m.relay.Close()
	m.relay = nil
	return err
}
