package testcluster

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// relay is a TCP proxy on 127.0.0.1 that forwards every connection it
// accepts to a target address and delays the target→client direction:
// each chunk read from the target at time t is written to the client at
// t + delay, in the order it was read (the delay is read when the chunk's
// turn comes, so SetDelay applies from the chunk being held onwards). The
// client→target direction is forwarded as it arrives. When the target
// closes the connection, the client's side is closed after the data read
// before it, also delay later; when the client closes, both sides close at
// once and data still held is dropped.
//
// MariaDB.SetApplyDelay points the replica's replication connection at a
// relay in front of the primary, so every binlog event reaches the
// replica, and is applied, delay after the primary sent it.
type relay struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // nanoseconds
	// partitioned holds the data of both directions (Relay.Partition);
	// refusing closes every connection (Relay.Refuse).
	partitioned, refusing atomic.Bool
	// counts, when set, tallies the messages clients send (counting
	// relays: relay_count.go).
	counts *wireCounts

	mu     sync.Mutex
	closed bool
	conns  map[*relayConn]struct{}
	wg     sync.WaitGroup // the accept loop and one serve per connection
}

// relayChunk is data read from the target at, or the target's end of the
// stream (eof).
type relayChunk struct {
	at  time.Time
	b   []byte
	eof bool
}

// relayRecheck is how often a held chunk reads the delay again.
const relayRecheck = 10 * time.Millisecond

// relayQueue is the number of chunks a connection holds before it stops
// reading from the target (the target then blocks in TCP flow control).
const relayQueue = 4096

// newRelay listens on 127.0.0.1 (an ephemeral port) and forwards to target
// with the target→client direction delayed by d (d ≥ 0).
func newRelay(target string, d time.Duration) (*relay, error) {
	return newRelayOn("127.0.0.1", target, d)
}

// newRelayOn is newRelay listening on host (a Docker network's gateway
// address, for a replica in a container).
func newRelayOn(host, target string, d time.Duration) (*relay, error) {
	return newRelayCounting(host, target, d, nil)
}

// newRelayCounting is newRelayOn with counts tallying what clients send
// (nil: nothing).
func newRelayCounting(host, target string, d time.Duration, counts *wireCounts) (*relay, error) {
	if d < 0 {
		return nil, fmt.Errorf("testcluster: relay delay %v is negative", d)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("testcluster: relay: %w", err)
	}
	r := &relay{ln: ln, target: target, conns: map[*relayConn]struct{}{}, counts: counts}
	r.delay.Store(int64(d))
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Port is the TCP port the relay listens on (on 127.0.0.1).
func (r *relay) Port() int { return r.ln.Addr().(*net.TCPAddr).Port }

// Delay is the current delay of the target→client direction.
func (r *relay) Delay() time.Duration { return time.Duration(r.delay.Load()) }

// SetDelay changes the delay of the chunks not yet held (d ≥ 0).
func (r *relay) SetDelay(d time.Duration) { r.delay.Store(int64(max(d, 0))) }

// Close stops accepting, closes every connection (dropping data still
// held) and returns when all the relay's goroutines have ended.
func (r *relay) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	conns := make([]*relayConn, 0, len(r.conns))
	for c := range r.conns {
		conns = append(conns, c)
	}
	r.mu.Unlock()
	err := r.ln.Close()
	for _, c := range conns {
		c.close()
	}
	r.wg.Wait()
	return err
}

func (r *relay) accept() {
	defer r.wg.Done()
	for {
		conn, err := r.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // e.g. out of file descriptors
			continue
		}
		c := &relayConn{client: conn, done: make(chan struct{})}
		if r.refusing.Load() {
			conn.Close() // as if refused
			continue
		}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			conn.Close()
			return
		}
		r.conns[c] = struct{}{}
		r.wg.Add(1) // before Close's Wait: Close sets closed under mu first
		r.mu.Unlock()
		go r.serve(c)
	}
}

// serve dials the target and runs the connection's three copies until it
// closes.
func (r *relay) serve(c *relayConn) {
	defer r.wg.Done()
	defer func() {
		r.mu.Lock()
		delete(r.conns, c)
		r.mu.Unlock()
	}()
	up, err := net.DialTimeout("tcp", r.target, 5*time.Second)
	if err != nil {
		c.close() // the client sees its connection closed, as if refused
		return
	}
	if !c.setUpstream(up) {
		up.Close() // the relay was closed while dialling
		return
	}
	observe := func([]byte) {}
	if r.counts != nil {
		observe = r.counts.parser().feed
	}
	queue := make(chan relayChunk, relayQueue)
	var wg sync.WaitGroup
	wg.Add(2)
	held := func() bool { return r.partitioned.Load() || c.held.Load() }
	go func() { defer wg.Done(); c.forwardUp(up, held, observe) }()
	go func() { defer wg.Done(); c.readDown(up, queue) }()
	c.writeDown(queue, func() time.Duration {
		if held() {
			return 24 * time.Hour
		}
		return r.Delay()
	})
	wg.Wait()
}

// relayConn is one client connection and its connection to the target.
type relayConn struct {
	client net.Conn
	done   chan struct{} // closed by close
	held   atomic.Bool   // Relay.HoldConn: this connection alone partitioned

	mu       sync.Mutex
	upstream net.Conn
	closed   bool
}

