package soak

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/freshread/freshread/internal/harness/linearize"
)

// The soak's history is also checked for linearizability
// (internal/harness/linearize, the algorithm of
// github.com/anishathalye/porcupine, the checker of etcd's robustness
// tests), besides checker.go.
//
// Model: each row is a register holding a version (0 at the start); a
// write sets it, a read returns it. Each operation has its call and return
// times as the workers recorded them. A row has one writer, whose versions
// grow, so a write must set a higher version than the register holds: a
// failed write that commits late does so before its writer's next write
// commits (that one waits for its row lock).
//
// What freshread promises is that a read sees every write that returned
// before the read began, or something newer; a read concurrent with a
// write may see either version. That is a regular register per row:
// every read, taken alone with the row's writes, must be linearizable
// (checkRegular: one partition per read). It does not promise
// more: a write whose commit is on the primary but not yet published may
// be seen by one read (on the primary) and not by a later read of another
// process (on a replica) while the write has not returned, which a
// linearizable (atomic) register forbids. checkAtomic checks that stronger
// property per row and is reported for information only.
//
// Writes whose outcome is unknown (an error other than a refusal) may or
// may not have happened: their return is the return of the next write of
// the row that was acknowledged (each row has one writer, which never
// reuses a version; the row lock orders a late commit before the next
// write's), or never when none followed. Only those whose version some
// read of the row returned are kept: one that no read saw can always be
// linearized just before the next acknowledged write (or last), where it
// changes no read, so leaving it out changes no verdict, and a primary
// restart fails dozens of writes in a row, whose orders the checker would
// otherwise search. Writes refused with
// plugin.ErrStoreUnreachable that the writer then found absent from the
// primary are left out: they did not happen, and a read that saw one is a
// violation.

// LinearResult is what the linearizability check said of a history.
type LinearResult struct {
	Result     linearize.Result // Ok, Illegal or Unknown (timed out)
	Partitions int              // partitions checked
	Ops        int              // operations in them (an operation may be in several)
	Took       time.Duration
	// Violations describes the first partitions found not linearizable.
	Violations []string
}

func (r LinearResult) String() string {
	return fmt.Sprintf("%s (%d partitions, %d operations, %v)", r.Result, r.Partitions, r.Ops, r.Took.Round(time.Millisecond))
}

// regInput is a register operation's input: a write of version, or a read.
type regInput struct {
	Write   bool
	Version int64
}

// regModel is a register of versions.
var regModel = linearize.Model[int64, regInput, int64]{
	Init: 0,
	Step: func(state int64, in regInput, output int64) (bool, int64) {
		if in.Write {
			// A row's versions are written in order (one writer).
			return in.Version > state, in.Version
		}
		return output == state, state
	},
}

// linOp is one operation of a row's history, its times in nanoseconds
// since the history's start.
type linOp struct {
	write        bool
	version      int64
	call, ret    int64
	unknown      bool // a write whose outcome is unknown
	what         string
	readOutput   int64
	server, sess int
}

func (o linOp) op() linearize.Operation[regInput, int64] {
	op := linearize.Operation[regInput, int64]{Input: regInput{Write: o.write, Version: o.version}, Call: o.call, Return: o.ret}
	if !o.write {
		op.Output = o.readOutput
	}
	return op
}

// check checks the operations ops before deadline.
func check(ops []linOp, deadline time.Time) linearize.Result {
	h := make([]linearize.Operation[regInput, int64], len(ops))
	for i, o := range ops {
		h[i] = o.op()
	}
	return linearize.Check(regModel, h, deadline)
}

// rowHistories is the history per row: its writes by call time, and its
// reads.
type rowHistories struct {
	base   time.Time
	writes map[int][]linOp
	reads  map[int][]linOp
}

