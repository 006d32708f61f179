package testcluster

import (
	"encoding/binary"
	"testing"
)

// pgUntyped is an untyped startup-phase packet: length, code, body.
func pgUntyped(code uint32, body string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(8+len(body)))
	b = binary.BigEndian.AppendUint32(b, code)
	return append(b, body...)
}

// pgMsg is a typed frontend message.
func pgMsg(typ byte, body string) []byte {
	b := append([]byte{typ}, binary.BigEndian.AppendUint32(nil, uint32(4+len(body)))...)
	return append(b, body...)
}

// mysqlPacket is a packet with sequence number seq.
func mysqlPacket(seq byte, payload string) []byte {
	n := len(payload)
	return append([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}, payload...)
}

func concat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// feedSplit feeds stream to a fresh parser of proto in chunks cut at
// every cut point, and returns the counts.
func feedSplit(proto Protocol, stream []byte, cuts ...int) Counts {
	w := &wireCounts{proto: proto}
	p := w.parser()
	last := 0
	for _, c := range cuts {
		p.feed(stream[last:c])
		last = c
	}
	p.feed(stream[last:])
	return w.snapshot()
}

func TestPostgresParserCountsMessagesAfterStartup(t *testing.T) {
	stream := concat(
		pgUntyped(pgSSLRequest, ""), // answered 'N': the startup packet follows
		pgUntyped(196608, "user\x00postgres\x00database\x00x\x00\x00"),
		pgMsg('p', "secret\x00"), // a password: typed, not a query
		pgMsg('Q', "SELECT 1\x00"),
		pgMsg('P', "\x00SELECT $1\x00\x00\x00"), pgMsg('B', "\x00\x00\x00\x00\x00\x00\x00\x00"),
		pgMsg('D', "P\x00"), pgMsg('E', "\x00\x00\x00\x00\x00"), pgMsg('S', ""),
		pgMsg('B', "\x00\x00\x00\x00\x00\x00\x00\x00"), pgMsg('E', "\x00\x00\x00\x00\x00"), pgMsg('S', ""),
		pgMsg('Q', "BEGIN; SELECT 2; COMMIT\x00"),
		pgMsg('X', ""),
	)
	want := map[byte]int64{'p': 1, 'Q': 2, 'P': 1, 'B': 2, 'D': 1, 'E': 2, 'S': 2, 'X': 1}
	// Whole, and cut at every byte: a message split across reads counts once.
	for cut := 0; cut <= len(stream); cut++ {
		c := feedSplit(PostgresProtocol, stream, cut)
		if c.Queries != 4 || c.Conns != 1 || c.Opaque != 0 {
			t.Fatalf("cut at %d: queries %d conns %d opaque %d, want 4 1 0", cut, c.Queries, c.Conns, c.Opaque)
		}
		for typ, n := range want {
			if c.Messages[typ] != n {
				t.Fatalf("cut at %d: %d %q messages, want %d (all: %v)", cut, c.Messages[typ], typ, n, c.Messages)
			}
		}
		if len(c.Messages) != len(want) {
			t.Fatalf("cut at %d: messages %v, want %v", cut, c.Messages, want)
		}
	}
	// Byte by byte.
	cuts := make([]int, len(stream))
	for i := range cuts {
		cuts[i] = i
	}
	if c := feedSplit(PostgresProtocol, stream, cuts...); c.Queries != 4 {
		t.Fatalf("byte by byte: %d queries, want 4", c.Queries)
	}
}

func TestPostgresParserTLSIsOpaque(t *testing.T) {
	// SSLRequest accepted ('S'): a TLS ClientHello follows, which is not
	// a startup packet; nothing after it is counted.
	stream := concat(pgUntyped(pgSSLRequest, ""), []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00}, pgMsg('Q', "SELECT 1\x00"))
	c := feedSplit(PostgresProtocol, stream)
	if c.Opaque != 1 || c.Queries != 0 {
		t.Fatalf("opaque %d queries %d, want 1 0", c.Opaque, c.Queries)
	}
	// A typed message with a length below its own 4 bytes.
	bad := concat(pgUntyped(196608, "user\x00u\x00\x00"), []byte{'Q', 0, 0, 0, 2}, pgMsg('Q', "SELECT 1\x00"))
	if c := feedSplit(PostgresProtocol, bad); c.Opaque != 1 || c.Queries != 0 {
		t.Fatalf("malformed length: opaque %d queries %d, want 1 0", c.Opaque, c.Queries)
	}
}

func TestMySQLParserCountsCommands(t *testing.T) {
	big := make([]byte, 70000) // spans several reads; its bytes are not commands
	for i := range big {
		big[i] = mysqlComQuery
	}
	stream := concat(
		mysqlPacket(1, "\x0f\xa2\x00\x00handshake response with user root"),
		mysqlPacket(3, "auth switch response"),
		mysqlPacket(0, "\x03SELECT 1"),
		mysqlPacket(0, "\x16SELECT ?"),
		mysqlPacket(0, "\x17\x01\x00\x00\x00\x00\x01\x00\x00\x00"),
		mysqlPacket(0, "\x19\x01\x00\x00\x00"), // COM_STMT_CLOSE
		mysqlPacket(0, "\x03"+string(big)),
		mysqlPacket(0, "\x0e"), // COM_PING
		mysqlPacket(0, "\x01"), // COM_QUIT
	)
	want := map[byte]int64{0x03: 2, 0x16: 1, 0x17: 1, 0x19: 1, 0x0e: 1, 0x01: 1}
	for _, cuts := range [][]int{nil, {1}, {2, 3, 4, 5}, {60, 61, 70, 71, 72, 100, 40000, 70100}, {len(stream) - 1}} {
		c := feedSplit(MySQLProtocol, stream, cuts...)
		if c.Queries != 3 {
			t.Fatalf("cuts %v: %d queries, want 3 (messages %v)", cuts, c.Queries, c.Messages)
		}
		for typ, n := range want {
			if c.Messages[typ] != n {
				t.Fatalf("cuts %v: %d messages 0x%02x, want %d (all: %v)", cuts, c.Messages[typ], typ, n, c.Messages)
			}
		}
		if len(c.Messages) != len(want) {
			t.Fatalf("cuts %v: messages %v, want %v", cuts, c.Messages, want)
		}
	}
	for cut := 0; cut <= 120; cut++ {
		if c := feedSplit(MySQLProtocol, stream, cut); c.Queries != 3 {
			t.Fatalf("cut at %d: %d queries, want 3", cut, c.Queries)
		}
	}
}

func TestCountsSub(t *testing.T) {
	a := Counts{Conns: 1, Queries: 2, Messages: map[byte]int64{'Q': 2, 'X': 1}}
	b := Counts{Conns: 3, Queries: 7, Messages: map[byte]int64{'Q': 4, 'E': 3, 'X': 1}}
	d := b.Sub(a)
	if d.Conns != 2 || d.Queries != 5 || d.Messages['Q'] != 2 || d.Messages['E'] != 3 || len(d.Messages) != 2 {
		t.Fatalf("Sub: %+v", d)
	}
}

func TestNewCountingRelayUnknownProtocol(t *testing.T) {
	if _, err := NewCountingRelay("127.0.0.1:1", Protocol(9)); err == nil {
		t.Fatal("NewCountingRelay(Protocol(9)): no error")
	}
}
