package testcluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"
)

// The container provider's Docker operations run in a helper program,
// frcontainers, of the nested module internal/harness/containers, which
// holds testcontainers-go and the Docker client: as a dependency of this
// package they would be in the go.sum of every service importing freshread
// (docs/dependencies.md). The helper is built on first use, once per test
// process (Go's build cache makes that cheap after the first time), and
// started once; it serves JSON requests, one a line, on its standard input
// and answers on its standard output. When the test process ends, however
// it ends, the helper's input closes and it removes every container and
// network it created.

// helperModule is the nested module's directory, next to this package's.
func helperModule() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("testcluster: cannot locate the container helper's module (no caller information)")
	}
	dir := filepath.Join(filepath.Dir(file), "..", "containers")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("testcluster: the container helper's module (internal/harness/containers): %w", err)
	}
	return dir, nil
}

// helperBinary builds the helper into the user's cache directory
// (freshread/frcontainers) and returns its path. Test processes building
// at once take turns through a lock file; go build leaves an up-to-date
// binary alone.
func helperBinary() (string, error) {
	src, err := helperModule()
	if err != nil {
		return "", err
	}
	root, err := os.UserCacheDir()
	if err != nil {
		root = os.TempDir()
	}
	dir := filepath.Join(root, "freshread")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("testcluster: container helper: %w", err)
	}
	unlock, err := lockFile(filepath.Join(dir, "frcontainers.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	bin := filepath.Join(dir, "frcontainers")
	goTool := "go"
	if p, err := exec.LookPath("go"); err != nil {
		if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
			goTool = p
		}
	} else {
		goTool = p
	}
	cmd := exec.Command(goTool, "build", "-C", src, "-o", bin, "./cmd/frcontainers")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("testcluster: build the container helper (go build -C %s ./cmd/frcontainers): %w: %s", src, err, lastLines(out, 15))
	}
	return bin, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// dockerHelper is the running helper process.
type dockerHelper struct {
	in     io.WriteCloser
	stderr *tailBuffer

	mu      sync.Mutex // in, next, pending, dead
	next    uint64
	pending map[uint64]*helperCall
	dead    error // the helper exited: every call fails with it
}

type helperCall struct {
	done chan helperResponse
	step func(string) // a build's progress lines
}

var dockerHelperProc struct {
	once sync.Once
	h    *dockerHelper
	err  error
}

// theHelper builds and starts the helper, once per process.
func theHelper() (*dockerHelper, error) {
	dockerHelperProc.once.Do(func() {
		dockerHelperProc.h, dockerHelperProc.err = startHelper()
	})
	return dockerHelperProc.h, dockerHelperProc.err
}

func startHelper() (*dockerHelper, error) {
	bin, err := helperBinary()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin)
	h := &dockerHelper{pending: map[uint64]*helperCall{}, stderr: &tailBuffer{}}
	// Pipes, not this process's files: the helper outlives this process
	// for its cleanup, and must not hold go test's output open.
	cmd.Stderr = h.stderr
	if h.in, err = cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("testcluster: container helper: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("testcluster: container helper: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("testcluster: start the container helper %s: %w", bin, err)
	}
	go h.read(out, cmd)
	return h, nil
}

// read delivers the helper's responses until its output ends, then fails
// every call in flight and every later one.
func (h *dockerHelper) read(out io.Reader, cmd *exec.Cmd) {
	r := bufio.NewReader(out)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			var res helperResponse
			if jerr := json.Unmarshal(line, &res); jerr == nil {
				h.deliver(res)
			}
		}
		if err != nil {
			break
		}
	}
	werr := cmd.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dead = fmt.Errorf("testcluster: the container helper exited (%v): %s", werr, h.stderr.String())
	for id, c := range h.pending {
		c.done <- helperResponse{ID: id, Error: h.dead.Error()}
		delete(h.pending, id)
	}
}

