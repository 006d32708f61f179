// Package dnstest is an in-process DNS server for tests: it answers A and
// SRV questions from records the test changes while it runs, or fails
// every question (SERVFAIL) when told to.
package dnstest

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// SRV is one SRV record: a target host name and a port.
type SRV struct {
	Target string
	Port   uint16
}

// Server is a DNS server on 127.0.0.1 (UDP and TCP on one port).
type Server struct {
	udp, tcp *dns.Server
	addr     string

	mu      sync.Mutex
	a       map[string][]net.IP
	srv     map[string][]SRV
	failing bool
	asked   int
}

// Start starts a server that knows no name; it stops when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{a: map[string][]net.IP{}, srv: map[string][]SRV{}}
	pc, ln, err := listenBoth()
	if err != nil {
		t.Fatal(err)
	}
	s.addr = pc.LocalAddr().String()
	started := make(chan struct{}, 2)
	notify := func() { started <- struct{}{} }
	s.udp = &dns.Server{PacketConn: pc, Handler: s, NotifyStartedFunc: notify}
	s.tcp = &dns.Server{Listener: ln, Handler: s, NotifyStartedFunc: notify}
	go s.udp.ActivateAndServe()
	go s.tcp.ActivateAndServe()
	<-started
	<-started
	t.Cleanup(func() {
		s.udp.Shutdown()
		s.tcp.Shutdown()
	})
	return s
}

// Addr is the server's "host:port".
func (s *Server) Addr() string { return s.addr }

// SetA makes name's A records ips (none: the name exists without them).
func (s *Server) SetA(name string, ips ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var list []net.IP
	for _, ip := range ips {
		list = append(list, net.ParseIP(ip).To4())
	}
	s.a[dns.Fqdn(strings.ToLower(name))] = list
}

// SetSRV makes name's SRV records records.
func (s *Server) SetSRV(name string, records ...SRV) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.srv[dns.Fqdn(strings.ToLower(name))] = records
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

// ServeDNS implements dns.Handler.
func (s *Server) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	s.mu.Lock()
	s.asked++
	if s.failing {
		s.mu.Unlock()
		m.Rcode = dns.RcodeServerFailure
		w.WriteMsg(m)
		return
	}
	for _, q := range req.Question {
		name := strings.ToLower(q.Name)
		_, knownA := s.a[name]
		_, knownSRV := s.srv[name]
		if !knownA && !knownSRV {
			m.Rcode = dns.RcodeNameError
			continue
		}
		hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 0}
		switch q.Qtype {
		case dns.TypeA:
			for _, ip := range s.a[name] {
				h := hdr
				h.Rrtype = dns.TypeA
				m.Answer = append(m.Answer, &dns.A{Hdr: h, A: ip})
			}
		case dns.TypeSRV:
			for _, r := range s.srv[name] {
				h := hdr
				h.Rrtype = dns.TypeSRV
				m.Answer = append(m.Answer, &dns.SRV{Hdr: h, Priority: 10, Weight: 10, Port: r.Port, Target: dns.Fqdn(r.Target)})
			}
		}
	}
	s.mu.Unlock()
	w.WriteMsg(m)
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
