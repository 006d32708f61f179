//go:build linux

package workload

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// sharedVersions maps the file path (n 8-byte counters, written by the
// parent) into memory shared by every process of the fleet: the highest
// version acknowledged to a writer of each row, in any process.
func sharedVersions(path string, n int) ([]atomic.Int64, func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("workload: %w", err)
	}
	defer f.Close()
	b, err := syscall.Mmap(int(f.Fd()), 0, 8*n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("workload: mmap %s: %w", path, err)
	}
	// A mapping starts on a page boundary: 8-byte aligned.
	v := unsafe.Slice((*atomic.Int64)(unsafe.Pointer(&b[0])), n)
	return v, func() { _ = syscall.Munmap(b) }, nil
}

// clockTicks is Linux's USER_HZ, the unit of /proc/<pid>/stat's times
// (100 on every architecture Go supports).
const clockTicks = 100

// processesCPU is the user + system CPU time the processes have used.
func processesCPU(pids []int) (time.Duration, error) {
	var ticks int64
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return 0, fmt.Errorf("workload: CPU of process %d: %w", pid, err)
		}
		// The command (field 2) may hold spaces: fields after its ')'.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			return 0, fmt.Errorf("workload: /proc/%d/stat: %q", pid, s)
		}
		for _, x := range f[11:13] { // utime, stime: fields 14 and 15
			n, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("workload: /proc/%d/stat: %w", pid, err)
			}
			ticks += n
		}
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}
