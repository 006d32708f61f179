package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/go-connections/nat"
	"github.com/testcontainers/testcontainers-go"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"
)

// docker is the engine's client and what this process created.
type docker struct {
	cliMu sync.Mutex
	cli   *testcontainers.DockerClient

	mu         sync.Mutex
	containers map[string]*testcontainers.DockerContainer
	networks   map[string]*testcontainers.DockerNetwork
}

func (d *docker) init() {
	d.containers = map[string]*testcontainers.DockerContainer{}
	d.networks = map[string]*testcontainers.DockerNetwork{}
}

// client is the engine's client, made on first use.
func (d *docker) client(ctx context.Context) (*testcontainers.DockerClient, error) {
	d.cliMu.Lock()
	defer d.cliMu.Unlock()
	if d.cli != nil {
		return d.cli, nil
	}
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	d.cli = cli
	return cli, nil
}

// container is a container this process created.
func (d *docker) container(id string) (*testcontainers.DockerContainer, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.containers[id]
	if !ok {
		return nil, fmt.Errorf("no container %s made by this process", id)
	}
	return c, nil
}

// op is one operation: it reads req and fills res.
type op func(s *server, ctx context.Context, req request, res *response) error

var ops = map[string]op{
	// ping: one new client pings the engine (the probe).
	"ping": func(s *server, ctx context.Context, req request, res *response) error {
		cli, err := testcontainers.NewDockerClientWithOpts(ctx)
		if err != nil {
			return fmt.Errorf("docker client: %w", err)
		}
		defer cli.Close()
		if _, err := cli.Ping(ctx); err != nil {
			return fmt.Errorf("docker ping: %w", err)
		}
		return nil
	},
	// info: the engine's cgroup driver.
	"info": func(s *server, ctx context.Context, req request, res *response) error {
		cli, err := s.client(ctx)
		if err != nil {
			return err
		}
		info, err := cli.Info(ctx)
		if err != nil {
			return err
		}
		res.CgroupDriver = info.CgroupDriver
		return nil
	},
	// daemon_host: the host testcontainers reaches published ports at.
	"daemon_host": func(s *server, ctx context.Context, req request, res *response) error {
		p, err := testcontainers.NewDockerProvider()
		if err != nil {
			return fmt.Errorf("docker provider: %w", err)
		}
		defer p.Close()
		h, err := p.DaemonHost(ctx)
		if err != nil {
			return fmt.Errorf("docker host: %w", err)
		}
		res.Host = h
		return nil
	},
	// image_inspect: an error when the engine has no image req.Image.
	"image_inspect": func(s *server, ctx context.Context, req request, res *response) error {
		cli, err := s.client(ctx)
		if err != nil {
			return err
		}
		_, err = cli.ImageInspect(ctx, req.Image)
		return err
	},
	"image_build":     imageBuild,
	"network_create":  networkCreate,
	"network_inspect": networkInspect,
	// network_remove: removes req.Network (one this process created, or
	// any by ID: an orphan).
	"network_remove": func(s *server, ctx context.Context, req request, res *response) error {
		s.mu.Lock()
		nw := s.networks[req.Network]
		s.mu.Unlock()
		if nw != nil {
			if err := nw.Remove(ctx); err != nil {
				return err
			}
			s.mu.Lock()
			delete(s.networks, req.Network)
			s.mu.Unlock()
			return nil
		}
		cli, err := s.client(ctx)
		if err != nil {
			return err
		}
		return cli.NetworkRemove(ctx, req.Network)
	},
	"run": run,
	"start": func(s *server, ctx context.Context, req request, res *response) error {
		c, err := s.container(req.Container)
		if err != nil {
			return err
		}
		return c.Start(ctx)
	},
	// stop: the image's stop signal, then SIGKILL after req.StopMS.
	"stop": func(s *server, ctx context.Context, req request, res *response) error {
		c, err := s.container(req.Container)
		if err != nil {
			return err
		}
		timeout := time.Duration(req.StopMS) * time.Millisecond
		return c.Stop(ctx, &timeout)
	},
	"kill": func(s *server, ctx context.Context, req request, res *response) error {
		cli, err := s.client(ctx)
		if err != nil {
			return err
		}
		return cli.ContainerKill(ctx, req.Container, req.Signal)
	},
	// wait: until the container is not running.
	"wait": func(s *server, ctx context.Context, req request, res *response) error {
		cli, err := s.client(ctx)
		if err != nil {
			return err
		}
		wait, errs := cli.ContainerWait(ctx, req.Container, container.WaitConditionNotRunning)
		select {
		case <-wait:
			return nil
		case err := <-errs:
			return err
		}
	},
	"pause": func(s *server, ctx context.Context, req request, res *response) error {
		cli, err := s.client(ctx)
		if err != nil {
			return err
		}
		return cli.ContainerPause(ctx, req.Container)
	},
	"unpause": func(s *server, ctx context.Context, req request, res *response) error {
		cli, err := s.client(ctx)
		if err != nil {
			return err
		}
		return cli.ContainerUnpause(ctx, req.Container)
	},
	// terminate: stops (grace period req.StopMS) and removes a container
	// this process created, and its volumes.
	"terminate": func(s *server, ctx context.Context, req request, res *response) error {
		c, err := s.container(req.Container)
		if err != nil {
			return err
		}
		if err := c.Terminate(ctx, testcontainers.StopTimeout(time.Duration(req.StopMS)*time.Millisecond)); err != nil {
			return err
		}
		s.mu.Lock()
		delete(s.containers, req.Container)
		s.mu.Unlock()
		return nil
	},
	// remove: force-removes any container by ID, and its volumes (an
	// orphan of a test process that died).
	"remove": func(s *server, ctx context.Context, req request, res *response) error {
		cli, err := s.client(ctx)
		if err != nil {
			return err
		}
		return cli.ContainerRemove(ctx, req.Container, container.RemoveOptions{Force: true, RemoveVolumes: true})
	},
	// logs: the container's output (stdout and stderr), its first MiB.
	"logs": func(s *server, ctx context.Context, req request, res *response) error {
		c, err := s.container(req.Container)
		if err != nil {
			return err
		}
		rc, err := c.Logs(ctx)
		if err != nil {
			return err
		}
		defer rc.Close()
		b, err := io.ReadAll(io.LimitReader(rc, 1<<20))
		res.Logs = string(b)
		if err != nil && len(b) == 0 {
			return err
		}
		return nil
	},
	"inspect": func(s *server, ctx context.Context, req request, res *response) error {
		cli, err := s.client(ctx)
		if err != nil {
			return err
		}
		info, err := cli.ContainerInspect(ctx, req.Container)
		if err != nil {
			return err
		}
		st := &state{ID: info.ID}
		if info.State != nil {
			st.Running, st.ExitCode, st.Pid = info.State.Running, info.State.ExitCode, info.State.Pid
		}
		if info.HostConfig != nil {
			st.CgroupParent = info.HostConfig.CgroupParent
		}
		if info.NetworkSettings != nil {
			st.IPs = map[string]string{}
			for name, ep := range info.NetworkSettings.Networks {
				if ep != nil {
					st.IPs[name] = ep.IPAddress
				}
			}
			st.Ports = map[string][]string{}
			for p, bs := range info.NetworkSettings.Ports {
				for _, b := range bs {
					st.Ports[string(p)] = append(st.Ports[string(p)], b.HostIP+":"+b.HostPort)
				}
			}
		}
		res.State = st
		return nil
	},
	// list_containers: every container (running or not) labelled req.Label.
	"list_containers": func(s *server, ctx context.Context, req request, res *response) error {
		cli, err := s.client(ctx)
		if err != nil {
			return err
		}
		list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", req.Label))})
		if err != nil {
			return err
		}
		for _, c := range list {
			res.Items = append(res.Items, item{ID: c.ID, Labels: c.Labels})
		}
		return nil
	},
	// list_networks: every network labelled req.Label.
	"list_networks": func(s *server, ctx context.Context, req request, res *response) error {
		cli, err := s.client(ctx)
		if err != nil {
			return err
		}
		nets, err := cli.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(filters.Arg("label", req.Label))})
		if err != nil {
			return err
		}
		for _, n := range nets {
			res.Items = append(res.Items, item{ID: n.ID, Labels: n.Labels})
		}
		return nil
	},
}