// buildHistories turns the recorded writes (acknowledged, session,
// unknown) and reads into row histories.
func buildHistories(writes []Write, sessionWrites []SessionWrite, unknown []Write, reads []Read) rowHistories {
	var base time.Time
	first := func(t time.Time) {
		if !t.IsZero() && (base.IsZero() || t.Before(base)) {
			base = t
		}
	}
	for _, w := range writes {
		first(w.Called)
	}
	for _, w := range sessionWrites {
		first(w.Called)
	}
	for _, w := range unknown {
		first(w.Called)
	}
	for _, r := range reads {
		first(r.Started)
	}
	ns := func(t time.Time) int64 { return t.Sub(base).Nanoseconds() }
	h := rowHistories{base: base, writes: map[int][]linOp{}, reads: map[int][]linOp{}}
	add := func(w Write, unknown bool) {
		called := w.Called
		if called.IsZero() {
			called = w.Returned // not recorded: as late as it could be
		}
		o := linOp{write: true, version: w.Version, call: ns(called), ret: ns(w.Returned), unknown: unknown,
			what: fmt.Sprintf("write key %d = %d, called %s", w.Key, w.Version, called.Format("15:04:05.000000"))}
		if unknown {
			o.ret = math.MaxInt64
			o.what += ", outcome unknown"
		}
		h.writes[w.Key] = append(h.writes[w.Key], o)
	}
	for _, w := range writes {
		add(w, false)
	}
	for _, w := range sessionWrites {
		add(w.Write, false)
	}
	seen := map[[2]int64]bool{}
	for _, r := range reads {
		seen[[2]int64{int64(r.Key), r.Version}] = true
	}
	for _, w := range unknown {
		if seen[[2]int64{int64(w.Key), w.Version}] {
			add(w, true)
		}
	}
	for k, ws := range h.writes {
		sort.Slice(ws, func(i, j int) bool { return ws[i].call < ws[j].call })
		// An unknown write took effect, if at all, before the next
		// acknowledged write of its row returned.
		next := int64(math.MaxInt64)
		for i := len(ws) - 1; i >= 0; i-- {
			if ws[i].unknown {
				ws[i].ret = next
			} else {
				next = ws[i].ret
			}
		}
		h.writes[k] = ws
	}
	for _, r := range reads {
		kind := "read"
		if r.Table {
			kind = "table read"
		}
		h.reads[r.Key] = append(h.reads[r.Key], linOp{version: 0, readOutput: r.Version,
			call: ns(r.Started), ret: ns(r.Started.Add(r.Took)), server: r.Server, sess: r.Session,
			what: fmt.Sprintf("%s key %d -> %d from port %d (session %d), began %s, took %v", kind, r.Key, r.Version, r.Server, r.Session,
				r.Started.Format("15:04:05.000000"), r.Took.Round(time.Microsecond))})
	}
	return h
}

// regularBatch is how many read partitions are checked before the first
// violation's batch is described (up to 5 of its violations).
const regularBatch = 2000

