package testcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// spawnRequest asks the spawner goroutine to start a command.
type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	spawnOnce sync.Once
	spawnCh   chan spawnRequest
)

// startCmd starts cmd from one goroutine locked to its OS thread for the
// life of the process. Children get Pdeathsig=SIGKILL, and Linux delivers it
// when the *thread* that forked them exits; pinning every fork to one thread
// that never exits means servers die with the test binary, also when a test
// panics and no deferred cleanup runs. No orphaned servers.
//
// Each server is a session of its own (setsid, which makes it its process
// group's leader too), as a service on its own host would be: with the
// kernel's autogroups a session shares one CPU weight, so a server left in
// the test's session shared the test's weight with the test and whatever
// it starts (the resharding demo's worker processes), and under a full CPU
// everything that waited on it was served more slowly than with the
// container provider, whose servers each have a CPU cgroup of their own.
// PostgreSQL's backends make sessions of their own anyway.
func startCmd(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnRequest)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for req := range spawnCh {
				req.done <- req.cmd.Start()
			}
		}()
	})
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	cmd.SysProcAttr.Setsid = true
	req := spawnRequest{cmd: cmd, done: make(chan error, 1)}
	spawnCh <- req
	return <-req.done
}

// osUser is the unprivileged account a server runs as. When the tests run as
// root (CI does), PostgreSQL refuses to start, so servers run as "postgres"
// or "mysql"; otherwise they run as the current user.
type osUser struct {
	name     string
	uid, gid uint32
	asSelf   bool
}

func serverUser(name string) (osUser, error) {
	if os.Geteuid() != 0 {
		return osUser{name: "self", asSelf: true}, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return osUser{}, fmt.Errorf("testcluster: running as root needs the unprivileged user %q to start servers: %w", name, err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return osUser{name: name, uid: uint32(uid), gid: uint32(gid)}, nil
}

// command builds an exec.Cmd that runs as u.
func (u osUser) command(ctx context.Context, logPath string, name string, args ...string) (*exec.Cmd, error) {
	var cmd *exec.Cmd
	if ctx != nil {
		cmd = exec.CommandContext(ctx, name, args...)
	} else {
		cmd = exec.Command(name, args...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if !u.asSelf {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: u.uid, Gid: u.gid}
	}
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
	if logPath != "" {
		f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("testcluster: open log: %w", err)
		}
		cmd.Stdout, cmd.Stderr = f, f
		u.chown(logPath)
	}
	return cmd, nil
}

// run runs a short-lived tool (initdb, pg_basebackup, ...) as u and returns
// its combined output in the error when it fails.
func (u osUser) run(ctx context.Context, name string, args ...string) error {
	cmd, err := u.command(ctx, "", name, args...)
	if err != nil {
		return err
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("testcluster: %s: %w: %s", name, err, lastLines(out, 10))
	}
	return nil
}

// chown gives path to u (a no-op when running as self).
func (u osUser) chown(path string) {
	if !u.asSelf {
		_ = os.Chown(path, int(u.uid), int(u.gid))
	}
}

// mkdir creates a directory owned by u.
func (u osUser) mkdir(path string, perm os.FileMode) error {
	if err := os.MkdirAll(path, perm); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	if err := os.Chmod(path, perm); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	u.chown(path)
	return nil
}

// server is one long-running server process.
type server struct {
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	// stopSignal is sent for a graceful stop.
	stopSignal os.Signal
}

func (s *server) start(cmd *exec.Cmd) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("testcluster: server already running")
	}
	if err := startCmd(cmd); err != nil {
		return fmt.Errorf("testcluster: start %s: %w", cmd.Path, err)
	}
	s.cmd = cmd
	s.done = make(chan struct{})
	go func(done chan struct{}) {
		err := cmd.Wait()
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(done)
	}(s.done)
	return nil
}

// exited reports whether the process has exited.
func (s *server) exited() bool {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	return done == nil || closed(done)
}

// closed reports whether done is closed.
func closed(done chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// crashed reports whether the process exited by itself: it was started,
// and no stop or kill took it before it ended.
func (s *server) crashed() bool {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	// Not when never started, nor when a stop or kill took it.
	return cmd != nil && done != nil && closed(done)
}

// take hands the running process to a stop or kill (nil: none runs).
func (s *server) take() (*exec.Cmd, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	return cmd, done
}

// stop stops the server gracefully, killing it after timeout.
func (s *server) stop(timeout time.Duration) {
	cmd, done := s.take()
	if cmd == nil {
		return
	}
	sig := s.stopSignal
	if sig == nil {
		sig = syscall.SIGTERM
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(timeout):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// kill kills the server at once (SIGKILL to its process group: no
// shutdown, nothing flushed) and waits until it has exited.
func (s *server) kill() {
	cmd, done := s.take()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// signal sends sig to the running server (SIGSTOP, SIGCONT...).
func (s *server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		return errors.New("testcluster: server not running")
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("testcluster: signal %v: %w", sig, err)
	}
	return nil
}

// waitPort waits until something accepts connections on 127.0.0.1:port, or
// the server exits, or ctx ends.
func waitPort(ctx context.Context, s *server, port int) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if s.exited() {
			return fmt.Errorf("testcluster: server on port %d exited during start", port)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testcluster: server on port %d not ready: %w", port, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func lastLines(b []byte, n int) string {
	lines := 0
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' && i != len(b)-1 {
			lines++
			if lines == n {
				return string(b[i+1:])
			}
		}
	}
	return string(b)
}

// lookPath finds a binary on PATH or in the given directories.
func lookPath(name string, dirs ...string) (string, error) {
	for _, d := range dirs {
		p := d + "/" + name
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return exec.LookPath(name)
}
