package testcluster

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Ports for the servers come from below the kernel's ephemeral range. A
// port the kernel handed out for "listen on :0" is one it also hands out
// as the local port of outgoing connections, and the tests open thousands:
// between choosing a port and the server (or Docker's proxy) binding it,
// a connection could take it, and the server would then be unreachable
// (seen once in CI: a replica container whose published port answered
// every connection with a reset).

// portsBelow is where the search stops when the ephemeral range cannot be
// read (Linux's default start).
const portsBelow = 32768

// portsFrom is the lowest port tried: above the registered services most
// machines run.
const portsFrom = 20000

// ephemeralStart reads the start of the kernel's ephemeral port range.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return portsBelow
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return portsBelow
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= portsFrom+1000 {
		return portsBelow
	}
	return n
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) { return freePortOn("127.0.0.1") }

// freePortOn returns a TCP port on host, below the ephemeral range, that
// was free a moment ago and that no test process on this machine was
// handed before (reservePort); if none of a hundred random ones is, one
// the kernel picks.
//
// A port is free until its server binds it, which for a group is after
// every port of the group was chosen (a Redis Cluster's twelve): without
// the reservation two of them could be the same port, or another test
// binary running at the same time could choose it, and one server would
// then fail to start.
func freePortOn(host string) (int, error) {
	hi := ephemeralStart()
	for range 100 {
		p := portsFrom + rand.IntN(hi-portsFrom)
		if !reservePort(p) {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err == nil {
			l.Close()
			return p, nil
		}
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("testcluster: find a free port on %s: %w", host, err)
	}
	defer l.Close()
	p := l.Addr().(*net.TCPAddr).Port
	reservePort(p)
	return p, nil
}

// reserved holds the ports this process was handed, each with the file
// that reserves it for the process's life (nil where the lock directory
// could not be used: then only this process is kept from it).
var reserved struct {
	mu    sync.Mutex
	ports map[int]*os.File
}

// reservePort reserves p for this process and reports whether it could:
// false when this process or another live one has it. The reservation is
// a lock on a file named after the port in the temp directory, held open
// until the process exits, when the kernel releases it: a test binary
// that dies leaves nothing reserved.
func reservePort(p int) bool {
	reserved.mu.Lock()
	defer reserved.mu.Unlock()
	if _, ok := reserved.ports[p]; ok {
		return false
	}
	if reserved.ports == nil {
		reserved.ports = map[int]*os.File{}
	}
	f, err := openPortLock(p)
	if err != nil {
		reserved.ports[p] = nil
		return true
	}
	if !tryLockFile(f) {
		f.Close()
		return false
	}
	reserved.ports[p] = f
	return true
}

// portLockDir holds a lock file per port handed out, named after it.
var portLockDir = filepath.Join(os.TempDir(), "freshread-ports")

// openPortLock opens (creating) the lock file of port p.
func openPortLock(p int) (*os.File, error) {
	if err := os.MkdirAll(portLockDir, 0o777); err != nil {
		return nil, err
	}
	return os.OpenFile(filepath.Join(portLockDir, strconv.Itoa(p)), os.O_CREATE|os.O_RDWR, 0o666)
}
