package lsnstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// fakeRedisErr is an error reply of the server.
type fakeRedisErr string

func (e fakeRedisErr) Error() string { return string(e) }
func (fakeRedisErr) RedisError()     {}

// captureLog sends slog.Default() to a record of its lines (text) until
// the test ends.
func captureLog(t *testing.T) *logLines {
	t.Helper()
	l := &logLines{}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(l, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	return l
}

// logLines is an io.Writer keeping what slog wrote, safe for concurrent
// use.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.lines = append(l.lines, string(p))
	l.mu.Unlock()
	return len(p), nil
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "")
}

// deniedCount is DeniedCommands()[command], which freshreadprom.Denied
// exports as freshread_store_denied_total{command} (tested there).
func deniedCount(t *testing.T, command string) float64 {
	t.Helper()
	return float64(DeniedCommands()[command])
}

// forgetDenials makes the next refusal of each command log again.
func forgetDenials() {
	denials.Range(func(k, _ any) bool { denials.Delete(k); return true })
}

func TestDeniedNames(t *testing.T) {
	h := &watchHook{}
	src := "\nlocal a = redis.call('GET', KEYS[1])\nredis.call(\"PEXPIRE\", KEYS[1], 1)\nif a then return redis.call('DEL', KEYS[1]) or redis.call('GET', KEYS[2]) end\n"
	h.learnScript(redis.NewCmd(context.Background(), "eval", src, 1, "k"))
	sha := "e2c7e3ea5f3d3b8a6f2fbf5b1b6e1c1b9d6c5f00" // unknown
	for name, c := range map[string]struct {
		cmd     redis.Cmder
		msg     string
		command string
		key     bool
	}{
		"Redis 7.0":             {redis.NewCmd(context.Background(), "del", "k"), "NOPERM this user has no permissions to run the 'del' command", "del", false},
		"Redis 7.2":             {redis.NewCmd(context.Background(), "del", "k"), "NOPERM User u has no permissions to run the 'del' command", "del", false},
		"subcommand":            {redis.NewCmd(context.Background(), "config", "get", "maxmemory*"), "NOPERM User u has no permissions to run the 'config|get' command", "config|get", false},
		"key 7.0":               {redis.NewCmd(context.Background(), "get", "x"), "NOPERM this user has no permissions to access one of the keys used as arguments", "get", true},
		"key 7.2":               {redis.NewCmd(context.Background(), "config", "get", "x"), "NOPERM No permissions to access a key", "config|get", true},
		"script 7.2":            {redis.NewCmd(context.Background(), "evalsha", sha, 0), "ERR ACL failure in script: User u has no permissions to run the 'hset' command script: " + sha + ", on @user_script:3.", "hset", false},
		"script key 7.2":        {redis.NewCmd(context.Background(), "evalsha", sha, 0), "ERR ACL failure in script: No permissions to access a key script: " + sha + ", on @user_script:3.", "script", true},
		"script 7.0 known":      {redis.NewCmd(context.Background(), "evalsha", sha1Hex(src), 1, "k"), "ERR The user executing the script can't run this command or subcommand script: x, on @user_script:3.", "pexpire", false},
		"script 7.0 eval":       {redis.NewCmd(context.Background(), "eval", src, 1, "k"), "ERR The user executing the script can't run this command or subcommand script: x, on @user_script:2.", "get", false},
		"script 7.0 two calls":  {redis.NewCmd(context.Background(), "evalsha", sha1Hex(src), 1, "k"), "ERR The user executing the script can't run this command or subcommand script: x, on @user_script:4.", "del or get", false},
		"script 7.0 unknown":    {redis.NewCmd(context.Background(), "evalsha", sha, 0), "ERR The user executing the script can't run this command or subcommand script: x, on @user_script:3.", "script", false},
		"script 7.0 key":        {redis.NewCmd(context.Background(), "eval", src, 1, "k"), "ERR The user executing the script can't access at least one of the keys mentioned in the command script: x, on @user_script:2.", "get", true},
		"script line past end":  {redis.NewCmd(context.Background(), "eval", src, 1, "k"), "ERR The user executing the script can't run this command or subcommand script: x, on @user_script:40.", "script", false},
		"NOPERM in some script": {redis.NewCmd(context.Background(), "fcall", "f", 0), "NOPERM ACL failure in script: User u has no permissions to run the 'set' command", "set", false},
	} {
		t.Run(name, func(t *testing.T) {
			err := fakeRedisErr(c.msg)
			if !isDenied(fmt.Errorf("wrapped: %w", err)) {
				t.Fatalf("isDenied(%q) = false", c.msg)
			}
			command, key := h.deniedName(c.cmd, err)
			if command != c.command || key != c.key {
				t.Errorf("deniedName(%q) = %q, key %v; want %q, key %v", c.msg, command, key, c.command, c.key)
			}
		})
	}
	for _, err := range []error{
		fakeRedisErr("ERR unknown command 'client|setinfo'"),
		fakeRedisErr("NOSCRIPT No matching script"),
		fakeRedisErr("WRONGPASS invalid username-password pair or user is disabled."),
		errors.New("NOPERM not from the server"),
		context.DeadlineExceeded,
	} {
		if isDenied(err) {
			t.Errorf("isDenied(%q) = true", err)
		}
	}
}