func (h *dockerHelper) deliver(res helperResponse) {
	h.mu.Lock()
	c := h.pending[res.ID]
	if c != nil && res.Step == "" {
		delete(h.pending, res.ID)
	}
	h.mu.Unlock()
	switch {
	case c == nil:
	case res.Step != "":
		if c.step != nil {
			c.step(res.Step)
		}
	default:
		c.done <- res
	}
}

// call sends req and waits for its answer or for ctx; the request carries
// ctx's deadline. step, when not nil, gets a build's progress lines.
func (h *dockerHelper) call(ctx context.Context, req helperRequest, step func(string)) (helperResponse, error) {
	if dl, ok := ctx.Deadline(); ok && req.TimeoutMS == 0 {
		req.TimeoutMS = max(time.Until(dl).Milliseconds(), 1)
	}
	c := &helperCall{done: make(chan helperResponse, 1), step: step}
	h.mu.Lock()
	if h.dead != nil {
		h.mu.Unlock()
		return helperResponse{}, h.dead
	}
	h.next++
	req.ID = h.next
	h.pending[req.ID] = c
	line, err := json.Marshal(req)
	if err == nil {
		_, err = h.in.Write(append(line, '\n'))
	}
	if err != nil {
		delete(h.pending, req.ID)
		h.mu.Unlock()
		return helperResponse{}, fmt.Errorf("testcluster: container helper: %w", err)
	}
	h.mu.Unlock()
	select {
	case res := <-c.done:
		if res.Error != "" {
			return res, errors.New(res.Error)
		}
		return res, nil
	case <-ctx.Done():
		h.mu.Lock()
		delete(h.pending, req.ID)
		h.mu.Unlock()
		return helperResponse{}, ctx.Err()
	}
}

// dockerCall sends req to the helper, started if need be.
func dockerCall(ctx context.Context, req helperRequest) (helperResponse, error) {
	h, err := theHelper()
	if err != nil {
		return helperResponse{}, err
	}
	return h.call(ctx, req, nil)
}

// tailBuffer keeps the last 4 KiB written to it.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.b))
}

// The helper's protocol: a copy of the types of
// internal/harness/containers/cmd/frcontainers, which documents each
// operation. The two modules share no code (freshread must not require the
// nested module, nor the nested module import freshread), so a change to
// one copy is made to the other.

type helperRequest struct {
	ID        uint64            `json:"id"`
	Op        string            `json:"op"`
	TimeoutMS int64             `json:"timeout_ms,omitempty"`
	Container string            `json:"container,omitempty"`
	Network   string            `json:"network,omitempty"`
	Image     string            `json:"image,omitempty"`
	Label     string            `json:"label,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Signal    string            `json:"signal,omitempty"`
	StopMS    int64             `json:"stop_ms,omitempty"`
	Run       *runSpec          `json:"run,omitempty"`
	Build     *buildSpec        `json:"build,omitempty"`
}

// runSpec is a container to create and start (runContainer's options fill
// it in).
type runSpec struct {
	Image        string            `json:"image"`
	Entrypoint   []string          `json:"entrypoint,omitempty"`
	Cmd          []string          `json:"cmd,omitempty"`
	Env          map[string]string `json:"env,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Ports        []portBinding     `json:"ports,omitempty"`
	NetworkMode  string            `json:"network_mode,omitempty"`
	Network      string            `json:"network,omitempty"`
	Aliases      []string          `json:"aliases,omitempty"`
	Binds        []bindMount       `json:"binds,omitempty"`
	CgroupParent string            `json:"cgroup_parent,omitempty"`
	CPUShares    int64             `json:"cpu_shares,omitempty"`
	StopSignal   string            `json:"stop_signal,omitempty"`
}

type portBinding struct {
	ContainerPort string `json:"container_port"`
	HostIP        string `json:"host_ip"`
	HostPort      string `json:"host_port"`
}

type bindMount struct {
	Source string `json:"source"`
	Target string `json:"target"`
}

