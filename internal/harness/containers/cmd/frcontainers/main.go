// Command frcontainers performs the Docker operations of the container
// provider of internal/harness/testcluster with testcontainers-go and the
// Docker client, which live in this nested module so that a service
// importing freshread does not get them in its go.sum.
//
// It reads one JSON request a line on standard input and writes one JSON
// response a line on standard output, each with the request's id and an
// error string ("" on success); requests are served concurrently, so the
// responses come in any order. A request may carry a timeout. When standard
// input closes (the test process finished or died), it cancels what is in
// flight, removes every container and network it created, and exits, so
// that nothing is left behind.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// The protocol's types. The client, internal/harness/testcluster's
// docker_client.go, has its own copy of them: the two modules share no
// code (this one must not import freshread, and freshread must not require
// this one), so a change to one copy is made to the other.

// request is one operation (see ops for their names and fields).
type request struct {
	ID        uint64            `json:"id"`
	Op        string            `json:"op"`
	TimeoutMS int64             `json:"timeout_ms,omitempty"` // 0: none
	Container string            `json:"container,omitempty"`  // a container's ID
	Network   string            `json:"network,omitempty"`    // a network's ID or name
	Image     string            `json:"image,omitempty"`
	Label     string            `json:"label,omitempty"` // list: the label key to filter on
	Labels    map[string]string `json:"labels,omitempty"`
	Signal    string            `json:"signal,omitempty"`
	StopMS    int64             `json:"stop_ms,omitempty"` // stop, terminate: the grace period
	Run       *runSpec          `json:"run,omitempty"`
	Build     *buildSpec        `json:"build,omitempty"`
}

// runSpec is a container to create and start.
type runSpec struct {
	Image        string            `json:"image"`
	Entrypoint   []string          `json:"entrypoint,omitempty"`
	Cmd          []string          `json:"cmd,omitempty"`
	Env          map[string]string `json:"env,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Ports        []portBinding     `json:"ports,omitempty"`
	NetworkMode  string            `json:"network_mode,omitempty"`
	Network      string            `json:"network,omitempty"` // a network's name
	Aliases      []string          `json:"aliases,omitempty"` // on Network
	Binds        []bind            `json:"binds,omitempty"`
	CgroupParent string            `json:"cgroup_parent,omitempty"`
	CPUShares    int64             `json:"cpu_shares,omitempty"`
	StopSignal   string            `json:"stop_signal,omitempty"`
}

// portBinding publishes ContainerPort ("6379/tcp") on HostIP:HostPort.
type portBinding struct {
	ContainerPort string `json:"container_port"`
	HostIP        string `json:"host_ip"`
	HostPort      string `json:"host_port"`
}

// bind mounts the host's directory Source at Target.
type bind struct {
	Source string `json:"source"`
	Target string `json:"target"`
}

// buildSpec is an image to build from a tar of its context.
type buildSpec struct {
	Tag     string `json:"tag"`
	Base    string `json:"base"` // the build argument BASE
	Context []byte `json:"context"`
}

// response answers one request. A response with Step set is a build's
// progress ("Step N/M : ..."), not yet its answer.
type response struct {
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
	State        *state            `json:"state,omitempty"`
	Items        []item            `json:"items,omitempty"`
}

// state is what inspect reports of a container.
type state struct {
	ID           string              `json:"id"`
	Running      bool                `json:"running"`
	ExitCode     int                 `json:"exit_code"`
	Pid          int                 `json:"pid"`
	CgroupParent string              `json:"cgroup_parent"`
	IPs          map[string]string   `json:"ips,omitempty"`   // network name: address
	Ports        map[string][]string `json:"ports,omitempty"` // "6379/tcp": ["127.0.0.1:40001"]
}

// item is a listed container or network.
type item struct {
	ID     string            `json:"id"`
	Labels map[string]string `json:"labels,omitempty"`
}

func main() {
	// A terminal's Ctrl-C reaches the whole process group: this process
	// outlives the test process, and cleans up when its input closes.
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE)
	// Ryuk, testcontainers' reaper, is an image pulled from a registry;
	// this program removes what it made itself.
	if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") == "" {
		os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	s := newServer(os.Stdout)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	lines := make(chan []byte)
	go func() {
		defer close(lines)
		r := bufio.NewReader(os.Stdin)
		for {
			line, err := r.ReadBytes('\n')
			if len(line) > 0 {
				lines <- line
			}
			if err != nil {
				return
			}
		}
	}()
loop:
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				break loop
			}
			s.serve(line)
		case <-term:
			break loop
		}
	}
	s.shutdown()
}

// server serves requests and tracks what it created.
type server struct {
	ctx      context.Context // canceled at shutdown
	cancel   context.CancelFunc
	inFlight sync.WaitGroup

	outMu sync.Mutex
	out   *json.Encoder

	docker
}

func newServer(w io.Writer) *server {
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{ctx: ctx, cancel: cancel, out: json.NewEncoder(w)}
	s.docker.init()
	return s
}

// serve answers one request line in its own goroutine.
func (s *server) serve(line []byte) {
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		s.write(response{ID: req.ID, Error: "frcontainers: bad request: " + err.Error()})
		return
	}
	s.inFlight.Add(1)
	go func() {
		defer s.inFlight.Done()
		s.write(s.answer(req))
	}()
}

// answer runs req's operation, turning a panic (testcontainers panics
// when it finds no Docker host) into an error.
func (s *server) answer(req request) (res response) {
	ctx, cancel := s.ctx, context.CancelFunc(func() {})
	if req.TimeoutMS > 0 {
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutMS)*time.Millisecond)
	}
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			res = response{ID: req.ID, Error: fmt.Sprintf("docker client panicked: %v", p)}
		}
	}()
	op, ok := ops[req.Op]
	if !ok {
		return response{ID: req.ID, Error: "frcontainers: unknown op " + req.Op}
	}
	res = response{}
	if err := op(s, ctx, req, &res); err != nil {
		res = response{Error: err.Error()}
	}
	res.ID = req.ID
	return res
}

func (s *server) write(res response) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	_ = s.out.Encode(res) // a closed output: the test process is gone
}

// shutdown cancels the requests in flight, waits for them, and removes
// every container and network still tracked.
func (s *server) shutdown() {
	s.cancel()
	s.inFlight.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.removeAll(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "frcontainers: cleanup:", err)
	}
}