func (c *relayConn) setUpstream(up net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.upstream = up
	return true
}

// close closes both sides once; blocked reads and writes return.
func (c *relayConn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	close(c.done)
	c.client.Close()
	if c.upstream != nil {
		c.upstream.Close()
	}
}

// forwardUp copies client→target undelayed, except while held (a
// partition: what the client sent reaches the target when it ends, as TCP
// delivers it once the network heals, even when the client has closed
// meanwhile); the client's end (or an error on either side) closes the
// connection. observe sees every chunk read from the client, in order.
func (c *relayConn) forwardUp(up net.Conn, held func() bool, observe func([]byte)) {
	defer c.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.client.Read(buf)
		if n > 0 {
			observe(buf[:n])
			for held() {
				select {
				case <-time.After(relayRecheck):
				case <-c.done:
					return
				}
			}
			if _, werr := up.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// readDown reads the target and queues each chunk with the time it was
// read, then the end of the stream.
func (c *relayConn) readDown(up net.Conn, queue chan<- relayChunk) {
	buf := make([]byte, 32<<10)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			select {
			case queue <- relayChunk{at: time.Now(), b: bytes.Clone(buf[:n])}:
			case <-c.done:
				return
			}
		}
		if err != nil {
			select {
			case queue <- relayChunk{at: time.Now(), eof: true}:
			case <-c.done:
			}
			return
		}
	}
}

// writeDown writes each queued chunk to the client once delay has passed
// since it was read, in order, and closes the connection after the end of
// the stream or a failed write.
func (c *relayConn) writeDown(queue <-chan relayChunk, delay func() time.Duration) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var ch relayChunk
		select {
		case ch = <-queue:
		case <-c.done:
			return
		}
		// The delay is read again every relayRecheck, so that lowering it
		// (Relay.Stall(false)) releases a chunk already held.
		for {
			wait := time.Until(ch.at.Add(delay()))
			if wait <= 0 {
				break
			}
			timer.Reset(min(wait, relayRecheck))
			select {
			case <-timer.C:
			case <-c.done:
				timer.Stop()
				return
			}
		}
		if ch.eof {
			c.close()
			return
		}
		if _, err := c.client.Write(ch.b); err != nil {
			c.close()
			return
		}
	}
}

// Relay is a TCP proxy on 127.0.0.1 in front of a server whose answers
// can be held (Stall): the client's connections hang, without breaking,
// as behind a congested network or a stalled server.
type Relay struct{ r *relay }

// NewRelay listens on an ephemeral port of 127.0.0.1 and forwards every
// connection to target.
func NewRelay(target string) (*Relay, error) {
	r, err := newRelay(target, 0)
	if err != nil {
		return nil, err
	}
	return &Relay{r: r}, nil
}

// Port is the port clients connect to.
func (r *Relay) Port() int { return r.r.Port() }

// Stall holds (true) every answer from the server until released
// (false); requests still reach the server.
func (r *Relay) Stall(on bool) {
	if on {
		r.r.SetDelay(24 * time.Hour)
	} else {
		r.r.SetDelay(0)
	}
}

// SetDelay holds every answer from the server for d before the client
// gets it: a network's latency (a round trip takes d longer). Zero: none.
func (r *Relay) SetDelay(d time.Duration) { r.r.SetDelay(d) }

// Close closes the relay and every connection through it.
func (r *Relay) Close() error { return r.r.Close() }

// Partition holds (true) everything sent either way, as a network that
// drops packets does: connections neither break nor answer, requests do
// not reach the server; when it ends (false), what was held is delivered,
// as TCP retransmits it, requests sent before the client gave up
// included.
func (r *Relay) Partition(on bool) { r.r.partitioned.Store(on) }

// HoldConn partitions (true) one connection alone, as Partition does all:
// the one whose relay→server side has the local port port, which is what
// the server reports as its client's port (PostgreSQL's
// pg_stat_activity.client_port); false ends it. New connections and the
// others pass. It reports whether such a connection is open.
func (r *Relay) HoldConn(port int, on bool) bool {
	r.r.mu.Lock()
	defer r.r.mu.Unlock()
	for c := range r.r.conns {
		c.mu.Lock()
		up := c.upstream
		c.mu.Unlock()
		if a, ok := upstreamAddr(up); ok && a.Port == port {
			c.held.Store(on)
			return true
		}
	}
	return false
}

// upstreamAddr is the local TCP address of up (nil before it is dialled).
func upstreamAddr(up net.Conn) (*net.TCPAddr, bool) {
	if up == nil {
		return nil, false
	}
	a, ok := up.LocalAddr().(*net.TCPAddr)
	return a, ok
}

// Refuse closes (true) every connection through the relay and every new
// one at once, as a server that is gone or a firewall that resets does,
// until false.
func (r *Relay) Refuse(on bool) {
	r.r.refusing.Store(on)
	if !on {
		return
	}
	r.r.mu.Lock()
	conns := make([]*relayConn, 0, len(r.r.conns))
	for c := range r.r.conns {
		conns = append(conns, c)
	}
	r.r.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}
