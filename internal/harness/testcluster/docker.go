// The container provider (this file and docker_*.go): every server runs in
// containers of one image built from image/Dockerfile (docker_image.go),
// on a private Docker network per server group, published on loopback
// ports. It is used when a Docker engine answers, unless
// FRESHREAD_DOCKER=0. The Docker operations themselves run in a helper
// program of the nested module internal/harness/containers
// (docker_client.go).

package testcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// dockerProbe caches whether a Docker engine answered, and why not.
var dockerProbe struct {
	once sync.Once
	ok   bool
	err  error
}

// Probe patience: an engine that is only hinted at (FRESHREAD_DOCKER unset)
// gets one quick ping, so a machine without one falls back to local
// binaries at once; an engine that was asked for (FRESHREAD_DOCKER=1) is
// pinged until it answers or dockerAskedPatience passes, because a busy
// engine (go test running many packages that each start containers) can
// take far longer than two seconds to answer one ping.
const (
	dockerHintPatience  = 3 * time.Second
	dockerAskedPatience = 90 * time.Second
)

// dockerAvailable reports whether the container provider can be used: not
// disabled by FRESHREAD_DOCKER=0, and a Docker engine answered a ping
// (within dockerHintPatience, or dockerAskedPatience when
// FRESHREAD_DOCKER=1). The answer is computed once per process; the error
// says why no engine answered.
func dockerAvailable(ctx context.Context) (bool, error) {
	if os.Getenv(EnvDocker) == "0" {
		return false, nil
	}
	dockerProbe.once.Do(func() {
		// Ryuk, testcontainers' reaper, is an image pulled from a
		// registry; the containers here are removed by Run, those of a
		// process that died by the container helper when its input
		// closes, or else by the next process (removeOrphans). The helper
		// inherits this environment.
		if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") == "" {
			os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
		}
		patience := dockerHintPatience
		if os.Getenv(EnvDocker) == "1" {
			patience = dockerAskedPatience
		}
		dockerProbe.err = probeDocker(patience)
		dockerProbe.ok = dockerProbe.err == nil
		if dockerProbe.ok {
			removeOrphans(ctx)
		}
	})
	return dockerProbe.ok, dockerProbe.err
}

// useDocker reports whether servers run in containers: FRESHREAD_DOCKER=0
// never, =1 always (no engine is then an error, not a fallback to local
// binaries), unset when an engine answers.
func useDocker(ctx context.Context) (bool, error) {
	switch os.Getenv(EnvDocker) {
	case "0":
		return false, nil
	case "1":
		if ok, err := dockerAvailable(ctx); !ok {
			return false, fmt.Errorf("testcluster: %s=1 asks for containers, but no Docker engine answered within %s (DOCKER_HOST, /var/run/docker.sock): %w", EnvDocker, dockerAskedPatience, err)
		}
		return true, nil
	}
	ok, _ := dockerAvailable(ctx)
	return ok, nil
}

// Provider names the provider that servers started by this process come
// from when no FRESHREAD_* server variable names a running server:
// "containers" or "local".
func Provider(ctx context.Context) (string, error) {
	containers, err := useDocker(ctx)
	if err != nil {
		return "", err
	}
	if containers {
		return "containers", nil
	}
	return "local", nil
}

// ownerLabel labels every container with the PID of the test process that
// made it.
const ownerLabel = "io.freshread.testcluster.pid"

// removeOrphans removes the containers (and then unused networks) left by
// test processes that no longer run: a test binary killed before Run
// stopped its servers.
func removeOrphans(ctx context.Context) {
	list, err := dockerCall(ctx, helperRequest{Op: "list_containers", Label: ownerLabel})
	if err != nil {
		return
	}
	for _, c := range list.Items {
		pid, err := strconv.Atoi(c.Labels[ownerLabel])
		if err != nil || processAlive(pid) {
			continue
		}
		_, _ = dockerCall(ctx, helperRequest{Op: "remove", Container: c.ID})
	}
	nets, err := dockerCall(ctx, helperRequest{Op: "list_networks", Label: ownerLabel})
	if err != nil {
		return
	}
	for _, n := range nets.Items {
		if pid, err := strconv.Atoi(n.Labels[ownerLabel]); err == nil && !processAlive(pid) {
			_, _ = dockerCall(ctx, helperRequest{Op: "network_remove", Network: n.ID})
		}
	}
	removeOrphanDataDirs()
}

// processAlive reports whether a process with pid runs on this machine.
func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	return p.Signal(syscall.Signal(0)) == nil
}

// errNoDockerHint: nothing on this machine points at a Docker engine.
var errNoDockerHint = errors.New("nothing points at a Docker engine: no DOCKER_HOST, no docker.sock, no ~/.testcontainers.properties")

