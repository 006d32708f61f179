package lsnstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/redis/go-redis/v9"
)

// WatchRedis installs on rdb the watch NewRedis installs on the client of
// every store (once per client; later calls do nothing):
//
//   - a command the server refuses to the client's user (NOPERM, or a
//     command or key refused inside a script) logs an ERROR naming the
//     command, once per command per process (through slog.Default(), or
//     the logger a store over the client was given: Redis.SetLogger), and
//     is counted in DeniedCommands (freshreadprom.Denied exports the
//     counts as freshread_store_denied_total{command});
//   - a call that fails on its deadline, its cancellation or the pool's
//     timeout after connecting to the server failed returns an error that
//     also names the connection's failure ("connection refused", "no such
//     host", "i/o timeout"), which go-redis's retries would otherwise hide
//     behind "context deadline exceeded". errors.Is matches both.
//
// lookup.New and sharding.NewIDGenerator call it on their clients; call
// it for any other client of freshread's. A nil rdb is ignored.
func WatchRedis(rdb redis.UniversalClient) { watchRedis(rdb) }

// LogRedisTo is WatchRedis, with the watch's log (the refusals) sent to l
// instead of slog.Default() (nil: back to slog.Default()). The logger is
// the client's: the last call for a client wins (Redis.SetLogger too).
func LogRedisTo(rdb redis.UniversalClient, l *slog.Logger) {
	if h := watchRedis(rdb); h != nil {
		h.logger.Store(l)
	}
}

// watchRedis is WatchRedis, returning rdb's hook (nil for a nil rdb).
func watchRedis(rdb redis.UniversalClient) *watchHook {
	if rdb == nil {
		return nil
	}
	key, forget := watchKey(rdb)
	h := &watchHook{user: clientUser(rdb)}
	if v, loaded := watchedClients.LoadOrStore(key, h); loaded {
		return v.(*watchHook)
	}
	forget()
	node := func(n *redis.Client) { n.AddHook(dialWatch{h}) }
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		c.OnNewNode(node)
	case *redis.Ring:
		c.OnNewNode(node)
	}
	rdb.AddHook(h)
	return h
}

// watchedClients holds the clients WatchRedis has installed its hook on
// (and the hook),
// by a weak pointer for the clients go-redis makes (a client that is
// collected leaves the set), else by the client itself.
var watchedClients sync.Map

// watchKey returns rdb's key in watchedClients and a function that removes
// it once rdb is collected (run it only when the key was stored).
func watchKey(rdb redis.UniversalClient) (key any, forget func()) {
	switch c := rdb.(type) {
	case *redis.Client:
		return weakKey(c)
	case *redis.ClusterClient:
		return weakKey(c)
	case *redis.Ring:
		return weakKey(c)
	}
	return rdb, func() {}
}

func weakKey[T any](c *T) (any, func()) {
	k := weak.Make(c)
	return k, func() { runtime.AddCleanup(c, func(k weak.Pointer[T]) { watchedClients.Delete(k) }, k) }
}

// clientUser returns the ACL user of rdb, for the log ("" when unknown or
// the default user). Never the password.
func clientUser(rdb redis.UniversalClient) string {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().Username
	case *redis.ClusterClient:
		return c.Options().Username
	case *redis.Ring:
		return c.Options().Username
	}
	return ""
}

// DeniedCommands returns how many calls the server refused to its user
// (NOPERM, or inside a script) since the process started, by command
// ("del", "config|get"; "script" when the server did not say which
// command of a script it refused), on every client watched (WatchRedis).
// freshreadprom.Denied exports it as freshread_store_denied_total.
func DeniedCommands() map[string]uint64 {
	out := map[string]uint64{}
	denials.Range(func(k, v any) bool {
		out[k.(deniedKey).command] += v.(*denial).n.Load()
		return true
	})
	return out
}

// denials are the refusals of the process, by command and kind.
var denials sync.Map // deniedKey -> *denial

type deniedKey struct {
	command string
	key     bool // the key was refused, not the command
}

type denial struct {
	n      atomic.Uint64
	logged atomic.Bool
}

// watchHook is WatchRedis's go-redis hook.
type watchHook struct {
	user string
	// logger receives the refusals' log (nil: slog.Default()).
	logger atomic.Pointer[slog.Logger]
	// dialFails counts the failed connection attempts; lastDial is the
	// latest one's error.
	dialFails atomic.Uint64
	lastDial  atomic.Pointer[error]
	// scripts maps the SHA-1 of every script sent with EVAL to its source,
	// to name the command Redis before 7.2 refuses inside a script
	// without saying which; about maxScripts at most (an application sending
	// scripts built per call does not grow it without end).
	scripts  sync.Map
	nScripts atomic.Int32
}

