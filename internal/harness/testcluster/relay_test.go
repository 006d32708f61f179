package testcluster

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/freshread/freshread/internal/lib/leakcheck"
)

// relayTarget listens on 127.0.0.1 and runs serve on the first connection
// it accepts.
func relayTarget(t *testing.T, serve func(net.Conn)) (addr string, done <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		defer ln.Close()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		serve(c)
	}()
	t.Cleanup(func() { ln.Close(); <-ch })
	return ln.Addr().String(), ch
}

func TestRelayDelaysTargetToClientInOrder(t *testing.T) {
	defer leakcheck.VerifyNone(t, leakcheck.Current())
	const (
		d    = 150 * time.Millisecond
		msgs = 40
		size = 8
	)
	type stamp struct {
		at  time.Time
		seq int
	}
	hello := make(chan time.Time, 1)
	sent := make(chan stamp, msgs+1) // msgs messages, then the close (seq -1)
	addr, targetDone := relayTarget(t, func(c net.Conn) {
		buf := make([]byte, 5)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hello" {
			hello <- time.Time{}
			return
		}
		hello <- time.Now()
		msg := make([]byte, size)
		for i := range msgs {
			binary.BigEndian.PutUint64(msg, uint64(i))
			sent <- stamp{time.Now(), i} // before the write: the relay reads it later
			if _, err := c.Write(msg); err != nil {
				return
			}
			time.Sleep(3 * time.Millisecond)
		}
		sent <- stamp{time.Now(), -1}
	})
	r, c := relayAndClient(t, addr, d)
	defer r.Close()
	defer c.Close()
	start := time.Now()
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	got := <-hello
	if got.IsZero() {
		t.Fatal("the target did not receive hello")
	}
	if up := got.Sub(start); up >= d {
		t.Errorf("client→target took %v, want undelayed (< %v)", up, d)
	} else {
		t.Logf("client→target: %v", up)
	}
	msg := make([]byte, size)
	var minLate, maxLate time.Duration
	for i := range msgs {
		if _, err := io.ReadFull(c, msg); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		arrived := time.Now()
		s := <-sent
		if seq := binary.BigEndian.Uint64(msg); seq != uint64(i) || s.seq != i {
			t.Fatalf("message %d: got sequence %d (stamp %d), want in order", i, seq, s.seq)
		}
		late := arrived.Sub(s.at)
		if late < d {
			t.Fatalf("message %d arrived %v after the target sent it, want at least %v", i, late, d)
		}
		if i == 0 || late < minLate {
			minLate = late
		}
		maxLate = max(maxLate, late)
	}
	t.Logf("target→client: %d messages, each %v to %v after it was sent (delay %v)", msgs, minLate, maxLate, d)
	// The target's close reaches the client d later too.
	<-targetDone
	closed := <-sent
	if n, err := c.Read(msg); err != io.EOF {
		t.Fatalf("after the last message: read %d bytes, err %v; want EOF", n, err)
	}
	if late := time.Since(closed.at); late < d {
		t.Fatalf("the target's close reached the client after %v, want at least %v", late, d)
	}
}

func TestRelaySetDelay(t *testing.T) {
	defer leakcheck.VerifyNone(t, leakcheck.Current())
	tick := make(chan struct{})
	sent := make(chan time.Time, 2)
	addr, _ := relayTarget(t, func(c net.Conn) {
		for range 2 {
			<-tick
			sent <- time.Now()
			if _, err := c.Write([]byte{1}); err != nil {
				return
			}
		}
	})
	r, c := relayAndClient(t, addr, 0)
	defer r.Close()
	defer c.Close()
	b := make([]byte, 1)
	for _, d := range []time.Duration{0, 200 * time.Millisecond} {
		r.SetDelay(d)
		if r.Delay() != d {
			t.Fatalf("Delay() = %v after SetDelay(%v)", r.Delay(), d)
		}
		tick <- struct{}{}
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		late := time.Since(<-sent)
		if late < d {
			t.Fatalf("delay %v: byte arrived after %v", d, late)
		}
		t.Logf("delay %v: byte arrived after %v", d, late)
	}
}

func TestRelayCloseDropsHeldDataAndEndsGoroutines(t *testing.T) {
	defer leakcheck.VerifyNone(t, leakcheck.Current())
	wrote := make(chan struct{})
	addr, _ := relayTarget(t, func(c net.Conn) {
		_, _ = c.Write([]byte("held"))
		close(wrote)
		_, _ = io.Copy(io.Discard, c) // until the relay closes it
	})
	r, c := relayAndClient(t, addr, time.Hour)
	port := r.Port()
	defer c.Close()
	<-wrote
	time.Sleep(20 * time.Millisecond) // let the relay read it
	start := time.Now()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Close took %v", took)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 4)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("client after Close: read %d bytes, err %v; want the connection closed and the data dropped", n, err)
	}
	if c2, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
		c2.Close()
		t.Fatal("the relay still accepts connections after Close")
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestRelayUnreachableTargetClosesClient(t *testing.T) {
	defer leakcheck.VerifyNone(t, leakcheck.Current())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	r, c := relayAndClient(t, addr, 0)
	defer r.Close()
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d bytes, err %v; want the connection closed", n, err)
	}
}

func TestNewRelayNegativeDelay(t *testing.T) {
	if r, err := newRelay("127.0.0.1:1", -time.Millisecond); err == nil {
		r.Close()
		t.Fatal("newRelay with a negative delay: no error")
	}
}

// relayAndClient starts a relay to addr delayed by d and connects a client
// to it; the caller closes both (before the leak check, so not in a
// t.Cleanup).
func relayAndClient(t *testing.T, addr string, d time.Duration) (*relay, net.Conn) {
	t.Helper()
	r, err := newRelay(addr, d)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(r.Port()))
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	return r, c
}

// TestRelayStallHoldsUntilReleased: a stalled relay holds the server's
// answer (the request reaches the server) and releases it, already held,
// when the stall ends.
func TestRelayStallHoldsUntilReleased(t *testing.T) {
	defer leakcheck.VerifyNone(t, leakcheck.Current())
	got := make(chan struct{})
	addr, _ := relayTarget(t, func(c net.Conn) {
		b := make([]byte, 1)
		if _, err := io.ReadFull(c, b); err != nil {
			return
		}
		close(got)
		_, _ = c.Write(b)
		_, _ = io.ReadFull(c, b) // until the client goes
	})
	r, err := NewRelay(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(r.Port()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r.Stall(true)
	if _, err := c.Write([]byte{7}); err != nil {
		t.Fatal(err)
	}
	<-got // the request reached the server
	answer := make(chan error, 1)
	go func() {
		b := make([]byte, 1)
		_, err := io.ReadFull(c, b)
		answer <- err
	}()
	select {
	case err := <-answer:
		t.Fatalf("the answer came through a stalled relay (%v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	r.Stall(false)
	select {
	case err := <-answer:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held answer was not released when the stall ended")
	}
}
