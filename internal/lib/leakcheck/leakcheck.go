package leakcheck

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Baseline is the set of goroutines running when it was taken (their ids).
type Baseline map[int]bool

// Current is the goroutines running now, the caller's included.
func Current() Baseline {
	b := Baseline{}
	for _, g := range all() {
		b[g.id] = true
	}
	return b
}

// TB is what VerifyNone needs of a *testing.T.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
}

// Retries and MaxSleep bound the wait of Find and VerifyNone: a sleep of
// 1µs doubling to MaxSleep between looks, Retries times (about half a
// second in all).
const (
	Retries  = 20
	MaxSleep = 100 * time.Millisecond
)

// VerifyNone reports with t.Errorf the goroutines Find returns.
func VerifyNone(t TB, base Baseline) {
	t.Helper()
	if err := Find(base); err != nil {
		t.Errorf("%v", err)
	}
}

// Find returns an error listing the goroutines, not in base, not the
// caller, not the testing package's or the runtime's, that still run after
// the retries; nil when there are none.
func Find(base Baseline) error {
	self := selfID()
	var left []goroutine
	for i := 0; ; i++ {
		left = left[:0]
		for _, g := range all() {
			if g.id != self && !base[g.id] && !ignored(g) {
				left = append(left, g)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if i >= Retries {
			break
		}
		time.Sleep(min(time.Microsecond<<i, MaxSleep))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "leakcheck: %d goroutine(s) left running:", len(left))
	for _, g := range left {
		b.WriteString("\n\n" + g.trace)
	}
	return fmt.Errorf("%s", b.String())
}

// goroutine is one goroutine of a runtime.Stack dump.
type goroutine struct {
	id    int
	state string   // "chan receive", "select", "syscall, 2 minutes"...
	funcs []string // its frames' functions, the top first
	trace string
}

func (g goroutine) top() string {
	if len(g.funcs) == 0 {
		return ""
	}
	return g.funcs[0]
}

func (g goroutine) has(f string) bool {
	for _, x := range g.funcs {
		if x == f {
			return true
		}
	}
	return false
}

// ignored: the goroutines that the testing package, os/signal and the
// runtime start on their own (those go.uber.org/goleak ignores).
func ignored(g goroutine) bool {
	switch g.top() {
	case "testing.RunTests", "testing.(*T).Run", "testing.(*T).Parallel", "testing.runFuzzing", "testing.runFuzzTests":
		return strings.HasPrefix(g.state, "chan receive")
	case "os/signal.signal_recv", "os/signal.loop", "runtime.ReadTrace":
		return true
	}
	if g.has("runtime.ensureSigM") || g.has("runtime/trace.Start.func1") {
		return true
	}
	return g.has("runtime.goexit") && strings.HasPrefix(g.state, "syscall")
}

// all parses runtime.Stack of every goroutine.
func all() []goroutine {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return parse(string(buf[:n]))
		}
		buf = make([]byte, 2*len(buf))
	}
}

func selfID() int {
	buf := make([]byte, 128)
	buf = buf[:runtime.Stack(buf, false)]
	gs := parse(string(buf))
	if len(gs) == 0 {
		return -1
	}
	return gs[0].id
}

// parse reads a dump: blocks separated by a blank line, each a header
// "goroutine 12 [chan receive]:" then a function line and a tab-indented
// file line per frame, and "created by f in goroutine 1" last.
func parse(dump string) []goroutine {
	var out []goroutine
	for _, block := range strings.Split(strings.TrimSpace(dump), "\n\n") {
		lines := strings.Split(block, "\n")
		head, ok := strings.CutPrefix(lines[0], "goroutine ")
		if !ok {
			continue
		}
		idText, rest, _ := strings.Cut(head, " ")
		id, err := strconv.Atoi(idText)
		if err != nil {
			continue
		}
		g := goroutine{id: id, trace: block}
		if i, j := strings.Index(rest, "["), strings.LastIndex(rest, "]"); i >= 0 && j > i {
			g.state = rest[i+1 : j]
		}
		for _, l := range lines[1:] {
			if l == "" || l[0] == '\t' {
				continue
			}
			if c, ok := strings.CutPrefix(l, "created by "); ok {
				c, _, _ = strings.Cut(c, " in goroutine ")
				g.funcs = append(g.funcs, c)
				continue
			}
			if i := strings.LastIndex(l, "("); i > 0 {
				l = l[:i]
			}
			g.funcs = append(g.funcs, l)
		}
		out = append(out, g)
	}
	return out
}
