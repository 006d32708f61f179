package testcluster

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestServerContainersCompeteLikeProcesses: with the cgroupfs driver and
// cgroup v1, a server's container sits directly under the root CPU cgroup
// with serverCPUShares, not under the engine's shared "docker" cgroup
// whose weight is one process's (docker.go, serverCPUShares).
func TestServerContainersCompeteLikeProcesses(t *testing.T) {
	if os.Getenv(EnvDocker) != "1" {
		t.Skip("runs with the container provider (FRESHREAD_DOCKER=1)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if ok, err := dockerAvailable(ctx); !ok {
		t.Fatalf("FRESHREAD_DOCKER=1, but no Docker engine answers: %v", err)
	}
	withServerCPU(ctx) // learn the engine's cgroup driver
	if !serverCgroup.cgroupfs {
		t.Skip("the engine's cgroup driver is not cgroupfs: containers keep the engine's placement")
	}
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.shares"); err != nil {
		t.Skip("no cgroup v1 cpu controller on this machine")
	}
	c, err := runContainer(ctx, "a sleeping container", "", withEntrypoint("sleep", "300"))
	if err != nil {
		t.Fatal(err)
	}
	defer terminate(c)
	info, err := c.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.CgroupParent != "/" {
		t.Fatalf("cgroup parent %q, want /", info.CgroupParent)
	}
	cg, err := os.ReadFile("/proc/" + strconv.Itoa(info.Pid) + "/cgroup")
	if err != nil {
		t.Skipf("the engine's processes are not visible here: %v", err)
	}
	var cpuPath string
	for _, line := range strings.Split(string(cg), "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && (f[1] == "cpu" || f[1] == "cpu,cpuacct") {
			cpuPath = f[2]
		}
	}
	if cpuPath != "/"+info.ID {
		t.Fatalf("the container's CPU cgroup is %q, want /%s", cpuPath, info.ID)
	}
	shares, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpu", cpuPath, "cpu.shares"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(shares)); got != strconv.FormatInt(serverCPUShares, 10) {
		t.Fatalf("cpu.shares %s, want %d", got, serverCPUShares)
	}
}