// run creates and starts a container; on failure it removes whatever was
// created.
func run(s *server, ctx context.Context, req request, res *response) error {
	spec := req.Run
	if spec == nil {
		return errors.New("run: no container")
	}
	var opts []testcontainers.ContainerCustomizer
	if len(spec.Entrypoint) > 0 {
		opts = append(opts, testcontainers.WithEntrypoint(spec.Entrypoint...))
	}
	if len(spec.Cmd) > 0 {
		opts = append(opts, testcontainers.WithCmd(spec.Cmd...))
	}
	if len(spec.Env) > 0 {
		opts = append(opts, testcontainers.WithEnv(spec.Env))
	}
	if len(spec.Labels) > 0 {
		opts = append(opts, testcontainers.WithLabels(spec.Labels))
	}
	if spec.StopSignal != "" {
		opts = append(opts, testcontainers.WithConfigModifier(func(c *container.Config) { c.StopSignal = spec.StopSignal }))
	}
	if spec.Network != "" {
		opts = append(opts, tcnetwork.WithNetworkName(spec.Aliases, spec.Network))
	}
	opts = append(opts, testcontainers.CustomizeRequestOption(func(req *testcontainers.GenericContainerRequest) error {
		for _, p := range spec.Ports {
			req.ExposedPorts = append(req.ExposedPorts, p.ContainerPort)
		}
		req.HostConfigModifier = func(hc *container.HostConfig) {
			if spec.NetworkMode != "" {
				hc.NetworkMode = container.NetworkMode(spec.NetworkMode)
			}
			for _, p := range spec.Ports {
				if hc.PortBindings == nil {
					hc.PortBindings = nat.PortMap{}
				}
				hc.PortBindings[nat.Port(p.ContainerPort)] = []nat.PortBinding{{HostIP: p.HostIP, HostPort: p.HostPort}}
			}
			for _, b := range spec.Binds {
				hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: b.Source, Target: b.Target})
			}
			if spec.CgroupParent != "" {
				hc.CgroupParent = spec.CgroupParent
			}
			if spec.CPUShares != 0 {
				hc.CPUShares = spec.CPUShares
			}
		}
		return nil
	}))
	c, err := testcontainers.Run(ctx, spec.Image, opts...)
	if c != nil {
		// Tracked at once, so that a shutdown removes it even when Run
		// failed after creating it.
		s.mu.Lock()
		s.containers[c.GetContainerID()] = c
		s.mu.Unlock()
	}
	if err != nil {
		if c != nil {
			tctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if c.Terminate(tctx, testcontainers.StopTimeout(10*time.Second)) == nil {
				s.mu.Lock()
				delete(s.containers, c.GetContainerID())
				s.mu.Unlock()
			}
		}
		return err
	}
	res.ContainerID = c.GetContainerID()
	return nil
}

