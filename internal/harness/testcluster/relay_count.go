package testcluster

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync/atomic"
)

// Protocol is the wire protocol of the server behind a counting relay
// (NewCountingRelay), which says how to split what clients send into
// messages.
type Protocol int

const (
	// PostgresProtocol: the PostgreSQL frontend protocol (v3). After the
	// untyped startup packet (and an SSLRequest or GSSENCRequest before
	// it), every message is a type byte and a 4-byte big-endian length
	// that counts itself: 'Q' a simple query, 'P' Parse, 'B' Bind, 'E'
	// Execute, 'S' Sync, 'X' Terminate, 'p' a password.
	PostgresProtocol Protocol = iota + 1
	// MySQLProtocol: the MySQL/MariaDB client protocol. Every packet is a
	// 3-byte little-endian payload length and a sequence number; a
	// command starts a new sequence (number 0) and its first payload
	// byte names it: 0x03 COM_QUERY, 0x16 COM_STMT_PREPARE, 0x17
	// COM_STMT_EXECUTE, 0x0e COM_PING, 0x01 COM_QUIT. The handshake
	// response (sequence 1) and later packets of a command are not
	// counted.
	MySQLProtocol
)

func (p Protocol) String() string {
	switch p {
	case PostgresProtocol:
		return "postgres"
	case MySQLProtocol:
		return "mysql"
	}
	return fmt.Sprintf("Protocol(%d)", int(p))
}

// MySQL command bytes a counting relay's Counts.Queries adds up.
const (
	mysqlComQuery       = 0x03
	mysqlComStmtExecute = 0x17
)

// Counts is what the clients of a counting relay sent since it started.
type Counts struct {
	// Conns is the number of client connections accepted.
	Conns int64
	// Messages counts the messages by type: the PostgreSQL frontend
	// message type ('Q', 'P', 'B', 'E', 'S', …) or the MySQL command
	// byte (0x03 COM_QUERY, …).
	Messages map[byte]int64
	// Queries is the number of statements the server was asked to run:
	// PostgreSQL 'Q' (simple query) plus 'E' (extended protocol
	// execute); MySQL COM_QUERY plus COM_STMT_EXECUTE.
	Queries int64
	// Opaque counts connections whose traffic could not be split into
	// messages (TLS after an accepted SSLRequest, a malformed length);
	// their messages are not counted from then on.
	Opaque int64
}

// Sub is c minus an earlier snapshot of the same relay.
func (c Counts) Sub(before Counts) Counts {
	d := Counts{Conns: c.Conns - before.Conns, Queries: c.Queries - before.Queries,
		Opaque: c.Opaque - before.Opaque, Messages: map[byte]int64{}}
	for k, v := range c.Messages {
		if v -= before.Messages[k]; v != 0 {
			d.Messages[k] = v
		}
	}
	return d
}

// wireCounts is a counting relay's tallies, shared by its connections.
type wireCounts struct {
	proto      Protocol
	conns, bad atomic.Int64
	byType     [256]atomic.Int64
}

func (w *wireCounts) snapshot() Counts {
	c := Counts{Conns: w.conns.Load(), Opaque: w.bad.Load(), Messages: map[byte]int64{}}
	for i := range w.byType {
		if v := w.byType[i].Load(); v != 0 {
			c.Messages[byte(i)] = v
		}
	}
	switch w.proto {
	case PostgresProtocol:
		c.Queries = c.Messages['Q'] + c.Messages['E']
	case MySQLProtocol:
		c.Queries = c.Messages[mysqlComQuery] + c.Messages[mysqlComStmtExecute]
	}
	return c
}

// parser returns a new connection's parser of what its client sends.
func (w *wireCounts) parser() wireParser {
	w.conns.Add(1)
	switch w.proto {
	case PostgresProtocol:
		return &pgParser{c: w}
	case MySQLProtocol:
		return &mysqlParser{c: w}
	}
	return nil
}

// wireParser splits one connection's client→server bytes into messages,
// fed in chunks as they arrive, split anywhere.
type wireParser interface{ feed(b []byte) }

