package lsnstore

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

type ctxKey struct{}

func TestCallCtxEndsAtItsTimeout(t *testing.T) {
	parent := context.WithValue(context.Background(), ctxKey{}, "v")
	c := newCallCtx(parent, 10*time.Millisecond, nil)
	if got := c.Value(ctxKey{}); got != "v" {
		t.Fatalf("Value = %v, want the parent's", got)
	}
	if d, ok := c.Deadline(); !ok || d.IsZero() {
		t.Fatalf("Deadline = %v, %v", d, ok)
	}
	<-c.Done()
	if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err after the timeout = %v, want DeadlineExceeded", err)
	}
	c.release()
	// A fired context is never handed out again: its channel is closed.
	for range 100 {
		n := newCallCtx(parent, time.Hour, nil)
		if n == c {
			t.Fatal("a context whose timer fired was recycled")
		}
		select {
		case <-n.Done():
			t.Fatal("a new context is already done")
		default:
		}
		if err := n.Err(); err != nil {
			t.Fatalf("Err of a running call = %v", err)
		}
		n.release()
	}
}

// TestCallCtxFiredStaysReadable: a context derived from a call's context
// (go-redis derives one while it sets up a new connection) is ended by a
// goroutine of package context that reads the call's context (Cause, so
// Value) after its timer fired, possibly after the call released it. A
// fired context is never recycled, and release must not change it: under
// -race, clearing its parent was reported, and the late Value found a nil
// parent.
func TestCallCtxFiredStaysReadable(t *testing.T) {
	for range 20 {
		c := newCallCtx(context.Background(), time.Millisecond, nil)
		child, cancel := context.WithDeadline(c, c.deadline.Add(time.Hour))
		<-c.Done()
		c.release()
		<-child.Done()
		if err := context.Cause(child); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the derived context ended with %v, want DeadlineExceeded", err)
		}
		cancel()
	}
}

func TestCallCtxReportsTheParentsError(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	c := newCallCtx(parent, time.Hour, nil)
	defer c.release()
	cancel()
	if err := c.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err = %v, want the parent's Canceled", err)
	}
	r := &Redis{timeout: time.Second}
	if ctx, call := r.withTimeout(parent); ctx != parent || call != nil {
		t.Fatal("withTimeout wrapped a context that had ended already")
	}
}

// blackHole accepts connections and never answers: a stalled Redis.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	return ln.Addr().String()
}

// TestRedisTimeoutBoundsAStalledServer: a read of a server that never
// answers ends with an error once the store's timeout has passed, both
// on the socket and while waiting for the one pooled connection a stalled
// call holds, although the client itself would wait a minute.
func TestRedisTimeoutBoundsAStalledServer(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{
		Addr: blackHole(t), PoolSize: 1, MaxRetries: -1, Protocol: 2,
		ReadTimeout: time.Minute, WriteTimeout: time.Minute, PoolTimeout: time.Minute,
		DialTimeout: time.Minute, ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { rdb.Close() })
	s := NewRedis(rdb, RedisOptions{Database: "stalled", Timeout: 50 * time.Millisecond})
	read := func() chan error {
		errs := make(chan error, 1)
		go func() {
			_, err := s.WritePosition(context.Background(), []string{"t"})
			errs <- err
		}()
		return errs
	}
	wait := func(errs chan error, what string) {
		t.Helper()
		select {
		case err := <-errs:
			if err == nil {
				t.Fatalf("%s: a read of a stalled server succeeded", what)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: the read did not end by the store's timeout", what)
		}
	}
	wait(read(), "on the socket")

	// Another user of the client holds its one connection for a minute.
	go func() { _ = rdb.Get(context.Background(), "held").Err() }()
	for rdb.PoolStats().TotalConns == 0 || rdb.PoolStats().IdleConns != 0 {
		time.Sleep(time.Millisecond)
	}
	wait(read(), "waiting for a pooled connection")
}