// probeDocker asks the engine testcontainers would use for a ping, again
// and again until one answers or patience passes, and returns the last
// failure. It never panics (the container helper turns testcontainers'
// panic when it finds no Docker host into an error) and returns within
// patience plus a few seconds whatever the engine does, once the container
// helper is built and started (not counted in patience).
func probeDocker(patience time.Duration) error {
	if !dockerHostHint() {
		return errNoDockerHint // skip testcontainers entirely
	}
	if _, err := theHelper(); err != nil {
		return err
	}
	return retryPing(patience, pingDocker)
}

// retryPing calls ping (with a timeout of at most ten seconds) until it
// succeeds or patience passes, and returns the last failure.
func retryPing(patience time.Duration, ping func(timeout time.Duration) error) error {
	deadline := time.Now().Add(patience)
	for {
		attempt := min(time.Until(deadline), 10*time.Second)
		err := ping(max(attempt, time.Second))
		if err == nil || time.Now().Add(time.Second).After(deadline) {
			return err
		}
		time.Sleep(time.Second)
	}
}

// pingDocker makes one client and pings the engine within timeout.
func pingDocker(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Second)
	defer cancel()
	// The helper's own deadline is timeout; this one, a second later,
	// bounds the wait for its answer.
	_, err := dockerCall(ctx, helperRequest{Op: "ping", TimeoutMS: timeout.Milliseconds()})
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		return fmt.Errorf("docker ping: no answer within %s", timeout)
	}
	return err
}