// PostgreSQL startup-phase request codes (the second int32 of an untyped
// packet).
const (
	pgCancelRequest = 80877102
	pgSSLRequest    = 80877103
	pgGSSENCRequest = 80877104
)

// pgParser follows the PostgreSQL frontend protocol: untyped packets
// (length, code) until the startup packet, then typed messages.
type pgParser struct {
	c      *wireCounts
	hdr    [8]byte
	n      int // header bytes collected
	skip   int // body bytes still to pass over
	typed  bool
	opaque bool
}

func (p *pgParser) feed(b []byte) {
	for len(b) > 0 && !p.opaque {
		if p.skip > 0 {
			k := min(p.skip, len(b))
			p.skip -= k
			b = b[k:]
			continue
		}
		need := 8
		if p.typed {
			need = 5
		}
		k := copy(p.hdr[p.n:need], b)
		p.n += k
		b = b[k:]
		if p.n < need {
			return
		}
		p.n = 0
		if p.typed {
			l := int(binary.BigEndian.Uint32(p.hdr[1:5]))
			if l < 4 {
				p.giveUp()
				return
			}
			p.c.byType[p.hdr[0]].Add(1)
			p.skip = l - 4
			continue
		}
		// An untyped packet's length is below 2^24 (its first byte 0): a
		// TLS record after an accepted SSLRequest starts with 0x16.
		l := int(binary.BigEndian.Uint32(p.hdr[0:4]))
		if p.hdr[0] != 0 || l < 8 {
			p.giveUp()
			return
		}
		p.skip = l - 8
		switch binary.BigEndian.Uint32(p.hdr[4:8]) {
		case pgSSLRequest, pgGSSENCRequest, pgCancelRequest:
			// Still untyped: the startup packet (or nothing) follows.
		default:
			p.typed = true
		}
	}
}

func (p *pgParser) giveUp() {
	p.opaque = true
	p.c.bad.Add(1)
}

// mysqlParser follows MySQL packets and counts the first payload byte of
// each packet with sequence number 0 (a command).
type mysqlParser struct {
	c       *wireCounts
	hdr     [4]byte
	n       int
	skip    int
	command bool // the next payload byte is a command byte
}

func (p *mysqlParser) feed(b []byte) {
	for len(b) > 0 {
		if p.skip > 0 {
			if p.command {
				p.c.byType[b[0]].Add(1)
				p.command = false
			}
			k := min(p.skip, len(b))
			p.skip -= k
			b = b[k:]
			continue
		}
		k := copy(p.hdr[p.n:], b)
		p.n += k
		b = b[k:]
		if p.n < len(p.hdr) {
			return
		}
		p.n = 0
		p.skip = int(p.hdr[0]) | int(p.hdr[1])<<8 | int(p.hdr[2])<<16
		p.command = p.hdr[3] == 0 && p.skip > 0
	}
}

// NewCountingRelay is NewRelay that also counts the messages clients send
// to target, parsed as protocol p (Counts). It parses plaintext
// connections only: PostgreSQL connections that switch to TLS are counted
// as opaque; MySQL clients must not use TLS.
func NewCountingRelay(target string, p Protocol) (*Relay, error) {
	if p != PostgresProtocol && p != MySQLProtocol {
		return nil, fmt.Errorf("testcluster: counting relay: unknown protocol %v", p)
	}
	r, err := newRelayCounting("127.0.0.1", target, 0, &wireCounts{proto: p})
	if err != nil {
		return nil, err
	}
	return &Relay{r: r}, nil
}

// Counts is what clients have sent through a counting relay since it
// started; the zero Counts for a relay made by NewRelay.
func (r *Relay) Counts() Counts {
	if r.r.counts == nil {
		return Counts{Messages: map[byte]int64{}}
	}
	return r.r.counts.snapshot()
}

// Addr is the relay's host:port.
func (r *Relay) Addr() string { return r.r.ln.Addr().(*net.TCPAddr).String() }