// maxScripts is how many script sources a watchHook remembers.
const maxScripts = 256

// dialWatch is the hook on a Cluster's or a Ring's node clients: it
// records their failed connections for the watchHook on the client.
type dialWatch struct{ h *watchHook }

func (d dialWatch) DialHook(next redis.DialHook) redis.DialHook { return d.h.DialHook(next) }
func (dialWatch) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return nil
}
func (dialWatch) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return nil
}

func (h *watchHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil && !errors.Is(err, context.Canceled) {
			h.lastDial.Store(&err)
			h.dialFails.Add(1)
		}
		return c, err
	}
}

func (h *watchHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		dials := h.dialFails.Load()
		err := next(ctx, cmd)
		h.learnScript(cmd)
		if err != nil {
			err = h.failed(ctx, dials, cmd, err)
		}
		return err
	}
}

func (h *watchHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		dials := h.dialFails.Load()
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.learnScript(cmd)
			if cerr := cmd.Err(); cerr != nil {
				h.failed(ctx, dials, cmd, cerr)
			}
		}
		if err == nil {
			return nil
		}
		if !isDenied(err) {
			return h.withCause(dials, err)
		}
		for _, cmd := range cmds {
			if cerr := cmd.Err(); cerr != err && errors.Is(cerr, err) {
				return cerr // with the remedy
			}
		}
		return err
	}
}

// failed handles cmd's error err: a refusal is logged and counted, a
// failure after a failed connection names it (and is set on cmd).
func (h *watchHook) failed(ctx context.Context, dials uint64, cmd redis.Cmder, err error) error {
	if isDenied(err) {
		if _, ok := err.(*deniedError); ok {
			return err
		}
		werr := &deniedError{err: err, remedy: h.denied(ctx, cmd, err)}
		cmd.SetErr(werr)
		return werr
	}
	if werr := h.withCause(dials, err); werr != err {
		cmd.SetErr(werr)
		return werr
	}
	return err
}

// withCause returns err naming the latest failed connection when one
// failed since dials and err is a deadline, a cancellation or the pool's
// timeout (which go-redis returns after retrying, hiding why the retries
// failed); else err.
func (h *watchHook) withCause(dials uint64, err error) error {
	if h.dialFails.Load() == dials {
		return err
	}
	var re redis.Error
	if errors.As(err, &re) && !errors.Is(err, redis.ErrPoolTimeout) {
		return err
	}
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && !errors.Is(err, redis.ErrPoolTimeout) {
		return err
	}
	last := h.lastDial.Load()
	if last == nil || errors.Is(err, *last) {
		return err
	}
	var ce *causeError
	if errors.As(err, &ce) {
		return err
	}
	return &causeError{err: err, cause: *last}
}

// deniedError is a refusal with what to grant. It is a redis.Error, as
// the refusal it wraps.
type deniedError struct {
	err    error
	remedy string
}

func (e *deniedError) Error() string { return e.err.Error() + " (" + e.remedy + ")" }
func (e *deniedError) Unwrap() error { return e.err }
func (*deniedError) RedisError()     {}

// causeError is a call's error with the connection failure behind it.
type causeError struct{ err, cause error }

func (e *causeError) Error() string {
	return e.err.Error() + " after connecting to Redis failed (" + e.cause.Error() + "): check that the server at that address is up and reachable from this host"
}

func (e *causeError) Unwrap() []error { return []error{e.err, e.cause} }

// learnScript remembers the source of a script sent with EVAL.
func (h *watchHook) learnScript(cmd redis.Cmder) {
	if h.nScripts.Load() >= maxScripts {
		return
	}
	args := cmd.Args()
	if len(args) < 2 {
		return
	}
	if name, _ := args[0].(string); name != "eval" && name != "EVAL" && name != "eval_ro" {
		return
	}
	src, ok := args[1].(string)
	if !ok {
		return
	}
	sum := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(sum[:])
	if _, loaded := h.scripts.LoadOrStore(sha, src); !loaded {
		h.nScripts.Add(1)
	}
}

// isDenied reports whether err is the server refusing a command or a key
// to the client's user, directly (NOPERM) or inside a script (Redis 7.2
// and later: "ERR ACL failure in script: ..."; before: "ERR The user
// executing the script can't ...").
func isDenied(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := strings.TrimPrefix(re.Error(), "ERR ")
	return strings.HasPrefix(msg, "NOPERM") ||
		strings.HasPrefix(msg, "ACL failure in script") ||
		strings.HasPrefix(msg, "The user executing the script can't")
}

