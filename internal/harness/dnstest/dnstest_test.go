package dnstest

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"
)

// resolver is Go's resolver asking only s, over network ("udp" or "tcp"),
// as the plugin's DNSDiscovery does with a Nameserver.
func resolver(s *Server, network string) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, s.Addr())
	}}
}

func srvs(t *testing.T, r *net.Resolver, name string) []SRV {
	t.Helper()
	_, recs, err := r.LookupSRV(context.Background(), "", "", name)
	if err != nil {
		t.Fatalf("LookupSRV %s: %v", name, err)
	}
	var out []SRV
	for _, rec := range recs {
		out = append(out, SRV{rec.Target, rec.Port})
	}
	slices.SortFunc(out, func(a, b SRV) int { return int(a.Port) - int(b.Port) })
	return out
}

func ip4s(t *testing.T, r *net.Resolver, name string) []string {
	t.Helper()
	ips, err := r.LookupNetIP(context.Background(), "ip4", name)
	if err != nil {
		t.Fatalf("LookupNetIP %s: %v", name, err)
	}
	var out []string
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	slices.Sort(out)
	return out
}

func TestAnswersGoResolver(t *testing.T) {
	s := Start(t)
	s.SetA("db1.test", "10.0.0.1", "10.0.0.2")
	s.SetA("Empty.test")
	s.SetSRV("_pg._tcp.replicas.test", SRV{"db1.test", 6001}, SRV{"db2.test.", 6002})
	for _, network := range []string{"udp", "tcp"} {
		r := resolver(s, network)
		if got, want := ip4s(t, r, "db1.test"), []string{"10.0.0.1", "10.0.0.2"}; !slices.Equal(got, want) {
			t.Errorf("%s: A db1.test = %v, want %v", network, got, want)
		}
		if got, want := ip4s(t, r, "DB1.Test."), []string{"10.0.0.1", "10.0.0.2"}; !slices.Equal(got, want) {
			t.Errorf("%s: A DB1.Test. = %v, want %v (names are case-insensitive)", network, got, want)
		}
		if got, want := srvs(t, r, "_pg._tcp.replicas.test"), []SRV{{"db1.test.", 6001}, {"db2.test.", 6002}}; !slices.Equal(got, want) {
			t.Errorf("%s: SRV = %v, want %v", network, got, want)
		}
		// Both A and AAAA asked: a known name without AAAA records.
		if addrs, err := r.LookupHost(context.Background(), "db1.test"); err != nil || len(addrs) != 2 {
			t.Errorf("%s: LookupHost db1.test = %v, %v; want its two addresses", network, addrs, err)
		}
		var dnsErr *net.DNSError
		_, err := r.LookupNetIP(context.Background(), "ip4", "nowhere.test")
		if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
			t.Errorf("%s: nowhere.test: %v, want no such host (NXDOMAIN)", network, err)
		}
	}
	// Go's resolver says "no such host" for a name without addresses too:
	// on the wire, a name that exists without addresses is no NXDOMAIN.
	if rcode, n := exchange(t, s, "empty.test.", typeA); rcode != 0 || n != 0 {
		t.Errorf("empty.test: rcode %d, %d answers; want NOERROR and none", rcode, n)
	}
	if rcode, n := exchange(t, s, "nowhere.test.", typeA); rcode != rcodeNameError || n != 0 {
		t.Errorf("nowhere.test: rcode %d, %d answers; want NXDOMAIN", rcode, n)
	}
	if rcode, n := exchange(t, s, "db1.test.", 28); rcode != 0 || n != 0 { // AAAA
		t.Errorf("AAAA db1.test: rcode %d, %d answers; want NOERROR and none", rcode, n)
	}
	if s.Asked() == 0 {
		t.Fatal("Asked counts nothing")
	}
}

// A record changed while the test runs is what the next question gets,
// and a wrong record is seen as such (the check can fail).
func TestRecordsChangeMidTest(t *testing.T) {
	s := Start(t)
	r := resolver(s, "udp")
	s.SetSRV("_pg._tcp.replicas.test", SRV{"db1.test", 6001})
	want := []SRV{{"db1.test.", 6001}}
	if got := srvs(t, r, "_pg._tcp.replicas.test"); !slices.Equal(got, want) {
		t.Fatalf("SRV = %v, want %v", got, want)
	}
	s.SetSRV("_pg._tcp.replicas.test", SRV{"gone.test", 6003})
	if got := srvs(t, r, "_pg._tcp.replicas.test"); slices.Equal(got, want) || !slices.Equal(got, []SRV{{"gone.test.", 6003}}) {
		t.Fatalf("after the change: SRV = %v, want the new record and not the old one", got)
	}
	s.SetA("db1.test", "10.0.0.9")
	if got := ip4s(t, r, "db1.test"); slices.Equal(got, []string{"10.0.0.1"}) || !slices.Equal(got, []string{"10.0.0.9"}) {
		t.Fatalf("A = %v, want 10.0.0.9", got)
	}
}

func TestFail(t *testing.T) {
	s := Start(t)
	s.SetA("db1.test", "10.0.0.1")
	r := resolver(s, "udp")
	s.Fail(true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := r.LookupNetIP(ctx, "ip4", "db1.test")
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || dnsErr.IsNotFound || dnsErr.IsTimeout {
		t.Fatalf("failing: %v, want a server failure", err)
	}
	s.Fail(false)
	if got := ip4s(t, r, "db1.test"); !slices.Equal(got, []string{"10.0.0.1"}) {
		t.Fatalf("after Fail(false): %v", got)
	}
}

// exchange sends s one question over UDP and returns the reply's rcode
// and answer count.
func exchange(t *testing.T, s *Server, name string, qtype byte) (rcode, answers int) {
	t.Helper()
	msg := []byte{0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0}
	msg = append(appendName(msg, name), 0, qtype, 0, classIN)
	c, err := net.Dial("udp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil || n < 12 || buf[0] != 0xab || buf[1] != 0xcd {
		t.Fatalf("reply % x, %v", buf[:n], err)
	}
	return int(buf[3] & 0xf), int(buf[6])<<8 | int(buf[7])
}

func TestWire(t *testing.T) {
	// A query, then a name that is a pointer to the name after it.
	msg := []byte{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0}
	msg = appendName(msg, "a.test.")
	msg = append(msg, 0, typeA, 0, classIN)
	q, err := parseQuery(msg)
	if err != nil || q.id != 0x1234 || q.question.name != "a.test." || q.question.qtype != typeA {
		t.Fatalf("parsed %+v, %v", q, err)
	}
	ptr := append(append([]byte(nil), msg[:12]...), 0xc0, 14)
	if name, off, err := readName(append(ptr, msg[12:]...), 12); err != nil || name != "a.test." || off != 14 {
		t.Fatalf("pointer: %q %d %v", name, off, err)
	}
	if _, err := parseQuery(msg[:5]); err == nil {
		t.Fatal("a short message parsed")
	}
	out := reply{query: q, rcode: rcodeNameError}.pack()
	if out[0] != 0x12 || out[1] != 0x34 || out[2]&0x80 == 0 || out[3]&0xf != rcodeNameError || out[2]&0x01 == 0 {
		t.Fatalf("reply header % x", out[:12])
	}
}
