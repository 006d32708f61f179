package dnstest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// SRV is one SRV record: a target host name and a port.
type SRV struct {
	Target string
	Port   uint16
}

// Server is a DNS server on 127.0.0.1 (UDP and TCP on one port).
type Server struct {
	pc   net.PacketConn
	ln   net.Listener
	addr string
	wg   sync.WaitGroup

	mu      sync.Mutex
	conns   map[net.Conn]bool // open TCP connections, closed at the end
	a       map[string][]net.IP
	srv     map[string][]SRV
	failing bool
	asked   int
}

// Start starts a server that knows no name; it stops when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{a: map[string][]net.IP{}, srv: map[string][]SRV{}, conns: map[net.Conn]bool{}}
	pc, ln, err := listenBoth()
	if err != nil {
		t.Fatal(err)
	}
	s.pc, s.ln, s.addr = pc, ln, pc.LocalAddr().String()
	s.wg.Add(2)
	go s.serveUDP()
	go s.serveTCP()
	t.Cleanup(s.stop)
	return s
}

// stop closes the sockets and waits for the server's goroutines.
func (s *Server) stop() {
	s.pc.Close()
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Addr is the server's "host:port".
func (s *Server) Addr() string { return s.addr }

// fqdn is name in lower case with its final dot.
func fqdn(name string) string {
	name = strings.ToLower(name)
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	return name
}

// SetA makes name's A records ips (none: the name exists without them).
func (s *Server) SetA(name string, ips ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var list []net.IP
	for _, ip := range ips {
		list = append(list, net.ParseIP(ip).To4())
	}
	s.a[fqdn(name)] = list
}

// SetSRV makes name's SRV records records.
func (s *Server) SetSRV(name string, records ...SRV) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.srv[fqdn(name)] = records
}

// Fail makes every answer SERVFAIL (true) or the records again (false).
func (s *Server) Fail(failing bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing = failing
}

// Asked is how many questions the server has answered.
func (s *Server) Asked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked
}

// answer is the reply to the query msg, nil for a message that is no
// query (it gets none). The reply has the query's id, opcode, RD flag and
// question, and is authoritative; a name with neither A nor SRV records
// is NXDOMAIN, a known name asked another type has no answer.
func (s *Server) answer(msg []byte) []byte {
	q, err := parseQuery(msg)
	if err != nil {
		return nil
	}
	r := reply{query: q}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked++
	if s.failing {
		r.rcode = rcodeServerFailure
		return r.pack()
	}
	if q.question == nil {
		return r.pack()
	}
	name := strings.ToLower(q.question.name)
	_, knownA := s.a[name]
	_, knownSRV := s.srv[name]
	if !knownA && !knownSRV {
		r.rcode = rcodeNameError
		return r.pack()
	}
	switch q.question.qtype {
	case typeA:
		for _, ip := range s.a[name] {
			r.answers = append(r.answers, rr{rtype: typeA, data: ip})
		}
	case typeSRV:
		for _, rec := range s.srv[name] {
			r.answers = append(r.answers, rr{rtype: typeSRV, data: srvData(10, 10, rec.Port, fqdn(rec.Target))})
		}
	}
	return r.pack()
}

func (s *Server) serveUDP() {
	defer s.wg.Done()
	buf := make([]byte, 65535)
	for {
		n, from, err := s.pc.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		if out := s.answer(buf[:n]); out != nil {
			s.pc.WriteTo(out, from)
		}
	}
}

func (s *Server) serveTCP() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return // closed
		}
		s.mu.Lock()
		s.conns[c] = true
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serveConn(c)
	}
}

// serveConn answers the queries of one TCP connection, each a message
// after its length in two bytes, until the client closes it.
func (s *Server) serveConn(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	var size [2]byte
	for {
		if _, err := io.ReadFull(c, size[:]); err != nil {
			return
		}
		msg := make([]byte, binary.BigEndian.Uint16(size[:]))
		if _, err := io.ReadFull(c, msg); err != nil {
			return
		}
		out := s.answer(msg)
		if out == nil {
			return
		}
		if _, err := c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(out)))); err != nil {
			return
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

// listenBoth listens on one loopback port for UDP and TCP. The system
// picks a free UDP port, whose TCP twin another process may hold (a
// server of another test, say): then it tries another port, up to 50
// times.
func listenBoth() (net.PacketConn, net.Listener, error) {
	var err error
	for range 50 {
		var pc net.PacketConn
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			return nil, nil, fmt.Errorf("dnstest: %w", err)
		}
		ln, lerr := net.Listen("tcp", pc.LocalAddr().String())
		if lerr == nil {
			return pc, ln, nil
		}
		pc.Close()
		err = lerr
	}
	return nil, nil, fmt.Errorf("dnstest: no loopback port free for both UDP and TCP: %w", err)
}

var errFormat = errors.New("dnstest: malformed message")
