package leakcheck

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder is a TB that keeps what VerifyNone reports.
type recorder struct{ errs []string }

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func leakyWorker(stop chan struct{}) { <-stop }

func TestLeakReported(t *testing.T) {
	base := Current()
	stop := make(chan struct{})
	go leakyWorker(stop)
	var r recorder
	VerifyNone(&r, base)
	close(stop)
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "leakcheck.leakyWorker") || !strings.Contains(r.errs[0], "1 goroutine(s)") {
		t.Fatalf("a goroutine left running: reported %q, want it named", r.errs)
	}
}

func TestGoroutineThatEndsNotReported(t *testing.T) {
	base := Current()
	stop := make(chan struct{})
	go leakyWorker(stop)
	time.AfterFunc(20*time.Millisecond, func() { close(stop) }) // ends during the retries
	var r recorder
	VerifyNone(&r, base)
	if len(r.errs) != 0 {
		t.Fatalf("a goroutine that ended was reported: %q", r.errs)
	}
}

func TestBaselineAndTestingIgnored(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	go leakyWorker(stop) // before the baseline: not reported
	base := Current()
	t.Run("sub", func(t *testing.T) { // this test waits in testing.(*T).Run meanwhile
		var r recorder
		VerifyNone(&r, base)
		if len(r.errs) != 0 {
			t.Fatalf("reported %q", r.errs)
		}
	})
}

func TestParse(t *testing.T) {
	dump := "goroutine 7 [chan receive, 2 minutes]:\ntesting.(*T).Run(0xc000102000, {0x5c1, 0x4}, 0x5d0)\n\t/go/src/testing/testing.go:1750 +0x3ab\nmain.main()\n\t/x/main.go:3 +0x1\n\n" +
		"goroutine 9 [syscall]:\nos/signal.signal_recv()\n\t/go/src/runtime/sigqueue.go:152 +0x29\ncreated by os/signal.Notify.func1.1 in goroutine 1\n\t/go/src/os/signal/signal.go:151 +0x1f\n"
	gs := parse(dump)
	if len(gs) != 2 || gs[0].id != 7 || gs[0].state != "chan receive, 2 minutes" || gs[0].top() != "testing.(*T).Run" || !gs[0].has("main.main") {
		t.Fatalf("parsed %+v", gs)
	}
	if gs[1].id != 9 || gs[1].top() != "os/signal.signal_recv" || !gs[1].has("os/signal.Notify.func1.1") {
		t.Fatalf("parsed %+v", gs[1])
	}
	if !ignored(gs[0]) || !ignored(gs[1]) {
		t.Fatal("the testing and signal goroutines are not ignored")
	}
}