var (
	deniedCommandRE = regexp.MustCompile(`'([^']+)' command`)
	scriptLineRE    = regexp.MustCompile(`@user_script:(\d+)`)
	scriptCallRE    = regexp.MustCompile(`redis\.p?call\(\s*['"]([A-Za-z_|]+)['"]`)
)

// deniedName returns the command the server refused in err (cmd's
// reply) and whether it refused a key rather than the command.
func (h *watchHook) deniedName(cmd redis.Cmder, err error) (command string, key bool) {
	msg := err.Error()
	key = strings.Contains(msg, " key")
	if m := deniedCommandRE.FindStringSubmatch(msg); m != nil {
		return strings.ToLower(m[1]), false
	}
	if !strings.Contains(msg, "script") {
		// A key of cmd itself.
		return cmdName(cmd), key
	}
	// Refused inside a script without a name (Redis before 7.2, or a
	// key): the call at the line the server gives, in the script's source.
	if src := h.scriptSource(cmd); src != "" {
		if m := scriptLineRE.FindStringSubmatch(msg); m != nil {
			if n, _ := strconv.Atoi(m[1]); n >= 1 {
				if lines := strings.Split(src, "\n"); n <= len(lines) {
					var names []string
					for _, c := range scriptCallRE.FindAllStringSubmatch(lines[n-1], -1) {
						names = append(names, strings.ToLower(c[1]))
					}
					sort.Strings(names)
					names = compactStrings(names)
					if len(names) > 0 {
						return strings.Join(names, " or "), key
					}
				}
			}
		}
	}
	return "script", key
}

func compactStrings(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// cmdName is cmd's name, with its subcommand for the commands ACL rules
// name so ("config|get", "client|setinfo").
func cmdName(cmd redis.Cmder) string {
	name := cmd.Name()
	args := cmd.Args()
	switch name {
	case "config", "client", "cluster", "script", "acl", "command", "object", "memory", "xinfo":
		if len(args) > 1 {
			if sub, ok := args[1].(string); ok {
				return name + "|" + strings.ToLower(sub)
			}
		}
	}
	return name
}

// scriptSource is the source of the script cmd runs, when known.
func (h *watchHook) scriptSource(cmd redis.Cmder) string {
	args := cmd.Args()
	if len(args) < 2 {
		return ""
	}
	s, _ := args[1].(string)
	switch cmd.Name() {
	case "eval", "eval_ro":
		return s
	case "evalsha", "evalsha_ro":
		if src, ok := h.scripts.Load(strings.ToLower(s)); ok {
			return src.(string)
		}
	}
	return ""
}

// denied counts a refusal, logs the first of its command and kind, and
// returns what to grant.
func (h *watchHook) denied(ctx context.Context, cmd redis.Cmder, err error) (remedy string) {
	command, key := h.deniedName(cmd, err)
	remedy = deniedRemedy(command, key, h.user)
	k := deniedKey{command: command, key: key}
	v, ok := denials.Load(k)
	if !ok {
		v, _ = denials.LoadOrStore(k, &denial{})
	}
	d := v.(*denial)
	d.n.Add(1)
	if d.logged.CompareAndSwap(false, true) {
		what := "the command " + command
		if key {
			what = "a key of " + command
		}
		h.log().ErrorContext(ctx, "freshread: Redis refused "+what+" to this client's user (NOPERM); the call failed: "+remedy+"; logged once per command; freshread_store_denied_total (freshreadprom.Denied) counts every refusal",
			"command", command, "user", h.user, "err", err.Error())
	}
	return remedy
}

// log is the logger of the refusals.
func (h *watchHook) log() *slog.Logger {
	if l := h.logger.Load(); l != nil {
		return l
	}
	return slog.Default()
}

// deniedRemedy says what to grant user for a refusal of command.
func deniedRemedy(command string, key bool, user string) string {
	if user == "" {
		user = "<user>"
	}
	const guide = "; see the operations guide, Redis permissions"
	if key {
		return "give the user the keys: ACL SETUSER " + user + " ~<Prefix>*" + guide
	}
	if strings.Contains(command, " or ") || command == "script" {
		return "grant the user the command the server's ACL LOG names" + guide
	}
	return "grant it: ACL SETUSER " + user + " +" + command + guide
}