// TestScriptsBounded: a client sending scripts built per call does not
// make the watch remember them without end.
func TestScriptsBounded(t *testing.T) {
	h := &watchHook{}
	for i := range 2 * maxScripts {
		h.learnScript(redis.NewCmd(context.Background(), "eval", fmt.Sprintf("return %d", i), 0))
	}
	n := 0
	h.scripts.Range(func(_, _ any) bool { n++; return true })
	if n != maxScripts {
		t.Errorf("%d scripts remembered, want %d", n, maxScripts)
	}
}

func sha1Hex(src string) string {
	h := &watchHook{}
	h.learnScript(redis.NewCmd(context.Background(), "eval", src, 0))
	var sha string
	h.scripts.Range(func(k, _ any) bool { sha = k.(string); return false })
	return sha
}

// TestDeniedLoggedOnce runs a hook over a fake server: each refused
// command is logged once as an ERROR naming it and counted every time; a
// pipeline's refused command too.
func TestDeniedLoggedOnce(t *testing.T) {
	forgetDenials()
	logs := captureLog(t)
	ctx := context.Background()
	h := &watchHook{user: "app"}
	process := h.ProcessHook(func(_ context.Context, cmd redis.Cmder) error {
		err := fakeRedisErr(fmt.Sprintf("NOPERM User app has no permissions to run the '%s' command", cmd.Name()))
		cmd.SetErr(err)
		return err
	})
	for range 3 {
		cmd := redis.NewCmd(ctx, "del", "k")
		err := process(ctx, cmd)
		if !isDenied(err) || !strings.Contains(err.Error(), "ACL SETUSER app +del") || cmd.Err() != err {
			t.Fatalf("the refusal, with what to grant, on the command too: %v (command's: %v)", err, cmd.Err())
		}
	}
	pipeline := h.ProcessPipelineHook(func(_ context.Context, cmds []redis.Cmder) error {
		cmds[1].SetErr(fakeRedisErr("NOPERM User app has no permissions to run the 'hgetall' command"))
		return cmds[1].Err()
	})
	if err := pipeline(ctx, []redis.Cmder{redis.NewCmd(ctx, "get", "a"), redis.NewCmd(ctx, "hgetall", "b")}); !isDenied(err) || !strings.Contains(err.Error(), "+hgetall") {
		t.Fatalf("pipeline: %v", err)
	}
	got := DeniedCommands()
	if got["del"] != 3 || got["hgetall"] != 1 || got["get"] != 0 {
		t.Errorf("DeniedCommands() = %v", got)
	}
	if del, hgetall := deniedCount(t, "del"), deniedCount(t, "hgetall"); del != 3 || hgetall != 1 {
		t.Errorf("freshread_store_denied_total: del %v, hgetall %v; want 3 and 1", del, hgetall)
	}
	out := logs.String()
	if n := strings.Count(out, "command=del"); n != 1 {
		t.Errorf("%d log lines name del, want 1:\n%s", n, out)
	}
	for _, want := range []string{"level=ERROR", "ACL SETUSER app +del", "ACL SETUSER app +hgetall", "user=app"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
}

// TestDeniedOnRedis runs the store as a Redis user refused DEL: the
// invalidation fails with NOPERM, is logged once naming DEL, and counted.
func TestDeniedOnRedis(t *testing.T) {
	r, admin := redisClient(t)
	ctx := context.Background()
	user := fmt.Sprintf("denied%d", time.Now().UnixNano())
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">pw", "~*", "+@all", "-del").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })
	forgetDenials()
	logs := captureLog(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), Username: user, Password: "pw", ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	s := newTestRedis(rdb, RedisOptions{Database: uniqueDB("denied")})
	newTestRedis(rdb, RedisOptions{Database: uniqueDB("denied")}) // one watch per client
	for range 2 {
		err := s.Invalidate(ctx)
		if err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("Invalidate as a user refused DEL: %v", err)
		}
		var re redis.Error
		if !errors.As(err, &re) || !isDenied(err) {
			t.Errorf("the refusal is not a redis.Error: %#v", err)
		}
		if !strings.Contains(err.Error(), "ACL SETUSER "+user+" +del") {
			t.Errorf("the error does not say what to grant: %v", err)
		}
	}
	if n := DeniedCommands()["del"]; n != 2 {
		t.Errorf("DeniedCommands()[del] = %d, want 2", n)
	}
	out := logs.String()
	if strings.Count(out, "level=ERROR") != 1 || !strings.Contains(out, "command=del") || !strings.Contains(out, "ACL SETUSER "+user+" +del") {
		t.Errorf("want one ERROR naming del:\n%s", out)
	}
	if strings.Contains(out, "pw") {
		t.Errorf("the log holds the password:\n%s", out)
	}
}

