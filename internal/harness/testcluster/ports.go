package testcluster

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
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
// was free a moment ago; if none of a hundred random ones is, one the
// kernel picks.
func freePortOn(host string) (int, error) {
	hi := ephemeralStart()
	for range 100 {
		p := portsFrom + rand.IntN(hi-portsFrom)
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
	return l.Addr().(*net.TCPAddr).Port, nil
}