type buildSpec struct {
	Tag     string `json:"tag"`
	Base    string `json:"base"`
	Context []byte `json:"context"`
}

type helperResponse struct {
	ID           uint64            `json:"id"`
	Error        string            `json:"error"`
	Step         string            `json:"step,omitempty"`
	ContainerID  string            `json:"container_id,omitempty"`
	NetworkID    string            `json:"network_id,omitempty"`
	NetworkName  string            `json:"network_name,omitempty"`
	Host         string            `json:"host,omitempty"`
	CgroupDriver string            `json:"cgroup_driver,omitempty"`
	Gateways     []string          `json:"gateways,omitempty"`
	Options      map[string]string `json:"options,omitempty"`
	Logs         string            `json:"logs,omitempty"`
	State        *containerState   `json:"state,omitempty"`
	Items        []labelled        `json:"items,omitempty"`
}

// containerState is what inspect reports of a container.
type containerState struct {
	ID           string              `json:"id"`
	Running      bool                `json:"running"`
	ExitCode     int                 `json:"exit_code"`
	Pid          int                 `json:"pid"`
	CgroupParent string              `json:"cgroup_parent"`
	IPs          map[string]string   `json:"ips,omitempty"`
	Ports        map[string][]string `json:"ports,omitempty"`
}

// labelled is a listed container or network.
type labelled struct {
	ID     string            `json:"id"`
	Labels map[string]string `json:"labels,omitempty"`
}

// dockerContainer is a container the helper created.
type dockerContainer struct{ id string }

// dockerNet is a network the helper created.
type dockerNet struct{ id, name string }

func (c *dockerContainer) simple(ctx context.Context, op string, req helperRequest) error {
	req.Op, req.Container = op, c.id
	_, err := dockerCall(ctx, req)
	return err
}

// Start starts the stopped container again.
func (c *dockerContainer) Start(ctx context.Context) error {
	return c.simple(ctx, "start", helperRequest{})
}

// Stop sends the image's stop signal, then SIGKILL after timeout.
func (c *dockerContainer) Stop(ctx context.Context, timeout time.Duration) error {
	return c.simple(ctx, "stop", helperRequest{StopMS: timeout.Milliseconds()})
}

// Terminate stops the container (SIGKILL after stop) and removes it and its
// volumes.
func (c *dockerContainer) Terminate(ctx context.Context, stop time.Duration) error {
	return c.simple(ctx, "terminate", helperRequest{StopMS: stop.Milliseconds()})
}

// Kill sends signal to the container's first process.
func (c *dockerContainer) Kill(ctx context.Context, signal string) error {
	return c.simple(ctx, "kill", helperRequest{Signal: signal})
}

// WaitStopped returns once the container is not running.
func (c *dockerContainer) WaitStopped(ctx context.Context) error {
	return c.simple(ctx, "wait", helperRequest{})
}

func (c *dockerContainer) Pause(ctx context.Context) error {
	return c.simple(ctx, "pause", helperRequest{})
}
func (c *dockerContainer) Unpause(ctx context.Context) error {
	return c.simple(ctx, "unpause", helperRequest{})
}

// Inspect reports the container's state.
func (c *dockerContainer) Inspect(ctx context.Context) (*containerState, error) {
	res, err := dockerCall(ctx, helperRequest{Op: "inspect", Container: c.id})
	if err != nil {
		return nil, err
	}
	if res.State == nil {
		return nil, errors.New("testcluster: container helper: inspect answered no state")
	}
	return res.State, nil
}

// Logs is the container's output (its first MiB).
func (c *dockerContainer) Logs(ctx context.Context) ([]byte, error) {
	res, err := dockerCall(ctx, helperRequest{Op: "logs", Container: c.id})
	return []byte(res.Logs), err
}

// ownerLabels labels containers and networks with this process.
func ownerLabels() map[string]string {
	return map[string]string{ownerLabel: strconv.Itoa(os.Getpid())}
}