// dockerHostHint reports whether anything points at a Docker engine: the
// places testcontainers-go looks (DOCKER_HOST, ~/.testcontainers.properties,
// the default and rootless sockets). Without any, no client is made.
func dockerHostHint() bool {
	if os.Getenv("DOCKER_HOST") != "" {
		return true
	}
	paths := []string{"/var/run/docker.sock"}
	if home, err := os.UserHomeDir(); err == nil {
		paths = append(paths,
			filepath.Join(home, ".testcontainers.properties"),
			filepath.Join(home, ".docker", "run", "docker.sock"),
			filepath.Join(home, ".docker", "desktop", "docker.sock"))
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		paths = append(paths, filepath.Join(d, "docker.sock"))
	}
	paths = append(paths, filepath.Join("/run/user", strconv.Itoa(os.Getuid()), "docker.sock"))
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

// dockerPublish returns the host to connect to for published ports and the
// host IP to bind them on: loopback when the engine is local, the
// engine's address when it is another machine's IP, so trust-auth servers
// are not exposed on every interface; every interface only for an engine
// known by name.
func dockerPublish(ctx context.Context) (connectHost, bindIP string, err error) {
	if _, set := os.LookupEnv("TESTCONTAINERS_HOST_OVERRIDE"); !set && engineOnThisNetwork(ctx) {
		// testcontainers, in a container, takes the default route's
		// gateway for the engine's host when the default bridge names no
		// gateway, even when the engine runs in this container.
		return "127.0.0.1", "127.0.0.1", nil
	}
	res, err := dockerCall(ctx, helperRequest{Op: "daemon_host"})
	if err != nil {
		// "docker provider: ..." or "docker host: ..."
		return "", "", fmt.Errorf("testcluster: %w", err)
	}
	h := res.Host
	if h == "localhost" || h == "127.0.0.1" || isLocalAddr(h) {
		// The engine runs on this machine (testcontainers may name one
		// of its bridge addresses): loopback reaches what it publishes.
		return "127.0.0.1", "127.0.0.1", nil
	}
	// An engine reached at an address of its host (testcontainers names
	// the network gateway when it runs in a container itself): publish
	// on that address only, not on every interface.
	if net.ParseIP(h) != nil {
		return h, h, nil
	}
	return h, "", nil
}

// isLocalAddr reports whether ip is an address of one of this machine's
// interfaces.
func isLocalAddr(ip string) bool {
	want := net.ParseIP(ip)
	if want == nil {
		return false
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(want) {
			return true
		}
	}
	return false
}

// runOption sets part of a container's specification.
type runOption func(*runSpec) error

// withEntrypoint replaces the image's entrypoint.
func withEntrypoint(args ...string) runOption {
	return func(s *runSpec) error { s.Entrypoint = args; return nil }
}

// withCmd replaces the image's command.
func withCmd(args ...string) runOption {
	return func(s *runSpec) error { s.Cmd = args; return nil }
}

// withEnv adds environment variables.
func withEnv(env map[string]string) runOption {
	return func(s *runSpec) error {
		if s.Env == nil {
			s.Env = map[string]string{}
		}
		for k, v := range env {
			s.Env[k] = v
		}
		return nil
	}
}

// withFixedPort exposes containerPort ("6379/tcp") on a fixed host port, so
// that a container stopped and started again keeps its address.
func withFixedPort(containerPort, bindIP string, hostPort int) runOption {
	return func(s *runSpec) error {
		s.Ports = append(s.Ports, portBinding{ContainerPort: containerPort, HostIP: bindIP, HostPort: strconv.Itoa(hostPort)})
		return nil
	}
}

// withNetwork attaches the container to nw, where the others reach it by
// aliases.
func withNetwork(aliases []string, nw *dockerNet) runOption {
	return func(s *runSpec) error {
		s.Network, s.Aliases = nw.name, aliases
		return nil
	}
}

// serverCPUShares is the CPU weight of a server's container, placed
// directly under the root CPU cgroup (FRESHREAD_DOCKER_CPU_SHARES; 0 keeps
// the engine's placement). With cgroup v1 and the cgroupfs driver the
// engine puts every container under one "docker" cgroup whose weight is
// that of a single process (1024); with the kernel's autogroups, a test
// and all the processes it starts weigh the same. So under a full CPU all
// the servers together get half of it however many backends are
// runnable, where each local server (and each PostgreSQL backend) is a
// session of its own, with its own weight (startCmd).
//
// The weight is that of four processes. More starves the engine itself:
// dockerd, containerd and the fuse-overlayfs processes serving the
// containers' files sit in the root cgroup with the weight of one
// process each, so with three containers each spinning two processes,
// three `docker run true` took 1.9 s at 1024, 4.5 s at 4096, 9.4 s at
// 8192 and 69 s at 32768 (1.1 s idle), long enough for a container start
// to miss its deadline. Less starves the servers: the resharding demo took
// 46-61 s at 1024 against 31-34 s at 4096 and 33-35 s at 32768, run
// alternately on one loaded machine.
var serverCPUShares = envInt64("FRESHREAD_DOCKER_CPU_SHARES", 4*1024)

// serverCgroup caches whether the engine places containers in cgroupfs
// paths, where "/" is a valid parent (the systemd driver takes slices).
var serverCgroup struct {
	once     sync.Once
	cgroupfs bool
}

// withServerCPU places the container as serverCPUShares says, when the
// engine's cgroup driver allows it; otherwise it leaves the engine's
// placement.
func withServerCPU(ctx context.Context) runOption {
	serverCgroup.once.Do(func() {
		info, err := dockerCall(ctx, helperRequest{Op: "info"})
		serverCgroup.cgroupfs = err == nil && info.CgroupDriver == "cgroupfs"
	})
	return func(s *runSpec) error {
		if serverCPUShares == 0 || !serverCgroup.cgroupfs {
			return nil
		}
		s.CgroupParent = "/"
		s.CPUShares = serverCPUShares
		return nil
	}
}

// runContainer creates and starts a container of image (the test image
// when empty), labelled with this process so that a later run removes it
// if this one dies without cleaning up; on failure it removes whatever was
// created.
func runContainer(ctx context.Context, what, image string, opts ...runOption) (*dockerContainer, error) {
	if image == "" {
		var err error
		if image, err = ensureTestImage(ctx); err != nil {
			return nil, err
		}
	}
	spec := &runSpec{Image: image, Labels: ownerLabels()}
	opts = append(opts, withServerCPU(ctx))
	var err error
	for _, o := range opts {
		if err = o(spec); err != nil {
			break
		}
	}
	var res helperResponse
	if err == nil {
		res, err = dockerCall(ctx, helperRequest{Op: "run", Run: spec})
	}
	if err != nil {
		return nil, fmt.Errorf("testcluster: start %s container (%s; %s=0 uses local binaries instead): %w", what, image, EnvDocker, err)
	}
	return &dockerContainer{id: res.ContainerID}, nil
}

// discard kills and removes a container whose data is not wanted any more
// (its volumes too); nil is a no-op. A server killed this way skips its
// shutdown, a few hundred milliseconds per container.
func discard(c *dockerContainer) error {
	if c == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return c.Terminate(ctx, 0)
}

// terminate removes a container and its volumes; nil is a no-op.
func terminate(c *dockerContainer) error {
	if c == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return c.Terminate(ctx, 10*time.Second)
}

// removeNetwork removes a network made by dockerNetwork; nil is a no-op.
func removeNetwork(n *dockerNet) error {
	if n == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := dockerCall(ctx, helperRequest{Op: "network_remove", Network: n.id})
	return err
}

// stopContainer stops c gracefully (the image's stop signal), killing it
// after timeout.
func stopContainer(ctx context.Context, c *dockerContainer, timeout time.Duration) error {
	if err := c.Stop(ctx, timeout); err != nil {
		return fmt.Errorf("testcluster: stop container: %w", err)
	}
	return nil
}

// waitContainer polls ready until it succeeds, the container exits, or
// 90 s (or ctx) run out. Errors carry the end of the container's log.
func waitContainer(ctx context.Context, c *dockerContainer, what string, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var last error
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 3*time.Second)
		last = ready(attempt)
		cancelAttempt()
		if last == nil {
			return nil
		}
		if st, err := c.Inspect(ctx); err == nil && !st.Running {
			return fmt.Errorf("testcluster: %s container exited (code %d) during start: %v: %s", what, st.ExitCode, last, containerLogTail(c))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testcluster: %s container not ready: %w (last error: %v): %s", what, ctx.Err(), last, containerLogTail(c))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// containerLogTail is the last lines of a container's output, for errors.
func containerLogTail(c *dockerContainer) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := c.Logs(ctx)
	if err != nil && len(b) == 0 {
		return "(no log: " + err.Error() + ")"
	}
	return lastLines(b, 15)
}

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

// dockerNetwork prepares a server group: a private network for the group
// and where published ports are reached and bound (dockerPublish, then
// onGateway).
func dockerNetwork(ctx context.Context) (host, bindIP string, nw *dockerNet, err error) {
	if host, bindIP, err = dockerPublish(ctx); err != nil {
		return "", "", nil, err
	}
	res, err := dockerCall(ctx, helperRequest{Op: "network_create", Labels: ownerLabels()})
	if err != nil {
		return "", "", nil, fmt.Errorf("testcluster: create docker network: %w", err)
	}
	nw = &dockerNet{id: res.NetworkID, name: res.NetworkName}
	host, bindIP = onGateway(ctx, nw.id, host, bindIP)
	return host, bindIP, nw, nil
}

// onGateway moves ports published on loopback to the gateway of network
// (an address of this machine's bridge), when the engine runs here.
// Connections to a published loopback port go through the engine's
// userland proxy (docker-proxy), a process that copies every byte; those to
// a local non-loopback address are forwarded by the kernel (the engine's
// DNAT rule): a SELECT 1 round trip 0.18 ms instead of 0.68 ms, measured
// with pgbench on this machine kind. The gateway is the network's, so it is
// stable across container restarts, and it is not reachable from other
// machines. Anything else is returned unchanged.
func onGateway(ctx context.Context, network, host, bindIP string) (string, string) {
	if bindIP != "127.0.0.1" {
		return host, bindIP
	}
	gw, err := gatewayOf(ctx, network)
	if err != nil || !isLocalAddr(gw) {
		return host, bindIP
	}
	return gw, gw
}

// startBoth runs the two node starts concurrently and joins their errors.
func startBoth(a, b func() error) error {
	errs := make(chan error, 2)
	go func() { errs <- a() }()
	go func() { errs <- b() }()
	return errors.Join(<-errs, <-errs)
}

// networkGateway is the host's address on a Docker network: what its
// containers reach this process at.
func networkGateway(ctx context.Context, nw *dockerNet) (string, error) {
	return gatewayOf(ctx, nw.id)
}

// gatewayOf is networkGateway for a network's ID or name ("bridge": the
// engine's default network).
func gatewayOf(ctx context.Context, nw string) (string, error) {
	info, err := dockerCall(ctx, helperRequest{Op: "network_inspect", Network: nw})
	if err != nil {
		return "", fmt.Errorf("testcluster: inspect network %s: %w", nw, err)
	}
	for _, gw := range info.Gateways {
		if ip := net.ParseIP(gw); ip != nil && ip.To4() != nil {
			return gw, nil
		}
	}
	// The engine's default network may name no gateway in its IPAM
	// configuration (only the subnet): the gateway is then the address of
	// its bridge interface (docker0), when that interface is this
	// machine's.
	if gw := bridgeAddr(info.Options["com.docker.network.bridge.name"]); gw != "" {
		return gw, nil
	}
	return "", fmt.Errorf("testcluster: network %s has no IPv4 gateway", info.NetworkName)
}

// bridgeAddr is the IPv4 address of the network interface named name, or
// "" when there is none on this machine.
func bridgeAddr(name string) string {
	if name == "" {
		return ""
	}
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return ""
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

// envInt64 is the environment variable name as a number, or def when it
// is unset or not a number.
func envInt64(name string, def int64) int64 {
	if v, err := strconv.ParseInt(os.Getenv(name), 10, 64); err == nil && v >= 0 {
		return v
	}
	return def
}