// networkCreate creates a network labelled req.Labels.
func networkCreate(s *server, ctx context.Context, req request, res *response) error {
	nw, err := tcnetwork.New(ctx, tcnetwork.WithLabels(req.Labels))
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.networks[nw.ID] = nw
	s.mu.Unlock()
	res.NetworkID, res.NetworkName = nw.ID, nw.Name
	return nil
}

// networkInspect reports a network's name, its IPAM gateways and its
// driver options.
func networkInspect(s *server, ctx context.Context, req request, res *response) error {
	cli, err := s.client(ctx)
	if err != nil {
		return err
	}
	info, err := cli.NetworkInspect(ctx, req.Network, network.InspectOptions{})
	if err != nil {
		return err
	}
	res.NetworkID, res.NetworkName, res.Options = info.ID, info.Name, info.Options
	for _, c := range info.IPAM.Config {
		res.Gateways = append(res.Gateways, c.Gateway)
	}
	return nil
}

// imageBuild builds req.Build's context as its tag, sending each
// "Step N/M : ..." line of the engine's output as a progress response.
func imageBuild(s *server, ctx context.Context, req request, res *response) error {
	b := req.Build
	if b == nil {
		return errors.New("image_build: no build")
	}
	cli, err := s.client(ctx)
	if err != nil {
		return err
	}
	base := b.Base
	out, err := cli.ImageBuild(ctx, bytes.NewReader(b.Context), build.ImageBuildOptions{
		Tags:        []string{b.Tag},
		BuildArgs:   map[string]*string{"BASE": &base},
		Remove:      true,
		ForceRemove: true,
	})
	if err != nil {
		return err
	}
	defer out.Body.Close()
	return readBuildStream(out.Body, func(step string) { s.write(response{ID: req.ID, Step: step}) })
}

// readBuildStream reads the engine's build output (JSON messages) to the
// end and returns the error it reports, with the last lines of output.
// step, when not nil, is called with each "Step N/M : ..." line.
func readBuildStream(r io.Reader, step func(string)) error {
	dec := json.NewDecoder(r)
	var tail []string
	for {
		var msg struct {
			Stream      string `json:"stream"`
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&msg); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read build output: %w", err)
		}
		if s := strings.TrimSpace(msg.Stream); s != "" {
			if step != nil && strings.HasPrefix(s, "Step ") {
				step(s)
			}
			tail = append(tail, s)
			if len(tail) > 15 {
				tail = tail[1:]
			}
		}
		if msg.Error != "" {
			return fmt.Errorf("%s (last output: %s)", msg.Error, strings.Join(tail, " | "))
		}
	}
}

// removeAll kills and removes every container this process created, all
// at once, then its networks.
func (d *docker) removeAll(ctx context.Context) error {
	d.mu.Lock()
	cs, nws := d.containers, d.networks
	d.containers, d.networks = map[string]*testcontainers.DockerContainer{}, map[string]*testcontainers.DockerNetwork{}
	d.mu.Unlock()
	errs := make(chan error, len(cs))
	for _, c := range cs {
		go func() { errs <- c.Terminate(ctx, testcontainers.StopTimeout(0)) }()
	}
	var all []error
	for range cs {
		all = append(all, <-errs)
	}
	for _, nw := range nws {
		all = append(all, nw.Remove(ctx))
	}
	return errors.Join(all...)
}