// TestCauseOfTimeout: a store whose Redis refuses connections fails its
// calls with an error naming the refusal, not only the deadline that
// go-redis's retries ran into; errors.Is matches both.
func TestCauseOfTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now: connections are refused
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	s := NewRedis(rdb, RedisOptions{Database: uniqueDB("cause"), Timeout: 100 * time.Millisecond, MaxTimeout: 300 * time.Millisecond})
	err = s.Raise(context.Background(), []string{"t"}, PositionOf(1))
	if err == nil {
		t.Fatal("Raise on a refused Redis succeeded")
	}
	t.Logf("Raise: %v", err)
	if !strings.Contains(err.Error(), "connection refused") || !strings.HasPrefix(err.Error(), "lsnstore: ") {
		t.Errorf("the error does not name the refusal: %v", err)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("errors.Is(err, ECONNREFUSED) = false: %v", err)
	}
	if strings.Contains(err.Error(), "deadline exceeded") && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("errors.Is(err, DeadlineExceeded) = false: %v", err)
	}
	_, err = s.WritePosition(context.Background(), []string{"t"})
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("WritePosition: %v", err)
	}
}

// TestCauseNotAddedWithoutDialFailure: a deadline with no failed
// connection stays as it was.
func TestCauseNotAddedWithoutDialFailure(t *testing.T) {
	h := &watchHook{}
	boom := errors.New("dial tcp 10.0.0.1:6379: connect: connection refused")
	h.lastDial.Store(&boom) // an old failure, before the call
	h.dialFails.Add(1)
	process := h.ProcessHook(func(context.Context, redis.Cmder) error { return context.DeadlineExceeded })
	if err := process(context.Background(), redis.NewCmd(context.Background(), "get", "k")); err != context.DeadlineExceeded {
		t.Errorf("err = %v, want the deadline as it was", err)
	}
}

// TestDeniedLoggedToStoreLogger: a store given a logger (SetLogger, as the
// plugin gives its Config.Logger) logs its client's refusals there, not
// to slog.Default(); LogRedisTo does the same for a client without a
// store.
func TestDeniedLoggedToStoreLogger(t *testing.T) {
	deflt := captureLog(t)
	ctx := context.Background()
	refuse := func(h *watchHook, command string) {
		t.Helper()
		process := h.ProcessHook(func(_ context.Context, cmd redis.Cmder) error {
			err := fakeRedisErr(fmt.Sprintf("NOPERM User app has no permissions to run the '%s' command", cmd.Name()))
			cmd.SetErr(err)
			return err
		})
		if err := process(ctx, redis.NewCmd(ctx, command, "k")); !isDenied(err) {
			t.Fatalf("%s: %v, want a refusal", command, err)
		}
	}

	forgetDenials()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", Username: "app"})
	defer rdb.Close()
	store := NewRedis(rdb, RedisOptions{Database: "d"})
	own := &logLines{}
	store.SetLogger(slog.New(slog.NewTextHandler(own, nil)))
	refuse(store.hook, "del")
	if out := own.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "command=del") {
		t.Fatalf("the store's logger did not get the refusal:\n%s", out)
	}
	if out := deflt.String(); strings.Contains(out, "command=del") {
		t.Fatalf("slog.Default() got the refusal the store's logger should have:\n%s", out)
	}

	other := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", Username: "app"})
	defer other.Close()
	mine := &logLines{}
	LogRedisTo(other, slog.New(slog.NewTextHandler(mine, nil)))
	refuse(watchRedis(other), "hgetall")
	if out := mine.String(); !strings.Contains(out, "command=hgetall") {
		t.Fatalf("LogRedisTo's logger did not get the refusal:\n%s", out)
	}
	if out := deflt.String(); strings.Contains(out, "command=hgetall") {
		t.Fatalf("slog.Default() got the refusal LogRedisTo's logger should have:\n%s", out)
	}
}
