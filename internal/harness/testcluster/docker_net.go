package testcluster

import (
	"context"
	"fmt"
	"os"
	"sync"
)

// How a server group's containers are networked.
//
// When the engine runs in this machine's network namespace (its default
// bridge's gateway is an address of this machine: a Linux engine on this
// machine, in this container or not), the containers share that network
// namespace, as local servers do: each server listens on loopback at its
// own port and reaches its peers there. Nothing is published and no network
// is made, so a container's start and removal skip the engine's virtual
// interfaces, NAT rules and userland proxy. Measured on this project's
// 2-core machine kind with the test image: `docker run -d` took 0.30 s
// with the host's network against 0.59 s with a published port, `docker
// rm -f` 0.18 s against 0.26 s, and a private network's create and
// remove, which every group needed, 0.20 s and 0.18 s more.
//
// Otherwise (an engine in a VM, a rootless engine in its own namespace,
// one on another machine, or FRESHREAD_DOCKER_HOST_NETWORK=0), a group
// whose servers talk to each other gets a private network on which they
// reach each other by name, and each server's port is published where this
// process can reach it (dockerPublish, onGateway).

// EnvDockerHostNetwork, set to 0, keeps containers off the host's network
// even when the engine shares it (a private network per server group).
const EnvDockerHostNetwork = "FRESHREAD_DOCKER_HOST_NETWORK"

// hostNetwork reports whether server containers run on the host's network:
// the engine shares this process's network namespace
// (engineOnThisNetwork), and EnvDockerHostNetwork is not 0.
func hostNetwork(ctx context.Context) bool {
	return os.Getenv(EnvDockerHostNetwork) != "0" && engineOnThisNetwork(ctx)
}

// engineNetProbe caches engineOnThisNetwork's answer for the process.
var engineNetProbe struct {
	once sync.Once
	ok   bool
}

// engineOnThisNetwork reports whether the gateway of the engine's default
// bridge network is an address of this machine, so that the engine's
// network namespace is this process's. Asked of the engine once per
// process.
func engineOnThisNetwork(ctx context.Context) bool {
	engineNetProbe.once.Do(func() {
		gw, err := gatewayOf(ctx, "bridge")
		engineNetProbe.ok = err == nil && isLocalAddr(gw)
	})
	return engineNetProbe.ok
}

// serverNet is the network of one server group.
type serverNet struct {
	onHost bool       // the host's network: servers listen on loopback
	nw     *dockerNet // the group's private network; nil on the host's or the default one
	host   string     // where this process connects
	bindIP string     // where ports are published ("": every interface)
}

// newServerNet prepares a group's network: the host's when hostNetwork
// says so; otherwise a private network when peers is true (the group's
// servers connect to each other by name), else the engine's default one.
func newServerNet(ctx context.Context, peers bool) (*serverNet, error) {
	if hostNetwork(ctx) {
		return &serverNet{onHost: true, host: "127.0.0.1", bindIP: "127.0.0.1"}, nil
	}
	if peers {
		host, bindIP, nw, err := dockerNetwork(ctx)
		if err != nil {
			return nil, err
		}
		return &serverNet{nw: nw, host: host, bindIP: bindIP}, nil
	}
	host, bindIP, err := dockerPublish(ctx)
	if err != nil {
		return nil, err
	}
	host, bindIP = onGateway(ctx, "bridge", host, bindIP)
	return &serverNet{host: host, bindIP: bindIP}, nil
}

// freePort is a port free a moment ago where the group's servers listen
// (on the host's network) or are published.
func (s *serverNet) freePort() (int, error) { return freePortOn(s.bindIP) }

// listenIP is the address a server listens on inside its container:
// loopback on the host's network, so that servers trusting every client
// are not reachable from other machines; every interface of the container
// otherwise.
func (s *serverNet) listenIP() string {
	if s.onHost {
		return "127.0.0.1"
	}
	return "0.0.0.0"
}

// peer is the host at which the group's other servers reach the server
// named name.
func (s *serverNet) peer(name string) string {
	if s.onHost {
		return "127.0.0.1"
	}
	return name
}

// attach puts a container on the group's network as name, its server
// listening on port (inside the container, and where this process
// connects).
func (s *serverNet) attach(name string, port int) runOption {
	return func(spec *runSpec) error {
		if s.onHost {
			spec.NetworkMode = "host"
			return nil
		}
		if s.nw != nil {
			if err := withNetwork([]string{name}, s.nw)(spec); err != nil {
				return fmt.Errorf("testcluster: attach %s to the group's network: %w", name, err)
			}
		}
		p := fmt.Sprintf("%d/tcp", port)
		return withFixedPort(p, s.bindIP, port)(spec)
	}
}

// remove removes the group's private network, if it has one.
func (s *serverNet) remove() error { return removeNetwork(s.nw) }

// processHost is the address at which the group's containers reach this
// process (a relay it runs): loopback on the host's network, else the
// gateway of the group's network, the host's address there.
func (s *serverNet) processHost(ctx context.Context) (string, error) {
	switch {
	case s.onHost:
		return "127.0.0.1", nil
	case s.nw != nil:
		return networkGateway(ctx, s.nw)
	}
	return gatewayOf(ctx, "bridge")
}