// checkRegular checks each read with its row's writes for linearizability:
// one partition per read holding the read, the last acknowledged write
// that returned before the read began and every write that may follow it
// and began before the read returned (earlier writes precede that one in
// any linearization and cannot be the read's value). timeout bounds the
// whole check (Unknown past it).
func checkRegular(h rowHistories, timeout time.Duration) LinearResult {
	start := time.Now()
	deadline := start.Add(timeout)
	res := LinearResult{Result: linearize.Ok}
	var batch [][]linOp // partitions: a read, then its writes
	flush := func() bool {
		for _, part := range batch {
			if time.Now().After(deadline) {
				res.Result = linearize.Unknown
				return false
			}
			switch check(part, deadline) {
			case linearize.Illegal:
				res.Result = linearize.Illegal
				res.describe(batch)
				return false
			case linearize.Unknown:
				res.Result = linearize.Unknown
				return false
			}
		}
		batch = batch[:0]
		return true
	}
	keys := make([]int, 0, len(h.reads))
	for k := range h.reads {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	for _, k := range keys {
		ix := indexWrites(h.writes[k])
		for _, r := range h.reads[k] {
			part := append([]linOp{r}, ix.around(r)...)
			res.Ops += len(part)
			res.Partitions++
			batch = append(batch, part)
			if len(batch) >= regularBatch && !flush() {
				res.Took = time.Since(start)
				return res
			}
		}
	}
	flush()
	res.Took = time.Since(start)
	return res
}

// writeIndex finds a read's writes in a row's history.
type writeIndex struct {
	acked        []linOp // by call
	maxRet       []int64 // maxRet[i]: the latest return of acked[:i+1]
	rets         []int64 // the acknowledged writes' returns, sorted
	maxCallByRet []int64 // maxCallByRet[i]: the latest call of the writes with the i+1 first returns
	unknown      []linOp
}

func indexWrites(ws []linOp) writeIndex {
	var ix writeIndex
	for _, w := range ws {
		if w.unknown {
			ix.unknown = append(ix.unknown, w)
		} else {
			ix.acked = append(ix.acked, w)
		}
	}
	sort.Slice(ix.acked, func(i, j int) bool { return ix.acked[i].call < ix.acked[j].call })
	byRet := append([]linOp(nil), ix.acked...)
	sort.Slice(byRet, func(i, j int) bool { return byRet[i].ret < byRet[j].ret })
	var m int64 = math.MinInt64
	for _, w := range ix.acked {
		m = max(m, w.ret)
		ix.maxRet = append(ix.maxRet, m)
	}
	m = math.MinInt64
	for _, w := range byRet {
		m = max(m, w.call)
		ix.rets = append(ix.rets, w.ret)
		ix.maxCallByRet = append(ix.maxCallByRet, m)
	}
	return ix
}

// around returns the writes that matter to read r: those that may be
// linearized after lastCall, the latest call of an acknowledged write
// that returned before r began (that write precedes r, and every write
// that returned before it began precedes it), and that began before r
// returned.
func (ix writeIndex) around(r linOp) []linOp {
	var lastCall int64 = math.MinInt64
	if n := sort.Search(len(ix.rets), func(i int) bool { return ix.rets[i] >= r.call }); n > 0 {
		lastCall = ix.maxCallByRet[n-1]
	}
	lo := sort.Search(len(ix.acked), func(i int) bool { return ix.acked[i].call >= lastCall })
	hi := sort.Search(len(ix.acked), func(i int) bool { return ix.acked[i].call > r.ret })
	var out []linOp
	for j := lo - 1; j >= 0 && ix.maxRet[j] >= lastCall; j-- {
		if ix.acked[j].ret >= lastCall {
			out = append(out, ix.acked[j])
		}
	}
	if lo < hi {
		out = append(out, ix.acked[lo:hi]...)
	}
	for _, w := range ix.unknown {
		if w.call <= r.ret && w.ret >= lastCall {
			out = append(out, w)
		}
	}
	return out
}

// describe finds the partitions of batch that are not linearizable and
// describes the first few.
func (r *LinearResult) describe(batch [][]linOp) {
	for _, part := range batch {
		if len(r.Violations) >= 5 {
			return
		}
		if check(part, time.Now().Add(10*time.Second)) != linearize.Illegal {
			continue
		}
		var b strings.Builder
		b.WriteString("not linearizable:")
		sorted := append([]linOp(nil), part...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i].call < sorted[j].call })
		for _, op := range sorted {
			b.WriteString("\n      " + op.what)
		}
		r.Violations = append(r.Violations, b.String())
	}
}

// checkAtomic checks each row's whole history (every write and read of it)
// for linearizability, a row per partition: stronger than freshread's
// promise (see above), reported for information. It returns the rows
// found linearizable, not linearizable, and not decided within timeout.
func checkAtomic(h rowHistories, timeout time.Duration) (ok, illegal, unknown int) {
	deadline := time.Now().Add(timeout)
	keys := make([]int, 0, len(h.reads))
	for k := range h.reads {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	for _, k := range keys {
		if time.Now().After(deadline) {
			unknown++
			continue
		}
		ops := append(append([]linOp(nil), h.reads[k]...), h.writes[k]...)
		switch check(ops, deadline) {
		case linearize.Ok:
			ok++
		case linearize.Illegal:
			illegal++
		default:
			unknown++
		}
	}
	return ok, illegal, unknown
}
