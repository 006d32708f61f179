package testcluster

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// dockerRedis is a Redis 7 container on a fixed port (serverNet says on
// which network), so Stop and Start keep the address.
type dockerRedis struct {
	c    *dockerContainer
	host string
	port int
}

func startDockerRedis(ctx context.Context, args []string) (redisBackend, error) {
	sn, err := newServerNet(ctx, false)
	if err != nil {
		return nil, err
	}
	port, err := sn.freePort()
	if err != nil {
		return nil, err
	}
	c, err := runContainer(ctx, "Redis", "",
		withEntrypoint(append([]string{"redis-server", "--bind", sn.listenIP(), "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--protected-mode", "no"}, args...)...),
		sn.attach("redis", port),
	)
	if err != nil {
		return nil, err
	}
	r := &dockerRedis{c: c, host: sn.host, port: port}
	if err := r.wait(ctx); err != nil {
		terminate(c)
		return nil, err
	}
	return r, nil
}

func (r *dockerRedis) addr() string { return hostPort(r.host, r.port) }

// wait waits until the server answers PING.
func (r *dockerRedis) wait(ctx context.Context) error {
	return waitContainer(ctx, r.c, "Redis", func(ctx context.Context) error { return pingRedis(ctx, r.addr()) })
}

// pingRedis sends PING to the Redis server at addr and wants +PONG.
func pingRedis(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

func (r *dockerRedis) stop(ctx context.Context) error {
	return stopContainer(ctx, r.c, 10*time.Second)
}

func (r *dockerRedis) start(ctx context.Context) error {
	if err := r.c.Start(ctx); err != nil {
		return fmt.Errorf("testcluster: start Redis container: %w", err)
	}
	return r.wait(ctx)
}

func (r *dockerRedis) close() error { return terminate(r.c) }
