package testcluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// A server in a container keeps its data in a directory of this machine's
// tmpfs (/dev/shm) mounted into the container, when the engine runs on this
// machine. Writing there is faster than to the image's volumes, which live
// on the engine's disk: copying the image's initialised PostgreSQL cluster
// (39 MB) into a container took 0.4 s to a tmpfs directory against 1.8 s
// to a volume on this machine kind, and the servers' own writes go the same
// way. The directory outlives a container's stop and start, as a volume
// does, and is removed with the server group (or, when the test process
// died, by the next one: removeOrphans). Durability is not wanted: these are
// test servers. With an engine elsewhere (a VM, a remote DOCKER_HOST) the
// host's directories are not the engine's, and the image's volumes are used.

// dataDirPrefix starts the name of every data directory, followed by the
// PID of the process that made it.
const dataDirPrefix = "freshread-testcluster-"

// dataDirRoot is where data directories are made: /dev/shm when it is a
// writable directory, else the system's temporary directory.
func dataDirRoot() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if f, err := os.CreateTemp("/dev/shm", dataDirPrefix+"probe-"); err == nil {
			f.Close()
			os.Remove(f.Name())
			return "/dev/shm"
		}
	}
	return os.TempDir()
}

// engineLocal reports whether the engine publishing on host runs on this
// machine (host is loopback or an address of this machine, such as the
// network gateway dockerNetwork returns), so that its bind mounts are this
// machine's directories.
func engineLocal(host string) bool {
	return host == "127.0.0.1" || host == "localhost" || isLocalAddr(host)
}

// newDataDir makes an empty directory for one server's data, or returns ""
// when the engine is not on this machine (the image's volume is used).
func newDataDir(host string) (string, error) {
	if !engineLocal(host) {
		return "", nil
	}
	dir, err := os.MkdirTemp(dataDirRoot(), dataDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", fmt.Errorf("testcluster: data directory: %w", err)
	}
	return dir, nil
}

// withDataDir mounts dir at target in the container and passes this
// process's uid (FRESHREAD_UID) so that the image's entrypoints run the
// server as that uid and the files stay removable by this process. An
// empty dir is a no-op.
func withDataDir(dir, target string) runOption {
	return func(spec *runSpec) error {
		if dir == "" {
			return nil
		}
		if spec.Env == nil {
			spec.Env = map[string]string{}
		}
		spec.Env["FRESHREAD_UID"] = strconv.Itoa(os.Getuid())
		spec.Binds = append(spec.Binds, bindMount{Source: dir, Target: target})
		return nil
	}
}

// removeDataDir removes a data directory made by newDataDir; "" is a no-op.
func removeDataDir(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("testcluster: remove data directory: %w", err)
	}
	return nil
}

// removeOrphanDataDirs removes the data directories of processes that no
// longer run.
func removeOrphanDataDirs() {
	for _, root := range []string{"/dev/shm", os.TempDir()} {
		matches, _ := filepath.Glob(filepath.Join(root, dataDirPrefix+"*"))
		for _, m := range matches {
			rest := strings.TrimPrefix(filepath.Base(m), dataDirPrefix)
			pidText, _, ok := strings.Cut(rest, "-")
			pid, err := strconv.Atoi(pidText)
			if !ok || err != nil || processAlive(pid) {
				continue
			}
			_ = os.RemoveAll(m)
		}
	}
}

// dockerServer is one server of a group: its name on the group's network,
// its published port, its data directory on this machine ("": the image's
// volume) and its container.
type dockerServer struct {
	name string
	port int
	dir  string
	c    *dockerContainer
}

// discardServers kills and removes the servers' containers, all at once (a
// throwaway server is not shut down), and then their data directories; nil
// servers are skipped.
func discardServers(servers ...*dockerServer) error {
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		if s == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = errors.Join(discard(s.c), removeDataDir(s.dir))
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
